"""Replica racks of a group's partitions as a column of layout numbers.

A cluster has a handful of replica *layouts* (the set of racks a partition's replicas
are on) and up to millions of partitions. ``ReplicaLayouts`` keeps one small int per
partition into the distinct layouts, read from the caller's ``partition_racks`` in a
few C-level passes: a fresh rack deal reads that column as an array and never builds a
dict of a hundred thousand partitions. Whoever asks partition by partition (the engine,
``range``, cross-rack counts) gets the dict, built once on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from itertools import accumulate, chain, compress, count, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .ids import PART_BITS, PART_MASK, TopicIds
from .partition_lists import new_partitions
from .types import TopicPartition

if TYPE_CHECKING:
    from .spec import GroupSpec

_topic, _number = itemgetter(0), itemgetter(1)
_LAYOUT_TYPES = frozenset({tuple, frozenset})


class ReplicaLayouts(Mapping[TopicPartition, frozenset[str]]):
    """Replica racks of each existing partition of ``topics``: ``codes[start[t] + p]``
    indexes ``layouts`` (-1: none known). A ``Mapping`` like the dict it stands for."""

    __slots__ = ("_dict", "codes", "counts", "layouts", "start", "topics")

    def __init__(
        self,
        topics: tuple[str, ...],
        counts: tuple[int, ...],
        codes: NDArray[np.int64],
        layouts: tuple[frozenset[str], ...],
    ) -> None:
        self.topics = topics
        self.counts = counts
        self.start = dict(zip(topics, accumulate(counts, initial=0), strict=False))
        self.codes = codes
        self.layouts = layouts
        self._dict: dict[TopicPartition, frozenset[str]] | None = None

    @staticmethod
    def order(spec: GroupSpec) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The topics a table of ``spec`` covers: the subscribed ones first (the order of
        a fresh deal), then every other topic with partitions."""
        ppt = spec.partitions_per_topic
        subscribed = set(spec.topics)
        topics = (*spec.topics, *(t for t in ppt if ppt[t] > 0 and t not in subscribed))
        return topics, tuple(ppt[t] for t in topics)

    @classmethod
    def of_pairs(
        cls, spec: GroupSpec, pairs: Iterable[tuple[TopicPartition, frozenset[str]]]
    ) -> ReplicaLayouts:
        """From checked pairs, one at a time; partitions that do not exist are skipped."""
        topics, counts = cls.order(spec)
        table = cls(topics, counts, np.full(sum(counts), -1, dtype=np.int64), ())
        layouts: dict[frozenset[str], int] = {}
        start, ppt = table.start, spec.partitions_per_topic
        for tp, named in pairs:
            at = start.get(tp.topic)
            if at is not None and 0 <= tp.partition < ppt[tp.topic]:
                table.codes[at + tp.partition] = layouts.setdefault(named, len(layouts))
        table.layouts = tuple(layouts)
        return table

    @classmethod
    def in_bulk(
        cls,
        spec: GroupSpec,
        partition_racks: Mapping[Any, Any],
        valid_rack: Callable[[object], bool],
    ) -> ReplicaLayouts | None:
        """The table, when every key is a ``TopicPartition`` of a str and an int and every
        value a sequence or set of racks that ``valid_rack`` accepts; ``None`` otherwise,
        for the checks entry by entry that name the bad one. Passes over the entries are
        C-level."""
        keys, values = partition_racks.keys(), partition_racks.values()
        n = len(keys)
        if n == 0 or set(map(type, keys)) != {TopicPartition}:
            return None
        seen = _first_seen(values, n)
        if seen is None:
            return None
        distinct, first = seen
        if not set(map(type, distinct)) <= _LAYOUT_TYPES:
            return None
        if not all(map(valid_rack, set(chain.from_iterable(distinct)))):
            return None
        numbers = list(map(_number, keys))
        if set(map(type, numbers)) != {int}:
            return None
        topics, counts = cls.order(spec)
        # Topics the table does not cover read as one more, empty, topic: no partition
        # of it exists, whatever its number.
        none = len(topics)
        position = {t: i for i, t in enumerate(topics)}
        try:
            topic_no = np.fromiter(map(position.get, map(_topic, keys), repeat(none)), np.int64, n)
            number = np.fromiter(numbers, np.int64, n)
        except (TypeError, OverflowError):  # an unhashable topic, a number past 64 bits
            return None
        unknown = topic_no == none
        if unknown.any() and not all(
            isinstance(_topic(k), str) for k in compress(keys, unknown.tolist())
        ):
            return None
        # Each distinct value's first place -> its layout: values naming the same racks
        # in another order or container are one layout.
        layouts = {named: i for i, named in enumerate(dict.fromkeys(map(frozenset, distinct)))}
        remap = np.full(n, -1, dtype=np.int64)
        remap[list(distinct.values())] = [layouts[frozenset(d)] for d in distinct]
        table = cls(topics, counts, np.full(sum(counts), -1, dtype=np.int64), tuple(layouts))
        size = np.asarray([*counts, 0], dtype=np.int64)
        starts = np.asarray([*table.start.values(), 0], dtype=np.int64)
        exists = (number >= 0) & (number < size[topic_no])
        table.codes[starts[topic_no[exists]] + number[exists]] = remap[first[exists]]
        return table

    def present(self) -> set[frozenset[str]]:
        """The layouts at least one partition has."""
        used = np.unique(self.codes)
        return {self.layouts[i] for i in used[used >= 0].tolist()}

    def none_known(self, topics: Iterable[str]) -> bool:
        """Some partition of ``topics`` has no layout (absent from ``partition_racks``)."""
        start, counts = self.start, dict(zip(self.topics, self.counts, strict=True))
        return any(
            bool((self.codes[start[t] : start[t] + counts[t]] < 0).any())
            for t in topics
            if t in start
        )

    def codes_of(self, ids: TopicIds, pids: NDArray[np.int64]) -> NDArray[np.int64]:
        """The layout of each of ``pids``, by array (-1 for a partition this table does
        not cover: of another topic, or past its count)."""
        start = np.full(len(ids.names), -1, dtype=np.int64)
        count = np.zeros(len(ids.names), dtype=np.int64)
        for t, n in zip(self.topics, self.counts, strict=True):
            start[ids.index[t]], count[ids.index[t]] = self.start[t], n
        topic, part = pids >> PART_BITS, pids & PART_MASK
        covered = (start[topic] >= 0) & (part < count[topic])
        codes = np.full(len(pids), -1, dtype=np.int64)
        codes[covered] = self.codes[start[topic[covered]] + part[covered]]
        return codes

    def by_pid(self, ids: TopicIds) -> tuple[list[int], list[frozenset[str]]]:
        """The pids (``ids`` knows every topic here) and layouts of the partitions whose
        racks are known, by array: no partition object is made."""
        known = np.flatnonzero(self.codes >= 0)
        topic_at = np.repeat(np.arange(len(self.topics)), self.counts)[known]
        start = np.fromiter(self.start.values(), np.int64, len(self.topics))
        base = np.fromiter(map(ids.base.__getitem__, self.topics), np.int64, len(self.topics))
        pids = base[topic_at] + (known - start[topic_at])
        return pids.tolist(), list(map(self.layouts.__getitem__, self.codes[known].tolist()))

    def _as_dict(self) -> dict[TopicPartition, frozenset[str]]:
        if self._dict is None:
            keys: list[TopicPartition] = []
            named: list[frozenset[str]] = []
            for t, n in zip(self.topics, self.counts, strict=True):
                codes = self.codes[self.start[t] : self.start[t] + n]
                known = np.flatnonzero(codes >= 0)
                keys += new_partitions(repeat(t, len(known)), known.tolist(), len(known))
                named += map(self.layouts.__getitem__, codes[known].tolist())
            self._dict = dict(zip(keys, named, strict=True))
        return self._dict

    def __getitem__(self, tp: TopicPartition) -> frozenset[str]:
        return self._as_dict()[tp]

    def get(  # type: ignore[override]
        self, tp: TopicPartition, default: frozenset[str] | None = None
    ) -> frozenset[str] | None:
        return self._as_dict().get(tp, default)

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._as_dict())

    def __len__(self) -> int:
        return int(np.count_nonzero(self.codes >= 0))

    def __repr__(self) -> str:
        return f"ReplicaLayouts({self._as_dict()!r})"


def _first_seen(values: Collection[Any], n: int) -> tuple[dict[Any, int], NDArray[np.int64]] | None:
    """The distinct values (each with the place it first appears) and, per entry, the
    first place of its value: one hashing pass. Lists and sets, which cannot be
    hashed, are read as tuples; ``None`` for anything else unhashable."""
    distinct: dict[Any, int] = {}
    try:
        return distinct, np.fromiter(map(distinct.setdefault, values, count()), np.int64, n)
    except TypeError:
        pass
    if not set(map(type, values)) <= {list, tuple, set, frozenset}:
        return None  # a str is a collection of characters, not of racks
    distinct = {}
    try:
        as_tuples: Iterator[tuple[Any, ...]] = map(tuple, values)
        return distinct, np.fromiter(map(distinct.setdefault, as_tuples, count()), np.int64, n)
    except TypeError:  # an unhashable rack, which the entry by entry checks name
        return None
