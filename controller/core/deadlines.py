"""Keys with a due time, earliest first, at O(log n) per change.

The group state keeps leave graces and record-write times here: a tick or a wakeup then
costs what is due, not the number of members waiting."""

from __future__ import annotations

import heapq
from typing import Generic, TypeVar

K = TypeVar("K", bound=str)


class Deadlines(Generic[K]):
    def __init__(self) -> None:
        self._when: dict[K, float] = {}
        #: May hold stale entries (a key re-timed or removed): skipped when they surface.
        self._heap: list[tuple[float, K]] = []

    def __contains__(self, key: object) -> bool:
        return key in self._when

    def __len__(self) -> int:
        return len(self._when)

    def get(self, key: K) -> float | None:
        return self._when.get(key)

    def set(self, key: K, when: float) -> None:
        if self._when.get(key) != when:
            self._when[key] = when
            heapq.heappush(self._heap, (when, key))
            if len(self._heap) > 2 * len(self._when) + 64:
                self._heap = [(w, k) for k, w in self._when.items()]
                heapq.heapify(self._heap)

    def pop(self, key: K) -> float | None:
        return self._when.pop(key, None)

    def earliest(self) -> float | None:
        heap = self._heap
        while heap and self._when.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[tuple[K, float]]:
        """Remove and return every key due by ``now``, in key order (deterministic)."""
        out: list[tuple[K, float]] = []
        while (first := self.earliest()) is not None and first <= now:
            _, key = heapq.heappop(self._heap)
            out.append((key, self._when.pop(key)))
        return sorted(out)
