"""The engine's lag per partition, as one int64 array instead of a dict.

A reading used to cost three lookups in million-entry dicts (old value, new value,
owner), each a few cache misses: 10 000 readings at a million partitions spent ~18 ms
reading and writing lag alone. Here a batch is one vectorised gather and scatter
(``pid_array.py``), and a member's whole list is weighed in one gather. ``-1`` marks a
partition without a reading (lag is never negative); ``-2`` one whose lag does not fit
in 64 bits (no Kafka lag does, but the API takes any int), kept in a dict beside.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from .ids import PART_BITS
from .pid_array import PidArray

_UNKNOWN = -1
_BIG = -2
#: The largest lag kept in the array; larger ones live beside it.
INT64_MAX = 2**63 - 1


class LagTable:
    __slots__ = ("_array", "_big", "_count")

    def __init__(self) -> None:
        self._array = PidArray(_UNKNOWN)
        #: partitions with a reading.
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
        value = self._array.item(pid)
        if value < 0:
            return default if value == _UNKNOWN else self._big[pid]
        return value

    def many(self, pids: Sequence[int]) -> list[int]:
        """Each partition's lag (0 without a reading), in order."""
        if not pids:
            return []
        return self._values(pids, self._array.gather(np.fromiter(pids, np.int64, len(pids))))

    def exact_many(self, pids: NDArray[np.int64]) -> NDArray[np.int64] | None:
        """``many`` as an array, for a caller that goes on in NumPy; None when a lag past
        64 bits is among them."""
        got = self._array.gather(pids)
        if self._big and np.any(got == _BIG):
            return None
        return np.maximum(got, 0)

    def swap(self, pids: Sequence[int], values: Sequence[int]) -> list[int]:
        """Set each partition's lag and return what it was (0 without a reading). The
        pids are distinct: they come from a lag map's keys."""
        if not pids:
            return []
        slots, old = self._slots_and_old(np.fromiter(pids, np.int64, len(pids)))
        out = self._values(pids, old)
        if self._big:
            for i in np.flatnonzero(old == _BIG).tolist():
                del self._big[pids[i]]
        try:
            new = np.fromiter(values, np.int64, len(values))
        except OverflowError:
            new = np.fromiter((_BIG if v > INT64_MAX else v for v in values), np.int64)
            self._big.update((p, v) for p, v in zip(pids, values, strict=True) if v > INT64_MAX)
        self._array.flat[slots] = new
        return out

    def swap_exact(
        self, pids: NDArray[np.int64], values: Sequence[int]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]] | None:
        """``swap`` for a caller that goes on in NumPy: old and new lags as arrays (0
        without a reading). None, having changed nothing, when a lag past 64 bits is
        involved: the caller takes ``swap``'s lists then."""
        try:
            new = np.fromiter(values, np.int64, len(values))
        except OverflowError:
            return None
        if self._big and np.any(self._array.gather(pids) == _BIG):
            return None
        slots, old = self._slots_and_old(pids)
        self._array.flat[slots] = new
        return np.maximum(old, 0), new

    def _slots_and_old(
        self, pids: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Where the pids live and what is stored there; counts the new readings."""
        slots = self._array.slots(pids)
        old = self._array.flat[slots]
        self._count += int(np.count_nonzero(old == _UNKNOWN))
        return slots, old

    def discard(self, pids: Iterable[int]) -> None:
        for pid in pids:
            if self._array.item(pid) != _UNKNOWN:
                self._array.put_one(pid, _UNKNOWN)
                self._count -= 1
                self._big.pop(pid, None)

    def items(self) -> tuple[list[int], list[int]]:
        """Ascending pids with a reading, and their lag."""
        pids: list[int] = []
        values: list[int] = []
        for t, block in self._array.blocks():
            known = np.flatnonzero(block != _UNKNOWN)
            found = ((t << PART_BITS) + known).tolist()
            pids += found
            values += self._values(found, block[known])
        return pids, values

    def _values(self, pids: Sequence[int], got: NDArray[np.int64]) -> list[int]:
        """Stored slots as lags: 0 without a reading, big ones from beside."""
        out: list[int] = np.maximum(got, 0).tolist()
        if self._big:
            for i in np.flatnonzero(got == _BIG).tolist():
                out[i] = self._big[pids[i]]
        return out
