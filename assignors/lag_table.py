"""The engine's lag per partition, as one int64 array instead of a dict.

A reading used to cost three lookups in million-entry dicts (old value, new value,
owner), each a few cache misses: 10 000 readings at a million partitions spent ~18 ms
reading and writing lag alone. Here a batch is one vectorised gather and scatter, and a
member's whole list is weighed in one gather.

Partition ``p`` of topic id ``t`` lives at ``offset[t] + p`` of a flat array, each topic in
a block of its own; a block that must grow (more partitions, or readings beyond them) moves
to the end, and the array is compacted when half of it is abandoned blocks. ``-1`` marks a
partition without a reading (lag is never negative); ``-2`` one whose lag does not fit in
64 bits (no Kafka lag does, but the API takes any int), kept in a dict beside.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from .ids import PART_BITS, PART_MASK

_UNKNOWN = -1
_BIG = -2
_INT64_MAX = 2**63 - 1


class LagTable:
    __slots__ = ("_big", "_count", "_flat", "_offset", "_size", "_used")

    def __init__(self) -> None:
        self._flat: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        #: topic id -> first slot of its block, and the block's length.
        self._offset = np.zeros(0, dtype=np.int64)
        self._size = np.zeros(0, dtype=np.int64)
        #: slots in live blocks; partitions with a reading.
        self._used = 0
        self._count = 0
        self._big: dict[int, int] = {}

    @classmethod
    def of(cls, pids: Sequence[int], values: Sequence[int]) -> LagTable:
        table = cls()
        table.swap(pids, values)
        return table

    def __len__(self) -> int:
        return self._count

    def get(self, pid: int, default: int = 0) -> int:
        t, p = pid >> PART_BITS, pid & PART_MASK
        if t >= len(self._size) or p >= self._size.item(t):
            return default
        value: int = self._flat.item(self._offset.item(t) + p)
        if value < 0:
            return default if value == _UNKNOWN else self._big[pid]
        return value

    def many(self, pids: Sequence[int]) -> list[int]:
        """Each partition's lag (0 without a reading), in order."""
        if not pids:
            return []
        got = self._gather(np.fromiter(pids, np.int64, len(pids)))
        return self._values(pids, got)

    def swap(self, pids: Sequence[int], values: Sequence[int]) -> list[int]:
        """Set each partition's lag and return what it was (0 without a reading). The
        pids are distinct: they come from a lag map's keys."""
        if not pids:
            return []
        at = np.fromiter(pids, np.int64, len(pids))
        self._fit(at)
        slots = self._slots(at)
        old = self._flat[slots]
        self._count += int(np.count_nonzero(old == _UNKNOWN))
        out = self._values(pids, old)
        if self._big:
            for i in np.flatnonzero(old == _BIG).tolist():
                del self._big[pids[i]]
        try:
            new = np.fromiter(values, np.int64, len(values))
        except OverflowError:
            new = np.fromiter((_BIG if v > _INT64_MAX else v for v in values), np.int64)
            self._big.update((p, v) for p, v in zip(pids, values, strict=True) if v > _INT64_MAX)
        self._flat[slots] = new
        return out

    def discard(self, pids: Iterable[int]) -> None:
        for pid in pids:
            t, p = pid >> PART_BITS, pid & PART_MASK
            if t < len(self._size) and p < self._size.item(t):
                slot = self._offset.item(t) + p
                if self._flat.item(slot) != _UNKNOWN:
                    self._flat[slot] = _UNKNOWN
                    self._count -= 1
                    self._big.pop(pid, None)

    def items(self) -> tuple[list[int], list[int]]:
        """Ascending pids with a reading, and their lag."""
        pids: list[int] = []
        values: list[int] = []
        for t in range(len(self._size)):
            start, size = self._offset.item(t), self._size.item(t)
            block = self._flat[start : start + size]
            known = np.flatnonzero(block != _UNKNOWN)
            found = ((t << PART_BITS) + known).tolist()
            pids += found
            values += self._values(found, block[known])
        return pids, values

    def _values(self, pids: Sequence[int], got: NDArray[np.int64]) -> list[int]:
        """Gathered slots as lags: 0 without a reading, big ones from beside."""
        out: list[int] = np.maximum(got, 0).tolist()
        if self._big:
            for i in np.flatnonzero(got == _BIG).tolist():
                out[i] = self._big[pids[i]]
        return out

    # ------------------------------------------------------------------ layout

    def _slots(self, pids: NDArray[np.int64]) -> NDArray[np.int64]:
        slots: NDArray[np.int64] = self._offset[pids >> PART_BITS] + (pids & PART_MASK)
        return slots

    def _gather(self, pids: NDArray[np.int64]) -> NDArray[np.int64]:
        t, p = pids >> PART_BITS, pids & PART_MASK
        inside = t < len(self._size)
        inside[inside] &= p[inside] < self._size[t[inside]]
        got = np.full(len(pids), _UNKNOWN, dtype=np.int64)
        got[inside] = self._flat[self._offset[t[inside]] + p[inside]]
        return got

    def _fit(self, pids: NDArray[np.int64]) -> None:
        """Grow the blocks so that every pid has a slot: the short ones move, together,
        to one new stretch at the end."""
        topics = pids >> PART_BITS
        n = int(topics.max()) + 1
        if n > len(self._size):
            grow = np.zeros(n - len(self._size), dtype=np.int64)
            self._offset = np.concatenate([self._offset, grow])
            self._size = np.concatenate([self._size, grow])
        need = np.zeros(n, dtype=np.int64)
        np.maximum.at(need, topics, (pids & PART_MASK) + 1)
        short = np.flatnonzero(need > self._size[:n])
        if not len(short):
            return
        sizes = self._size[short]
        grown = np.maximum(need[short], 2 * sizes)
        starts = len(self._flat) + np.concatenate([[0], np.cumsum(grown)[:-1]])
        stretch = np.full(int(grown.sum()), _UNKNOWN, dtype=np.int64)
        base = len(self._flat)
        for old, size, start in zip(
            self._offset[short].tolist(), sizes.tolist(), starts.tolist(), strict=True
        ):
            stretch[start - base : start - base + size] = self._flat[old : old + size]
        self._flat = np.concatenate([self._flat, stretch])
        self._offset[short] = starts
        self._size[short] = grown
        self._used += int(grown.sum() - sizes.sum())
        if self._used * 2 < len(self._flat):
            self._compact()

    def _compact(self) -> None:
        self._flat = np.concatenate(
            [
                self._flat[o : o + s]
                for o, s in zip(self._offset.tolist(), self._size.tolist(), strict=True)
            ]
        )
        self._offset = np.concatenate([[0], np.cumsum(self._size)[:-1]]).astype(np.int64)
