"""A group's lag readings between their arrival and the engine: queued as handed over,
absorbed a batch a tick, smoothed so that one noisy reading cannot trigger moves.

A poll of every partition arrives at once; absorbing it in one step would stall the
loop for as long as the engine takes over a million readings, so each tick takes at
most ``batch`` and the rest wait, in arrival order, for the next ticks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from itertools import chain, islice
from typing import NamedTuple

from assignors import TopicPartition


class _Readings(NamedTuple):
    """Queued readings (None: forget the partition): an iterator over them as handed
    over, how many it has left, and when they arrived."""

    items: Iterator[tuple[TopicPartition, int | None]]
    left: int
    at: float


class LagInbox:
    def __init__(self, batch: int, smoothing: float) -> None:
        """``batch``: readings one ``absorb`` takes; ``smoothing``: the weight of a new
        reading in the exponential moving average (1.0: no smoothing)."""
        self._batch = batch
        self._alpha = smoothing
        #: The smoothed lag of every partition that reported and was not forgotten.
        self.smoothed: dict[TopicPartition, float] = {}
        self._queue: deque[_Readings] = deque()
        self._queued = 0

    def __len__(self) -> int:
        """Readings queued, not yet absorbed."""
        return self._queued

    def oldest(self) -> float | None:
        """When the oldest reading still queued arrived."""
        return self._queue[0].at if self._queue else None

    def put(self, readings: Mapping[TopicPartition, int | None], now: float, bound: int) -> None:
        """Queue the readings as handed over: O(1), nothing smoothed yet. Past ``bound``
        queued readings (they come faster than ticks absorb them, or the group is
        paused), only the latest of each partition is kept: amortized O(1) a reading."""
        if not readings:
            return
        queue = self._queue
        queue.append(_Readings(iter(readings.items()), len(readings), now))
        self._queued += len(readings)
        if self._queued > bound:
            oldest = queue[0].at
            latest = dict(chain.from_iterable(r.items for r in queue))
            queue.clear()
            queue.append(_Readings(iter(latest.items()), len(latest), oldest))
            self._queued = len(latest)

    def absorb(self) -> tuple[dict[TopicPartition, int], float] | None:
        """Up to ``batch`` queued readings smoothed into ``smoothed``: the partitions whose
        rounded lag the engine is to take (a forgotten one weighs 0), and when the oldest
        of them arrived. None when nothing changed."""
        queue = self._queue
        if not queue:
            return None
        # The step's first event: when the oldest reading it absorbs arrived (the
        # readings queued behind it count from their own arrival, in later steps).
        since = queue[0].at
        budget = self._batch
        alpha = self._alpha
        keep = 1 - alpha
        lag = self.smoothed
        update: dict[TopicPartition, int] = {}
        while queue and budget > 0:
            first = queue[0]
            take = min(budget, first.left)
            if take == first.left:
                queue.popleft()
            else:
                queue[0] = first._replace(left=first.left - take)
            budget -= take
            self._queued -= take
            for tp, value in islice(first.items, take):
                old = lag.get(tp)
                if value is None:
                    if old is not None:
                        del lag[tp]
                        update[tp] = 0
                    continue
                new = float(value) if old is None else alpha * value + keep * old
                lag[tp] = new
                update[tp] = round(new)
        return (update, since) if update else None
