"""Partition lists of whole topics, built once and copied out.

Every strategy lists the partitions of every topic it assigns, a fresh assignment of a
million partitions is mostly the building of these objects, and callers (a replay, a
controller, group-protocol plug-ins) ask for the same topics again and again; a copy
costs a few percent of a build.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from itertools import repeat

from .types import TopicPartition

_new_tuple = tuple.__new__


def new_partitions(
    topics: Iterable[str], numbers: Iterable[int], count: int
) -> list[TopicPartition]:
    """``TopicPartition(t, p)`` for ``count`` pairs of topics and numbers, new objects
    made in C-level passes: about twice as fast as calling the constructor."""
    pairs = zip(topics, numbers, strict=True)
    return list(map(_new_tuple, repeat(TopicPartition, count), pairs))


def new_range(topic: str, start: int, stop: int) -> list[TopicPartition]:
    """Partitions ``start .. stop - 1`` of ``topic``, new objects."""
    n = max(0, stop - start)
    return new_partitions(repeat(topic, n), range(start, stop), n)


class _Runs:
    """The partitions of recently assigned topics: at most ``budget`` partitions in all,
    least recently used dropped first; larger topics are built every time."""

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._runs: OrderedDict[str, list[TopicPartition]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()  # plug-ins may assign from several threads

    def get(self, topic: str, count: int) -> list[TopicPartition]:
        if not 0 < count <= self._budget:  # nothing to keep, or too much
            return new_range(topic, 0, count)
        with self._lock:
            run = self._runs.get(topic)
            if run is None:
                run = self._runs[topic] = []
            else:
                self._runs.move_to_end(topic)
            if len(run) < count:  # the topic grew, or was never seen: add what is missing
                self._size += count - len(run)
                run.extend(new_range(topic, len(run), count))
                while self._size > self._budget:
                    _, old = self._runs.popitem(last=False)
                    self._size -= len(old)
            return run[:count]


_RUNS = _Runs(budget=1 << 18)


def topic_partitions(topic: str, count: int) -> list[TopicPartition]:
    """``[TopicPartition(topic, p) for p in range(count)]``, a fresh list each call."""
    return _RUNS.get(topic, count)
