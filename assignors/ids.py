"""Partition ids: the engine's compact encoding of a ``TopicPartition``, and bulk conversion.

Inside the engine a partition is the int ``topic_id << 32 | partition`` (a *pid*) and an
entry of a member's lag-ordered list is the int ``lag << 64 | pid``. Ints are not tracked
by the cyclic garbage collector and compare in C: a group of a million partitions costs
tens of thousands of tracked objects instead of millions (no multi-second collection
after a build) and sorting and bisecting cost what they cost for ints.

Inputs arrive as ``TopicPartition`` maps and lists. They are converted here, in bulk,
with C-level ``map`` passes when they are well formed, and item by item (with the same
rules and errors) when they are not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from itertools import accumulate, chain, compress, count, islice
from operator import add, ge, itemgetter, lt
from typing import Any

from .spec import GroupSpec, as_partition, check_lag
from .types import MAX_PARTITION, CurrentAssignment, LagMap, TopicPartition

PART_BITS = 32
PART_MASK = (1 << PART_BITS) - 1
LAG_SHIFT = 64
PID_MASK = (1 << LAG_SHIFT) - 1

#: ``pid -> topic id`` and ``entry -> pid`` as C-level callables, for ``map``.
topic_of = PART_BITS.__rrshift__
pid_of = PID_MASK.__and__

_new_tuple = tuple.__new__
_first = itemgetter(0)
_second = itemgetter(1)


class TopicIds:
    """Topic name <-> small int, in first-seen order.

    While names are added in sorted order (``in_order``), pid order is ``TopicPartition``
    order and sorted pid lists convert to sorted partition lists without a sort.
    """

    __slots__ = ("base", "in_order", "index", "interned", "names")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        #: name -> ``id << 32``, the pid of the topic's partition 0.
        self.base: dict[str, int] = {}
        self.in_order = True
        #: topic id -> its partitions as shared objects, once ``intern()`` was called.
        self.interned: list[list[TopicPartition]] | None = None
        for name in names:
            self.add(name)

    @classmethod
    def for_spec(cls, spec: GroupSpec) -> TopicIds:
        """Every topic the group names (existing or subscribed), in sorted order."""
        subscribed: set[str] = set().union(*set(spec.topics_of.values()))
        return cls(sorted(subscribed.union(spec.partitions_per_topic)))

    def add(self, name: str) -> int:
        t = self.index.get(name)
        if t is None:
            t = len(self.names)
            if self.names and name < self.names[-1]:
                self.in_order = False
            self.names.append(name)
            self.index[name] = t
            self.base[name] = t << PART_BITS
            if self.interned is not None:
                self.interned.append([])
        return t

    def intern(self) -> None:
        """From now on ``tps`` hands out one shared object per partition, for a caller
        that keeps them all anyway (the controller): no new partition objects per change,
        for the allocator and the cyclic collector to deal with."""
        if self.interned is None:
            self.interned = [[] for _ in self.names]

    def span(self, topic: str, stop: int, start: int = 0) -> range:
        """The pids of partitions ``start .. stop-1`` of a known topic."""
        base = self.base[topic]
        return range(base + start, base + stop)

    def pid(self, tp: TopicPartition) -> int | None:
        base = self.base.get(tp.topic)
        if base is None or not 0 <= tp.partition <= MAX_PARTITION:
            return None
        return base + tp.partition

    def tps(self, pids: Iterable[int]) -> list[TopicPartition]:
        """Ascending pids -> sorted partitions."""
        names = self.names
        if self.interned is not None:
            out = self._shared(pids if isinstance(pids, list) else list(pids))
        else:
            out = [_new_tuple(TopicPartition, (names[p >> PART_BITS], p & PART_MASK)) for p in pids]
        if not self.in_order:
            out.sort()
        return out

    def _shared(self, pids: list[int]) -> list[TopicPartition]:
        """``tps`` from the interned objects, creating those of partitions not seen yet."""
        interned = self.interned
        assert interned is not None
        while True:
            try:
                return [interned[p >> PART_BITS][p & PART_MASK] for p in pids]
            except IndexError:
                for p in pids:
                    known, name = interned[p >> PART_BITS], self.names[p >> PART_BITS]
                    known.extend(
                        _new_tuple(TopicPartition, (name, q))
                        for q in range(len(known), (p & PART_MASK) + 1)
                    )

    # ------------------------------------------------------------------ lag

    def lag(self, lag: LagMap | None, *, register: bool) -> tuple[list[int], list[int]]:
        """Validated lag as parallel lists of pids and values, in the map's order.

        Readings for unknown topics are kept only if ``register`` (the engine keeps them
        for topics that appear later); a one-shot call drops them."""
        if not lag:
            return [], []
        check_lag(lag)
        try:
            bases = list(map(self.base.__getitem__, map(_first, lag)))
        except KeyError:
            pass
        else:
            return list(map(add, bases, map(_second, lag))), list(lag.values())
        pids: list[int] = []
        values: list[int] = []
        for (topic, partition), value in lag.items():
            if register:
                self.add(topic)
            base = self.base.get(topic)
            if base is not None:
                pids.append(base + partition)
                values.append(value)
        return pids, values

    # ------------------------------------------------------------------ claims

    def claims(
        self, spec: GroupSpec, current: CurrentAssignment | None
    ) -> tuple[dict[str, list[int]], dict[str, list[TopicPartition]]]:
        """The part of ``current`` that can be kept, by member, as ascending pids.

        Claims by departed members, on vanished partitions or unsubscribed topics are
        dropped. A partition claimed by several members stays with the claimant holding
        the fewest valid claims (ties: smallest member id), which keeps the result closer
        to balance. Members that keep nothing are left out.

        The second map holds, for members whose claim was well formed, already sorted and
        kept whole, their partitions as given: a one-shot call returns those objects again
        instead of building new ones.
        """
        if not current:
            return {}, {}
        named = sorted(k for k in current if isinstance(k, str))
        members = [m for m in named if m in spec.topics_of]
        kept, given, shared = self._read_claims(spec, members, [current[m] for m in members])
        if not shared:
            return kept, given
        claimed = list(chain.from_iterable(kept.values()))
        if len(set(claimed)) == len(claimed):
            return kept, given
        counts = Counter(claimed)
        contested = {p for p, n in counts.items() if n > 1}
        load = {m: len(p) for m, p in kept.items()}
        winner: dict[int, tuple[int, str]] = {}
        for member, pids in kept.items():
            for p in contested.intersection(pids):
                mine = (load[member], member)
                if p not in winner or mine < winner[p]:
                    winner[p] = mine
        for member, pids in list(kept.items()):
            lost = {p for p in contested.intersection(pids) if winner[p][1] != member}
            if lost:
                given.pop(member, None)
                rest = [p for p in pids if p not in lost]
                if rest:
                    kept[member] = rest
                else:
                    del kept[member]
        return kept, given

    def _read_claims(
        self, spec: GroupSpec, members: list[str], lists: list[object]
    ) -> tuple[dict[str, list[int]], dict[str, list[TopicPartition]], bool]:
        """Each member's valid claims as ascending distinct pids, conflicts not yet
        resolved, and whether two members may claim one partition.

        The common case, every claim a valid ``TopicPartition`` and each list sorted, is
        checked for the whole group at once in C; a member whose claim fails that goes
        item by item."""
        ppt = spec.partitions_per_topic
        kept: dict[str, list[int]] = {}
        given: dict[str, list[TopicPartition]] = {}
        checked = self._well_formed(lists, ppt)
        if checked is None:
            slow = members
            shared = True
        else:
            slow = []
            names, pids = checked
            shared = len(set(pids)) != len(pids)
            lens = list(map(len, lists))  # type: ignore[arg-type]
            ends = list(accumulate(lens))
            # Where the pid sequence fails to rise; a list is sorted and free of repeats
            # unless one of these falls inside it.
            unsorted = set(compress(count(1), map(ge, pids, islice(pids, 1, None))))
            in_order = unsorted.issubset(ends)
            topic_sets = set(spec.topics_of.values())
            if all(fs.issuperset(ppt) for fs in topic_sets):
                covers = dict.fromkeys(topic_sets, True)
                if in_order:  # the usual case, our own previous result: no loop at all
                    chunks = map(pids.__getitem__, map(slice, [0, *ends[:-1]], ends))
                    kept = dict(zip(members, chunks, strict=True))
                    if self.in_order:
                        copies: Iterable[list[TopicPartition]] = map(list, lists)  # type: ignore[arg-type]
                        given = dict(zip(members, copies, strict=True))
                    if 0 in lens:
                        kept = {m: c for m, c in kept.items() if c}
                    return kept, given, shared
            else:
                present = set(names)
                covers = {fs: fs.issuperset(present) for fs in topic_sets}
            start = 0
            for member, items, end in zip(members, lists, ends, strict=True):
                topics = spec.topics_of[member]
                if not covers[topics] and not topics.issuperset(names[start:end]):
                    slow.append(member)
                    start = end
                    continue
                chunk = pids[start:end]
                if in_order or all(map(lt, chunk, islice(chunk, 1, None))):
                    if self.in_order:
                        given[member] = list(items)  # type: ignore[call-overload]
                else:
                    chunk = sorted(set(chunk))
                if chunk:
                    kept[member] = chunk
                start = end
        by_name = dict(zip(members, lists, strict=True)) if slow else {}
        for member in slow:
            topics = spec.topics_of[member]
            pids = sorted(set(self._item_by_item(by_name[member], topics, ppt)))
            if pids:
                kept[member] = pids
        return kept, given, shared or bool(slow)

    def _well_formed(
        self, lists: list[object], ppt: Mapping[str, int]
    ) -> tuple[list[str], list[int]] | None:
        """Topic names and pids of every claim, in order, if every claim is a list or tuple
        of ``TopicPartition`` with a partition that exists; ``None`` otherwise."""
        if not all(isinstance(items, (list, tuple)) for items in lists):
            return None
        flat: list[Any] = list(chain.from_iterable(lists))  # type: ignore[arg-type]
        if set(map(type, flat)) - {TopicPartition}:
            return None
        names = list(map(_first, flat))
        parts = list(map(_second, flat))
        if set(map(type, parts)) - {int}:  # exact: a bool is no partition number
            return None
        if parts and min(parts) < 0:
            return None
        try:
            if not all(map(lt, parts, map(ppt.__getitem__, names))):
                return None
        except KeyError:
            return None
        return names, list(map(add, map(self.base.__getitem__, names), parts))

    def _item_by_item(
        self, items: object, topics: frozenset[str], ppt: Mapping[str, int]
    ) -> Iterable[int]:
        if isinstance(items, (str, bytes)) or not isinstance(items, Collection):
            return
        for raw in items:
            tp = as_partition(raw)
            if tp is not None and tp.topic in topics and 0 <= tp.partition < ppt.get(tp.topic, 0):
                yield self.base[tp.topic] + tp.partition


def valid_claims(
    spec: GroupSpec, current: CurrentAssignment | None
) -> dict[str, list[TopicPartition]]:
    """``TopicIds.claims`` as partitions: what a sticky strategy keeps of ``current``."""
    ids = TopicIds.for_spec(spec)
    kept, _ = ids.claims(spec, current)
    return {m: ids.tps(pids) for m, pids in kept.items()}
