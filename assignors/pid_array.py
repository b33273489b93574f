"""One int64 per partition, addressed by pid, in a flat array: what the engine keeps per
partition and reads in batches (lag, owner) without a million-entry dict.

Partition ``p`` of topic id ``t`` lives at ``offset[t] + p``, each topic in a block of
its own; a block that must grow (more partitions, or values for partitions beyond them)
moves to the end, and the array is compacted when half of it is abandoned blocks. A slot
never written holds ``fill``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from .ids import PART_BITS, PART_MASK


class PidArray:
    __slots__ = ("fill", "flat", "offset", "size", "used")

    def __init__(self, fill: int) -> None:
        self.fill = fill
        self.flat: NDArray[np.int64] = np.empty(0, dtype=np.int64)
        #: topic id -> first slot of its block, and the block's length.
        self.offset = np.zeros(0, dtype=np.int64)
        self.size = np.zeros(0, dtype=np.int64)
        #: slots in live blocks.
        self.used = 0

    def item(self, pid: int) -> int:
        t, p = pid >> PART_BITS, pid & PART_MASK
        if t >= len(self.size) or p >= self.size.item(t):
            return self.fill
        value: int = self.flat.item(self.offset.item(t) + p)
        return value

    def gather(self, pids: NDArray[np.int64]) -> NDArray[np.int64]:
        """Each pid's value, ``fill`` where none was written."""
        t, p = pids >> PART_BITS, pids & PART_MASK
        inside = t < len(self.size)
        inside[inside] &= p[inside] < self.size[t[inside]]
        got = np.full(len(pids), self.fill, dtype=np.int64)
        got[inside] = self.flat[self.offset[t[inside]] + p[inside]]
        return got

    def slots(self, pids: NDArray[np.int64]) -> NDArray[np.int64]:
        """Where each pid lives, growing blocks first where it has no slot yet."""
        self._fit(pids)
        slots: NDArray[np.int64] = self.offset[pids >> PART_BITS] + (pids & PART_MASK)
        return slots

    def put(self, pids: NDArray[np.int64], values: NDArray[np.int64] | int) -> None:
        if len(pids):
            slots = self.slots(pids)  # first: it may move ``flat``
            self.flat[slots] = values

    def put_one(self, pid: int, value: int) -> None:
        t, p = pid >> PART_BITS, pid & PART_MASK
        if t < len(self.size) and p < self.size.item(t):
            self.flat[self.offset.item(t) + p] = value
        else:
            self.put(np.array([pid], dtype=np.int64), value)

    def blocks(self) -> Iterator[tuple[int, NDArray[np.int64]]]:
        """Each topic id with its block (a view)."""
        for t, (start, size) in enumerate(
            zip(self.offset.tolist(), self.size.tolist(), strict=True)
        ):
            yield t, self.flat[start : start + size]

    def _fit(self, pids: NDArray[np.int64]) -> None:
        """Grow the blocks so that every pid has a slot: the short ones move, together,
        to one new stretch at the end."""
        if not len(pids):
            return
        topics = pids >> PART_BITS
        n = int(topics.max()) + 1
        if n <= len(self.size) and np.all((pids & PART_MASK) < self.size[topics]):
            return
        if n > len(self.size):
            grow = np.zeros(n - len(self.size), dtype=np.int64)
            self.offset = np.concatenate([self.offset, grow])
            self.size = np.concatenate([self.size, grow])
        need = np.zeros(n, dtype=np.int64)
        np.maximum.at(need, topics, (pids & PART_MASK) + 1)
        short = np.flatnonzero(need > self.size[:n])
        if not len(short):
            return
        sizes = self.size[short]
        grown = np.maximum(need[short], 2 * sizes)
        base = len(self.flat)
        starts = base + np.concatenate([[0], np.cumsum(grown)[:-1]])
        stretch = np.full(int(grown.sum()), self.fill, dtype=np.int64)
        for old, size, start in zip(
            self.offset[short].tolist(), sizes.tolist(), starts.tolist(), strict=True
        ):
            stretch[start - base : start - base + size] = self.flat[old : old + size]
        self.flat = np.concatenate([self.flat, stretch])
        self.offset[short] = starts
        self.size[short] = grown
        self.used += int(grown.sum() - sizes.sum())
        if self.used * 2 < len(self.flat):
            self.flat = np.concatenate([block for _, block in self.blocks()])
            self.offset = np.concatenate([[0], np.cumsum(self.size)[:-1]]).astype(np.int64)
