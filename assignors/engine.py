"""Incremental lag-aware sticky assignment.

The engine holds one group's assignment with the indexes that make each event cost in
proportion to the partitions it moves, not to the size of the group:

* ``_load``: every member's key ``(give, lag, name)`` in one sorted list (``give`` is
  ``2 * count - 1``, per unit of capacity when members declare one: ``capacity.py``); the
  donor for a member that is short of partitions is found from the top.
* ``_gheap``: a lazy min-heap of subscribers' ``(take, lag, name)`` keys per *topic
  group*, the topics that have exactly the same subscribers (one group when subscriptions
  are identical). The
  receiver for a partition is the top valid entry of its topic's group. Stale entries are
  skipped on read; a heap is rebuilt when stale entries outnumber live ones. Groups are
  refined (split) when a subscription cuts across one, never merged.
* per member, its partitions sorted by lag, so the partition that best evens two members'
  lag is found by bisection; with shared partition objects (the controller's), also its
  sorted partition list as last handed out, kept in step move by move, so a member a
  step changes again is listed by a copy.

Partitions are ints inside (``ids.py``): no per-partition object for the garbage
collector to walk, and C-speed sorting and bisection. ``TopicPartition`` appears only at
the edges, for the members an event changed.

Priorities: validity > count balance (KIP-54's definition) > lag balance (smallest
largest member lag) > stickiness. After an event, balance is restored by a worklist over
the members whose holdings changed: only pairs involving such a member can newly violate
balance, and every repair move strictly lowers the sum of squared counts (over
capacities), so it ends.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import math
import warnings
from collections import _count_elements, defaultdict  # type: ignore[attr-defined]
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import accumulate, chain, filterfalse, islice, repeat, takewhile
from operator import attrgetter, lshift, neg, or_, rshift, sub

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from .capacity import (
    MemberCapacities,
    build_capacities,
    common_capacity,
    deal_by_capacity,
    quotas,
)
from .collector import paused as collector_paused
from .constraints import (
    NONE,
    Constraints,
    MaxPartitions,
    Pins,
    check_against,
    check_constraints,
    violations,
)
from .event_checks import (
    Constrain,
    Join,
    Leave,
    Readings,
    Repartition,
    Rerack,
    Resubscribe,
    check_events,
    checked_racks,
)
from .events import (
    Change,
    Delta,
    Event,
    LagTrigger,
)
from .ids import (
    LAG_SHIFT,
    PART_BITS,
    PART_MASK,
    PID_MASK,
    Claims,
    TopicIds,
    pid_of,
    runs,
    sort_runs,
    topic_of,
)
from .lag_swap import MAX_PARTNERS, Partner, exact, nearest_swaps
from .lag_table import INT64_MAX, LagTable
from .pid_array import PidArray
from .placement import (
    deal_uniform,
    greedy_place_of,
    grouped,
    heaviest_first_array,
    keep_uniform,
    level_place,
    snake_places,
    subscriber_indexes,
    weight_array,
)
from .policy import DEFAULT_POLICY, LagPolicy
from .rack_deal import deal_by_rack
from .rack_index import RackIndex
from .racks import MemberRacks, PartitionRacks, Racks, build_racks, check_rack
from .spec import GroupSpec, build_spec, check_lag, check_mappings
from .types import (
    Assignment,
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
)

#: ``(score, lag, name)``: ``give`` or ``take`` of the member's count (``capacity.py``)
#: and its lag, both per unit of capacity. With capacity 1 (the default) the scores are
#: ``2 * count -+ 1`` and the lag is the member's lag, all ints: the order is by count.
Key = tuple[float, float, str]
#: Donor candidates scanned from the top before falling back to per-topic holder heaps.
_DONOR_SCAN = 8
_SWAP_CANDIDATES = 256
#: A count spread (fullest minus emptiest member) from which identical subscriptions are
#: rebalanced in bulk rather than partition by partition.
_BULK_SPREAD = 8
#: A lag update re-sorting more than this share of members rebuilds the indexes at once.
_REINDEX_SHARE = 8
#: A member's pinned partitions when it holds none (shared; replaced on its first pin).
_NO_PINS: frozenset[int] = frozenset()


class UnassignedPartitionsWarning(UserWarning):
    """``assign`` left partitions out because the caps leave no subscriber room: the
    result is what the operator asked for, and the caller is told."""


@dataclass(slots=True, eq=False)
class _Member:
    name: str
    topics: frozenset[str]
    #: ``topics`` as topic ids.
    tids: frozenset[int]
    #: ``effective lag << 64 | pid``, ascending: the member's partitions by lag. After a
    #: lag update it may be ``stale`` (right partitions, old weights) until first needed:
    #: read it in weight order through ``IncrementalAssignor._entries``.
    by_lag: list[int] = field(default_factory=list)
    lag: int = 0
    #: topic id -> how many of its partitions this member holds; counted on first need
    #: (``holding``), since most members of a large build are never asked.
    held: dict[int, int] | None = None
    stale: bool = False
    #: The topic groups this member subscribes to, valid while ``groups_version`` is current.
    groups: tuple[int, ...] = ()
    groups_version: int = -1
    #: The member's declared weight: balance gives it partitions and lag in proportion.
    capacity: float = 1
    #: The operator's cap on its count (``constraints.py``), pins included.
    cap: int | None = None
    #: Pinned partitions it holds: counted in its load, never moved by balance.
    pinned: AbstractSet[int] = _NO_PINS
    #: Its number in the engine's per-partition owner array (``IncrementalAssignor._held``).
    slot: int = -1
    #: With shared partitions: its sorted partition list as first handed out
    #: (``IncrementalAssignor._lists``), then kept in step move by move (``_relist``).
    #: None until first listed, and without shared ones.
    listed: list[TopicPartition] | None = None

    @property
    def count(self) -> int:
        return len(self.by_lag)

    def key(self) -> Key:
        """The donor order (``_load``, holder heaps): who gives first. A member above
        its cap gives before anyone."""
        c, w = len(self.by_lag), self.capacity
        if self.cap is not None and c > self.cap:
            return (math.inf, self.lag / w, self.name)
        if w == 1:
            return (2 * c - 1, self.lag, self.name)
        return ((2 * c - 1) / w, self.lag / w, self.name)

    def take_key(self) -> Key:
        """The receiver order (topic-group heaps): who takes first. A member at its cap
        takes nothing."""
        c, w = len(self.by_lag), self.capacity
        if self.cap is not None and c >= self.cap:
            return (math.inf, self.lag / w, self.name)
        if w == 1:
            return (2 * c + 1, self.lag, self.name)
        return ((2 * c + 1) / w, self.lag / w, self.name)

    def load(self) -> float:
        """The member's lag per unit of capacity: what lag balance evens out."""
        return self.lag if self.capacity == 1 else self.lag / self.capacity

    def share(self, lag: float) -> float:
        """``lag`` per unit of this member's capacity."""
        return lag if self.capacity == 1 else lag / self.capacity

    def holding(self) -> dict[int, int]:
        """topic id -> how many of its partitions the member could give away."""
        held = self.held
        if held is None:
            held = self.held = {}
            pids: Iterable[int] = map(pid_of, self.by_lag)
            if self.pinned:
                pids = filterfalse(self.pinned.__contains__, pids)
            _count_elements(held, map(topic_of, pids))
        return held


_lag_of = attrgetter("lag")
_capacity_of = attrgetter("capacity")
_by_lag_of = attrgetter("by_lag")
_name_of = attrgetter("name")
_slot_of = attrgetter("slot")

#: A lag move or swap: (resulting peak lag, partner, pid from the top member, pid back).
_LagStep = tuple[float, _Member, int, int | None]


def _even_share(a: _Member, b: _Member) -> float:
    """The lag that, moved from ``a`` to ``b``, leaves both with the same lag per unit
    of capacity (half the gap when their capacities are equal)."""
    if a.capacity == b.capacity:
        return (a.lag - b.lag) / 2
    return (a.lag * b.capacity - b.lag * a.capacity) / (a.capacity + b.capacity)


def _peak(a: _Member, b: _Member, d: int) -> float:
    """The larger lag per unit of capacity after moving lag ``d`` from ``a`` to ``b``."""
    return max(a.share(a.lag - d), b.share(b.lag + d))


def _peak_floor(a: _Member, b: _Member, half: float) -> float:
    """The lowest ``_peak`` any whole lag moved from ``a`` to ``b`` can give: the peak
    is convex in the lag moved and least at ``half`` (``_even_share``)."""
    low = math.floor(half)
    return min(_peak(a, b, low), _peak(a, b, low + 1))


class IncrementalAssignor:
    """One group's assignment, updated event by event. See the module docstring."""

    def __init__(
        self,
        partitions_per_topic: PartitionsPerTopic | None = None,
        *,
        lag_aware: bool = True,
        policy: LagPolicy = DEFAULT_POLICY,
    ) -> None:
        self.lag_aware = lag_aware
        self.policy = policy
        self._ppt: dict[str, int] = dict(
            build_spec(partitions_per_topic or {}, {}).partitions_per_topic
        )
        self._ids = TopicIds(sorted(self._ppt))
        self._members: dict[str, _Member] = {}
        self._owner: dict[int, str] = {}
        #: ``_owner`` again, as each holder's slot in an array: read in batches (a lag
        #: update's holders) without a lookup per partition in a million-entry dict.
        self._held = PidArray(-1)
        self._slot_names: list[str] = []
        self._free_slots: list[int] = []
        self._plag = LagTable()
        #: Readings of partitions that do not exist (yet): moved into ``_plag`` when their
        #: topic grows to include them (``TopicIds.existing``).
        self._ahead: dict[int, int] = {}
        #: topic id -> subscribing members.
        self._subs: dict[int, set[str]] = {}
        self._load: SortedList = SortedList()
        self._by_lag: SortedList = SortedList()
        #: topic id -> topic group; topic group -> its topic ids.
        self._tgroup: dict[int, int] = {}
        self._gtopics: dict[int, set[int]] = {}
        self._gheap: dict[int, list[Key]] = {}
        #: A heap longer than this is mostly stale entries and is rebuilt on next need.
        self._glimit: dict[int, int] = {}
        self._gversion = 0
        self._groups_cache: dict[frozenset[int], tuple[int, ...]] = {}
        self._groups_cache_version = -1
        #: topic id -> lazy max-heap (negated count and lag) of members holding its
        #: partitions; built on first need, only groups with mixed subscriptions need it.
        self._hheap: dict[int, list[Key]] | None = None
        self._hheap_size = 0
        self._total_lag = 0
        #: The members' capacities summed (their count when none is declared), and how
        #: many members declare one other than 1: with none, every path is KIP-54's.
        self._capacity_total: float = 0
        self._weighted = 0
        self._racks = RackIndex()
        #: Partitions held by a member whose rack holds none of their replicas.
        self._cross_rack: set[int] = set()
        #: Operator constraints (``constraints.py``): pid -> pinned member, the reverse,
        #: member -> cap; and the partitions no subscriber has room for under the caps.
        self._pins: dict[int, str] = {}
        self._pins_of: dict[str, set[int]] = {}
        self._caps: dict[str, int] = {}
        self._stranded: set[int] = set()
        self._begin()

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_snapshot(
        cls,
        partitions_per_topic: PartitionsPerTopic,
        subscriptions: Subscriptions,
        current: CurrentAssignment | None = None,
        lag: LagMap | None = None,
        *,
        lag_aware: bool = True,
        policy: LagPolicy = DEFAULT_POLICY,
        member_racks: MemberRacks | None = None,
        partition_racks: PartitionRacks | None = None,
        member_capacities: MemberCapacities | None = None,
        pins: Pins | None = None,
        max_partitions: MaxPartitions | None = None,
    ) -> tuple[IncrementalAssignor, Change]:
        """Build an engine from a whole group at once and settle it.

        Valid parts of ``current`` are kept; with nothing to keep, a fresh placement is
        computed in bulk (far faster than placing partitions one by one). The returned
        ``Change`` is relative to the kept part of ``current``. With racks, a fresh
        group whose members take every partition and have no lag to weigh is dealt onto
        its racks at once (``rack_deal.py``); otherwise the partitions held off their
        replicas' racks are aligned as far as count-neutral swaps allow. With
        ``member_capacities`` (``capacity.py``) balance is proportional to them. ``pins``
        and ``max_partitions`` (``constraints.py``) may name members and partitions not
        in the group yet: they hold once these exist.
        """
        with collector_paused():
            start = _Start.of(
                partitions_per_topic,
                subscriptions,
                current,
                lag,
                lag_aware,
                member_racks,
                partition_racks,
                member_capacities,
                check_constraints(pins, max_partitions),
            )
            eng, change = start.engine(policy)
            eng._build_heaps()  # ready for the first event
        if gc.isenabled():
            # The build's objects sit in the young generation, and the first collections
            # after it walk them all: ~80 ms at 10 000 x 1 000 000, billed to the first
            # event. The build pays them instead; the engine outlives it.
            gc.collect(1)
        return eng, change

    @staticmethod
    def solve(
        partitions_per_topic: PartitionsPerTopic,
        subscriptions: Subscriptions,
        current: CurrentAssignment | None = None,
        lag: LagMap | None = None,
        *,
        lag_aware: bool = True,
        policy: LagPolicy = DEFAULT_POLICY,
        member_racks: MemberRacks | None = None,
        partition_racks: PartitionRacks | None = None,
        member_capacities: MemberCapacities | None = None,
        pins: Pins | None = None,
        max_partitions: MaxPartitions | None = None,
    ) -> Assignment:
        """``from_snapshot(...)[0].assignment()`` without building the indexes when a
        fresh uniform deal is already final (nothing to keep, no lag to even out). The
        caller knows the whole group: every pin must name an existing partition and a
        subscribed member, every cap a member."""
        with collector_paused():
            start = _Start.of(
                partitions_per_topic,
                subscriptions,
                current,
                lag,
                lag_aware,
                member_racks,
                partition_racks,
                member_capacities,
                check_constraints(pins, max_partitions),
                strict=True,
            )
            if not start.racked:
                if start.final:
                    return start.dealt()
                if start.free and not start.weighted:
                    return start.kept_uniform()
                if start.levelable:
                    leveled = start.leveled_result()
                    if leveled is not None:
                        return leveled
            elif start.final:  # nothing to even out, and no swap can improve the rack deal
                return start.dealt_by_rack()
            eng, change = start.engine(policy)
            if eng._stranded:
                left = eng.unassigned()
                warnings.warn(
                    f"{len(left)} partitions left unassigned: every subscriber is at its "
                    f"max_partitions cap (first: {', '.join(f'{t}-{p}' for t, p in left[:5])})",
                    UnassignedPartitionsWarning,
                    stacklevel=3,
                )
            if start.fresh:
                return eng.assignment()
            # Members the settling did not change keep their claim: hand back the
            # caller's partition objects instead of building new ones.
            out: Assignment = {}
            for name in start.spec.members:
                now = change.assignments.get(name)
                if now is None:
                    now = start.claims.given.get(name)
                    if now is None:
                        now = eng.partitions_of(name)
                out[name] = now
            return out

    def _bulk_load(
        self,
        members: Iterable[str],
        topics_of: Mapping[str, frozenset[str]],
        initial: Mapping[str, list[int]],
        weighed: Mapping[str, tuple[list[int], int]] | None = None,
        capacities: Mapping[str, float] | None = None,
    ) -> None:
        """Adopt a whole assignment at once (no pid twice; each list ascending unless
        the engine weighs lag). ``weighed`` gives a member's ``by_lag`` entries and total
        lag when the caller has them already."""
        members = list(members)
        if weighed is None and self.lag_aware and self._plag:
            weighed = self._weigh(members, initial)
        owner = self._owner
        by_topics: dict[frozenset[int], list[str]] = {}
        tids_of: dict[frozenset[str], frozenset[int]] = {}
        for name in members:
            topics = topics_of[name]
            tids = tids_of.get(topics)
            if tids is None:
                tids = tids_of[topics] = self._tids(topics)
            if weighed is not None:
                by_lag, lag = weighed[name]
            else:  # all weights are 0 and the list is ascending: already in order
                by_lag, lag = initial.get(name, []), 0
            m = _Member(name, topics, tids, by_lag, lag)
            self._give_slot(m)
            if capacities is not None and capacities[name] != 1:
                m.capacity = capacities[name]
                self._weighted += 1
            self._total_lag += lag
            self._members[name] = m
            by_topics.setdefault(tids, []).append(name)
        loaded = list(self._members)
        held_lists = [initial.get(name, []) for name in loaded]
        owner.update(
            zip(
                chain.from_iterable(held_lists),
                chain.from_iterable(map(repeat, loaded, map(len, held_lists))),
                strict=True,
            )
        )
        counts = np.fromiter(map(len, held_lists), np.int64, len(held_lists))
        slots = np.fromiter((self._members[n].slot for n in loaded), np.int64, len(loaded))
        held = np.fromiter(chain.from_iterable(held_lists), np.int64, int(counts.sum()))
        self._held.put(held, np.repeat(slots, counts))
        subscribers: dict[int, list[str]] = {}
        for group_tids, names in by_topics.items():
            for t in group_tids:
                if t in subscribers:
                    subscribers[t] += names
                else:
                    subscribers[t] = names.copy()
        for t, names in subscribers.items():
            self._subs.setdefault(t, set()).update(names)
        # Topic groups in one pass: topics with the same subscribers share a group.
        by_subscribers: dict[frozenset[str], set[int]] = {}
        for t, subs in sorted(self._subs.items()):
            by_subscribers.setdefault(frozenset(subs), set()).add(t)
        for topics_in_group in by_subscribers.values():
            self._add_group(topics_in_group, None)
        self._reindex()
        coverable = sum(self._pcount(t) for t, subs in self._subs.items() if subs)
        if len(owner) < coverable:
            for t, subs in self._subs.items():
                if subs:
                    self._orphans.update(filterfalse(owner.__contains__, self._topic_pids(t)))

    def _weigh(
        self, members: list[str], initial: Mapping[str, list[int]]
    ) -> dict[str, tuple[list[int], int]]:
        """Each member's ``by_lag`` entries and total lag, with the lag of every held
        partition looked up in one gather (one per member cost 10 000 NumPy calls at
        10 000 members)."""
        held = [initial.get(name, []) for name in members]
        flat = list(chain.from_iterable(held))
        weights = self._plag.many(flat)
        entries = list(map(or_, map(lshift, weights, repeat(LAG_SHIFT)), flat))
        stops = list(accumulate(map(len, held)))
        out: dict[str, tuple[list[int], int]] = {}
        for name, start, stop in zip(members, [0, *stops][:-1], stops, strict=True):
            by_lag = entries[start:stop]
            by_lag.sort()
            out[name] = (by_lag, sum(weights[start:stop]))
        return out

    def _reindex(self) -> None:
        """Rebuild the member-wide indexes from scratch: cheaper than many single updates."""
        members = self._members.values()
        fast = None if self._weighted or self._caps else _unweighted_indexes(self._members)
        if fast is None:
            self._load = SortedList(map(_Member.key, members))
            self._by_lag = SortedList(zip(map(_Member.load, members), self._members, strict=True))
            self._capacity_total = math.fsum(map(_capacity_of, members))
        else:
            self._load, self._by_lag = fast
            self._capacity_total = len(self._members)
        self._gheap.clear()
        self._hheap = None

    # ------------------------------------------------------------------ public API

    def apply(self, events: Iterable[Event]) -> Change:
        """Apply coalesced events, then restore balance once and return only what changed.

        With the collector paused, as in a build: an event allocates a few thousand
        tracked objects and frees most of them, but unpaused those allocations set off
        young collections and, now and then, a full one over the whole engine (up to
        86 ms inside one lag update at 10 000 x 1 000 000)."""
        with collector_paused():
            return self._apply(events)

    def _apply(self, events: Iterable[Event]) -> Change:
        # Every event is checked before any changes state: a batch that raises leaves
        # the engine exactly as it was (``event_checks.py``).
        lag_only = True
        for event in check_events(events):
            if isinstance(event, Join):
                self._join(event.member, event.topics, event.rack, event.capacity)
            elif isinstance(event, Leave):
                self._leave(event.member)
            elif isinstance(event, Resubscribe):
                self._resubscribe(event.member, event.topics)
            elif isinstance(event, Repartition):
                self._repartition(event.topic, event.count)
            elif isinstance(event, Rerack):
                self._rerack(event.racks)
            elif isinstance(event, Constrain):
                self._constrain(event.constraints)
            else:
                self._update_lag(event)
                continue
            lag_only = False
        work = sorted(self._touched)
        return self._settle(
            work, lag_budget=self.policy.max_moves, count_lag_moves=True, lag_only=lag_only
        )

    def assignment(self) -> Assignment:
        names = sorted(self._members)
        return dict(zip(names, self._lists([self._members[n] for n in names]), strict=True))

    def partitions_of(self, member: str) -> list[TopicPartition]:
        return self._lists([self._members[member]])[0]

    def owner_of(self, tp: TopicPartition) -> str | None:
        pid = self._ids.pid(tp)
        return None if pid is None else self._owner.get(pid)

    @property
    def members(self) -> dict[str, frozenset[str]]:
        return {name: m.topics for name, m in sorted(self._members.items())}

    def topics_of(self, member: str) -> frozenset[str] | None:
        """One member's subscription (None: not a member), without building ``members``."""
        m = self._members.get(member)
        return None if m is None else m.topics

    def intern_partitions(self) -> None:
        """Hand out one shared ``TopicPartition`` per partition in every later result
        (``Change``, ``assignment``, ``partitions_of``, ``lag``): for a long-lived caller
        that keeps every partition anyway, like the controller. Costs one pointer per
        partition; without it, every change allocates its members' partitions anew."""
        self._ids.intern()

    def cross_rack(self) -> int:
        """Partitions held by a member whose rack holds none of their replicas (Kafka's
        count), kept up to date by each step: O(1) to read."""
        return len(self._cross_rack)

    def rack_of(self, member: str) -> str | None:
        return self._racks.member.get(member)

    def capacity_of(self, member: str) -> float | None:
        """The member's capacity (1 when it declared none); None: not a member."""
        m = self._members.get(member)
        return None if m is None else m.capacity

    def adopt_racks(self, member_racks: MemberRacks, partition_racks: PartitionRacks) -> None:
        """Take racks as they already stand, moving nothing: a controller that recovers
        an assignment must not move it (invariant 3), and its predecessor aligned it
        step by step, which a full alignment could still improve on. What is held off
        its racks is indexed, for later steps to pair with. Members not in the group are
        ignored; bad racks raise as in the events."""
        for name, rack in member_racks.items():
            if rack is not None:
                check_rack(rack, f"adopt_racks: member_racks[{name!r}]")
        replicas = checked_racks(partition_racks, "adopt_racks: partition_racks")
        for name, rack in member_racks.items():
            if name in self._members:
                self._racks.set_member(name, rack)
        self._rerack(replicas)
        self._rack_work.clear()
        racks, owner = self._racks, self._owner
        self._cross_rack = {pid for pid, holder in owner.items() if racks.misplaced(holder, pid)}
        for pid in sorted(self._cross_rack):
            racks.note(pid, owner[pid])

    def violations(self) -> list[str]:
        """Constraints broken now (``constraints.violations``): always empty."""
        ids, pins = self._ids, self._pins
        rules = Constraints(dict(zip(ids.each(list(pins)), pins.values(), strict=True)), self._caps)
        members = self._members
        return violations(self.owner_of, lambda m: members[m].count, self._ppt, self.members, rules)

    def unassigned(self) -> list[TopicPartition]:
        """Partitions with subscribers but no owner: every subscriber is at its cap."""
        return self._ids.tps(sorted(self._stranded))

    def member_count(self) -> int:
        return len(self._members)

    def lag_skew(self) -> float:
        """Largest member lag / mean member lag (1.0: even, or no lag), in O(1)."""
        if not self._members or self._total_lag <= 0:
            return 1.0
        peak: float = self._by_lag[-1][0]
        return peak * self._capacity_total / self._total_lag

    @property
    def partitions_per_topic(self) -> dict[str, int]:
        return dict(self._ppt)

    def member_lag(self) -> dict[str, int]:
        return {name: m.lag for name, m in sorted(self._members.items())}

    def lag(self) -> dict[TopicPartition, int]:
        pids, values = self._plag.items()
        pids += self._ahead.keys()
        values += self._ahead.values()
        return dict(zip(self._ids.each(pids), values, strict=True))

    # ------------------------------------------------------------------ event handlers

    def _join(
        self, name: str, topics: frozenset[str], rack: str | None = None, weight: float = 1.0
    ) -> None:
        if name in self._members:
            self._resubscribe(name, topics)
            m = self._members[name]
            if self._racks.set_member(name, rack):
                self._rack_work.update(map(pid_of, m.by_lag))
            if self._set_capacity(m, weight):
                self._touched.add(name)
            return
        self._removed.discard(name)
        self._joined.add(name)
        self._racks.set_member(name, rack)
        m = _Member(name, topics, self._tids(topics), cap=self._caps.get(name))
        self._give_slot(m)
        if weight != 1:
            m.capacity = weight
            self._weighted += 1
        self._pin_work.update(self._pins_of.get(name, ()))
        self._capacity_total += m.capacity
        self._members[name] = m
        self._refine(m.tids)
        self._attach(m)
        for t in m.tids:
            self._add_subscriber(t, name)
        self._touched.add(name)

    def _give_slot(self, m: _Member) -> None:
        m.slot = self._free_slots.pop() if self._free_slots else len(self._slot_names)
        if m.slot == len(self._slot_names):
            self._slot_names.append(m.name)
        else:
            self._slot_names[m.slot] = m.name

    def _leave(self, name: str) -> None:
        m = self._members.get(name)
        if m is None:
            return
        self._detach(m)
        pids = list(map(pid_of, m.by_lag))
        for pid in pids:
            self._before_owner.setdefault(pid, name)
            del self._owner[pid]
        self._held.put(np.fromiter(pids, np.int64, len(pids)), -1)
        self._free_slots.append(m.slot)
        self._orphans.update(pids)
        self._total_lag -= m.lag
        self._capacity_total -= m.capacity
        self._weighted -= m.capacity != 1
        for t in m.tids:
            self._subs[t].discard(name)
        del self._members[name]
        self._racks.drop_member(name)
        self._removed.add(name)
        self._touched.discard(name)

    def _set_capacity(self, m: _Member, weight: float) -> bool:
        """Re-weigh a member in place; True when its capacity changed."""
        if weight == m.capacity:
            return False
        self._detach(m)
        self._weighted += (weight != 1) - (m.capacity != 1)
        self._capacity_total += weight - m.capacity
        m.capacity = weight
        self._attach(m)
        return True

    def _resubscribe(self, name: str, topics: frozenset[str]) -> None:
        m = self._members.get(name)
        if m is None:
            self._join(name, topics)
            return
        if topics == m.topics:
            return
        tids = self._tids(topics)
        for pid in [p for p in map(pid_of, m.by_lag) if p >> PART_BITS not in tids]:
            self._move(pid, None)
            self._orphans.add(pid)
        old = m.tids
        self._detach(m)
        for t in old - tids:
            self._subs[t].discard(name)
        m.topics = topics
        m.tids = tids
        m.groups_version = -1
        self._pin_work.update(self._pins_of.get(name, ()))
        self._refine(tids)
        self._attach(m)
        for t in sorted(tids - old):
            self._add_subscriber(t, name)
        self._touched.add(name)

    def _repartition(self, topic: str, count: int) -> None:
        t = self._ids.add(topic)
        old = self._ppt.get(topic, 0)
        self._ppt[topic] = count
        for pid in self._ids.span(topic, old, count):
            self._orphans.discard(pid)
            if pid in self._owner:
                self._touched.add(self._owner[pid])
                self._move(pid, None, vanished=True)
        self._plag.discard(self._ids.span(topic, old, count))
        grown = [p for p in self._ahead if p >> PART_BITS == t and p & PART_MASK < count]
        if grown:
            self._plag.swap(grown, [self._ahead.pop(p) for p in grown])
        if self._subs.get(t):
            self._orphans.update(self._ids.span(topic, count, old))
        self._pin_work.update(pid for pid in self._pins if pid >> PART_BITS == t)

    def _update_lag(self, readings: Readings) -> None:
        """Re-weigh the changed readings. Costs O(readings) plus, per member touched, its
        index entries; when many members are touched the indexes are rebuilt once."""
        pids, values, at, ahead = self._ids.existing(
            self._ppt, *self._ids.checked_lag(readings.lag, readings.columns)
        )
        self._ahead.update(ahead)
        if not self.lag_aware:
            self._plag.swap(pids, values)
            return
        delta = self._lag_deltas(pids, values, at)
        if not delta:
            return
        # A member's lag-ordered list is re-sorted when next read, not here: most members
        # a reading touches are not looked at before the next reading.
        bulk = len(delta) * _REINDEX_SHARE > len(self._members)
        members = self._members
        self._total_lag += sum(delta.values())
        if bulk:
            for name, d in delta.items():
                m = members[name]
                m.stale = True
                m.lag += d
            self._reindex()
            return
        for name, d in delta.items():
            m = members[name]
            self._detach(m)
            m.stale = True
            m.lag += d
            self._attach(m)

    def _lag_deltas(
        self, pids: list[int], values: list[int], at: NDArray[np.int64]
    ) -> dict[str, int]:
        """Store the readings; each member whose partitions' lag changed, with the sum of
        the changes (0 when they cancel out: its list still needs re-sorting). In array
        passes (holders gathered, changes summed per slot) unless a lag past 64 bits or
        a sum that could overflow is involved. ``at``: the pids as an array."""
        swapped = self._plag.swap_exact(at, values)
        if swapped is not None:
            old, new = swapped
            holders = self._held.gather(at)
            change = new - old
            moved = (holders >= 0) & (change != 0)
            holders, change = holders[moved], change[moved]
            if not len(change) or int(np.abs(change).max()) * len(change) <= INT64_MAX:
                sums = np.zeros(len(self._slot_names), dtype=np.int64)
                np.add.at(sums, holders, change)
                touched = np.zeros(len(self._slot_names), dtype=bool)
                touched[holders] = True
                slots = np.flatnonzero(touched)
                names = map(self._slot_names.__getitem__, slots.tolist())
                return dict(zip(names, sums[slots].tolist(), strict=True))
            olds = old.tolist()  # summed as Python ints below
        else:
            olds = self._plag.swap(pids, values)
        delta: dict[str, int] = {}
        for name, d in zip(map(self._owner.get, pids), map(sub, values, olds), strict=True):
            if d and name is not None:
                delta[name] = delta.get(name, 0) + d
        return delta

    def _rerack(self, racks: Mapping[TopicPartition, frozenset[str]]) -> None:
        for tp, named in racks.items():
            self._ids.add(tp.topic)
            pid = self._ids.pid(tp)
            assert pid is not None, "event_checks admits Kafka partitions only"
            self._racks.set_partition(pid, named)
            self._rack_work.add(pid)

    def _constrain(self, constraints: Constraints) -> None:
        """Take a whole new set of constraints; only what differs is acted on."""
        pins: dict[int, str] = {}
        for tp, member in constraints.pins.items():
            self._ids.add(tp.topic)
            pid = self._ids.pid(tp)
            assert pid is not None, "check_constraints admits Kafka partitions only"
            pins[pid] = member
        old = self._pins
        self._pin_work.update(p for p in pins.keys() | old.keys() if pins.get(p) != old.get(p))
        self._pins = pins
        self._pins_of = {}
        for pid, member in pins.items():
            self._pins_of.setdefault(member, set()).add(pid)
        caps = dict(constraints.caps)
        for name in sorted(self._caps.keys() | caps.keys()):
            m = self._members.get(name)
            if m is None or m.cap == caps.get(name):
                continue
            self._detach(m)
            m.cap = caps.get(name)
            self._attach(m)
            self._touched.add(name)
        self._caps = caps

    def _entries(self, m: _Member) -> list[int]:
        """``m.by_lag`` in current weight order."""
        if m.stale:
            pids = list(map(pid_of, m.by_lag))
            weights = map(lshift, self._plag.many(pids), repeat(LAG_SHIFT))
            m.by_lag = sorted(map(or_, weights, pids))
            m.stale = False
        return m.by_lag

    # ------------------------------------------------------------------ settling

    def _begin(self) -> None:
        #: Each partition that changed hands, and its holder before the event (None
        #: when it had none, or vanished): what ``_diff`` compares, O(moves).
        self._before_owner: dict[int, str | None] = {}
        #: Vanished partitions' holders before the event (their ``_before_owner`` is None
        #: so that no vanishing counts as a move, yet the holder's list changed).
        self._vanished_from: dict[int, str] = {}
        self._touched: set[str] = set()
        self._orphans: set[int] = set()
        self._removed: set[str] = set()
        self._joined: set[str] = set()
        self._lag_moved: set[int] = set()
        self._trigger: LagTrigger | None = None
        #: Partitions whose racks or holder's rack changed: to align even if unmoved.
        self._rack_work: set[int] = set()
        self._rack_moved: set[int] = set()
        #: Pinned partitions whose pin may have started or stopped holding.
        self._pin_work: set[int] = set()

    def _settle(
        self,
        work: Iterable[str],
        *,
        lag_budget: int,
        count_lag_moves: bool,
        lag_only: bool = False,
    ) -> Change:
        if not lag_only:
            pinned = self._enforce_pins()
            touched = self._place_orphans()
            self._repair([*work, *pinned, *touched])
            self._place_stranded()
            if self._caps:
                self._shed_excess()
        if self.lag_aware:
            self._rebalance_lag(lag_budget, eager=not count_lag_moves)
            self._place_stranded()
        if self._racks:
            self._align({*self._before_owner, *self._rack_work})
        if self._racks or self._cross_rack:  # the swaps are in ``_before_owner`` now
            self._recount_cross_rack({*self._before_owner, *self._rack_work})
        change = self._diff(count_lag_moves)
        self._begin()
        return change

    def _place_stranded(self) -> None:
        """Partitions left unassigned because every subscriber was at its cap, placed
        as soon as a repair or a lag move has made room under a cap."""
        while self._stranded and (placed := self._place_orphans()):
            self._repair(placed)

    def _enforce_pins(self) -> list[str]:
        """Hand each pinned partition whose pin holds to its member and mark it there;
        release those whose pin stopped holding. Returns the members to repair."""
        touched: list[str] = []
        members, owner, pins = self._members, self._owner, self._pins
        for pid in sorted(self._pin_work):
            holder = owner.get(pid)
            name = pins.get(pid)
            m = members.get(name) if name is not None else None
            holds = (
                m is not None
                and pid >> PART_BITS in m.tids
                and pid & PART_MASK < self._pcount(pid >> PART_BITS)
            )
            if not holds:
                if holder is not None and pid in members[holder].pinned:
                    self._unpin(members[holder], pid)
                    touched.append(holder)  # it may give the partition now
                continue
            assert m is not None
            if holder != m.name:
                self._move(pid, m.name)
                touched.extend(n for n in (holder, m.name) if n is not None)
            if pid not in m.pinned:
                if not m.pinned:
                    m.pinned = set()
                assert isinstance(m.pinned, set)
                m.pinned.add(pid)
                m.held = None
                self._hheap = None
        self._pin_work.clear()
        return touched

    def _unpin(self, m: _Member, pid: int) -> None:
        if pid in m.pinned:
            assert isinstance(m.pinned, set)
            m.pinned.discard(pid)
            m.held = None
            self._hheap = None

    def _shed_excess(self) -> None:
        """Unassign what a member holds above its cap when no subscriber had room for it
        (the lightest first); it is placed again once one has."""
        for name, cap in sorted(self._caps.items()):
            m = self._members.get(name)
            if m is None or m.count <= cap:
                continue
            pinned = m.pinned
            movable = [e & PID_MASK for e in self._entries(m) if e & PID_MASK not in pinned]
            for pid in movable[: m.count - cap]:
                self._move(pid, None)
                self._stranded.add(pid)

    def _place_orphans(self) -> list[str]:
        """Give each unowned partition of a subscribed topic to its least-loaded subscriber,
        heaviest first (longest-processing-time order evens lag). Partitions whose every
        subscriber is at its cap stay unassigned, and are tried again each step."""
        owner = self._owner
        pool = self._orphans | self._stranded if self._stranded else self._orphans
        self._stranded = set()
        orphans = [
            pid
            for pid in pool
            if pid not in owner
            and pid & PART_MASK < self._pcount(pid >> PART_BITS)
            and self._subs.get(pid >> PART_BITS)
        ]
        weights = self._plag.many(orphans) if self.lag_aware else [0] * len(orphans)
        if any(weights):
            heaviest = sorted(zip(map(neg, weights), orphans, strict=True))
            weights = [-w for w, _ in heaviest]
            orphans = [pid for _, pid in heaviest]
        else:
            orphans.sort()
        self._orphans.clear()
        plain = not (self._pins or self._caps or self._weighted)
        if plain and self._members and self._identical():
            return self._deal_orphans(orphans, weights)
        return self._place_one_by_one(orphans)

    def _place_one_by_one(self, orphans: list[int]) -> list[str]:
        """Each orphan to the least-loaded subscriber of its topic, through the
        topic-group heaps; the receivers, in order."""
        receivers: list[str] = []
        for pid in orphans:
            key = self._min_subscriber(pid >> PART_BITS)
            if key is None:
                continue
            if key[0] == math.inf:
                self._stranded.add(pid)
                continue
            self._move(pid, key[2])
            receivers.append(key[2])
        return receivers

    def _identical(self) -> bool:
        """Identical subscriptions: every topic with subscribers has every member."""
        n = len(self._members)
        return all(len(subs) == n for subs in self._subs.values() if subs)

    def _deal_orphans(self, orphans: list[int], weights: list[int]) -> list[str]:
        """``_place_one_by_one`` where every member may take any partition and no
        capacity, pin or cap is declared (so ``_load``'s order is the receivers' order
        too), with the indexes touched once per receiver instead of once per partition.
        Each orphan goes to the least-loaded member as that loop finds it: k orphans can
        only reach the k first members of ``_load`` (one further down is least loaded
        only after every member before it took one), so those are dealt to from a small
        heap of their own."""
        members, before = self._members, self._before_owner
        # ``_load`` holds (2c - 1, lag, name); a receiver's key is (2c + 1, lag, name).
        heap = [(give + 2, lag, name) for give, lag, name in islice(self._load, len(orphans))]
        dealt: dict[str, list[tuple[int, int]]] = {}
        for pid, weight in zip(orphans, weights, strict=True):
            c2, lag, name = heap[0]
            heapq.heapreplace(heap, (c2 + 2, lag + weight, name))
            dealt.setdefault(name, []).append((pid, weight))
        receivers: list[_Member] = []
        # Many receivers (several members' partitions at once): one rebuild of the
        # member-wide indexes costs less than taking each receiver out and back in.
        bulk = len(dealt) * _REINDEX_SHARE > len(members)
        for name, taken in dealt.items():
            m = members[name]
            if not bulk:
                self._detach(m)
            for pid, weight in taken:
                before.setdefault(pid, None)
                self._insert_part(m, pid, weight)
            if not bulk:
                self._attach(m)
            receivers += repeat(m, len(taken))
        if bulk:
            self._reindex()
        self._hand_over([pid for taken in dealt.values() for pid, _ in taken], receivers)
        return list(dealt)

    def _hand_over(self, pids: list[int], receivers: list[_Member]) -> None:
        """Record new holders in the owner map and in its array, together (the paths
        that move many partitions at once; ``_move`` writes both for one)."""
        self._owner.update(zip(pids, map(_name_of, receivers), strict=True))
        slots = np.fromiter(map(_slot_of, receivers), np.int64, len(receivers))
        self._held.put(np.fromiter(pids, np.int64, len(pids)), slots)

    def _repair(self, work: Iterable[str]) -> None:
        self._rebalance_in_bulk()
        stack = sorted(set(work), reverse=True)
        queued = set(stack)
        while stack:
            name = stack.pop()
            queued.discard(name)
            m = self._members.get(name)
            if m is None:
                continue
            donor = self._find_donor(m)
            if donor is None:
                found = self._receiver_for(m)
                if found is None:
                    continue
                donor = self._find_donor(found)
            # Move from the fullest donor to the emptiest receiver, whichever member the
            # violation was found at: under identical subscriptions that is what makes the
            # total movement exactly minimal.
            assert donor is not None
            receiver = self._receiver_for(donor)
            assert receiver is not None
            pid = self._pick(donor, receiver, (donor.lag - receiver.lag) / 2)
            assert pid is not None, "a donor always holds a partition its receiver may take"
            self._move(pid, receiver.name)
            for n in (name, donor.name, receiver.name):
                if n not in queued:
                    queued.add(n)
                    stack.append(n)

    def _rebalance_in_bulk(self) -> None:
        """Identical subscriptions and a wide count spread (members joined, a fleet's
        second wave): the repair loop's outcome, decided at once. The fullest members
        keep ``q + 1`` and every other member ``q`` (with capacities: their Sainte-Laguë
        counts, the larger ones at a tie to the members most over their share), so only
        the excess moves (KIP-54's minimum); each donor gives excess spread evenly over
        its lag order, dealt heaviest first to the receiver with the least lag. Indexes
        are updated once per member instead of once per partition: 50 000 moves cost
        tens of milliseconds, not seconds."""
        members = self._members
        load = self._load
        n = len(members)
        # ``give`` is twice a count (over capacity), so this is a spread of _BULK_SPREAD.
        # Pins and caps bound single members: the repair loop honours them move by move.
        if self._pins or self._caps or n < 2 or load[-1][0] - load[0][0] < 2 * _BULK_SPREAD:
            return
        if not self._identical():
            return
        total = len(self._owner)
        if self._weighted:
            share = total / self._capacity_total
            order = sorted(members.values(), key=lambda m: (m.capacity * share - m.count, m.name))
            counts = quotas(total, list(map(_capacity_of, order)))
            quota = {m.name: c for m, c in zip(order, counts, strict=True)}
            short, q = order, 0
        else:
            q, r = divmod(total, n)
            # The r larger quotas go to the fullest members (ties: name). Only members
            # above q can give and only members below their quota receive: both are read
            # from the ends of the load index, not found by sorting every member.
            fullest = [members[k[2]] for k in takewhile(lambda k: k[0] > 2 * q - 1, reversed(load))]
            if len(fullest) >= r:
                order = sorted(fullest, key=lambda m: (-m.count, m.name))
                short = [members[k[2]] for k in takewhile(lambda k: k[0] < 2 * q - 1, load)]
            else:  # members holding q or less get a larger quota too: sort them all
                order = sorted(members.values(), key=lambda m: (-m.count, m.name))
                short = order
            quota = {m.name: q + (i < r) for i, m in enumerate(order)}
        gives: list[tuple[int, _Member]] = []
        # A donor of one gives its lightest partition: for stale lists (after a lag
        # reading, most) found together, without re-sorting each.
        ones: list[_Member] = []
        for m in order:
            extra = m.count - quota[m.name]
            if extra == 1 and m.stale:
                ones.append(m)
            elif extra > 0:
                entries = self._entries(m)
                step = len(entries) / extra
                gives.extend((entries[int(i * step)], m) for i in range(extra))
        gives.extend(zip(self._lightest(ones), ones, strict=True))
        receivers = [m for m in short if m.count < quota.get(m.name, q)]
        touched = {m.name: m for _, m in gives} | {m.name: m for m in receivers}
        for m in touched.values():
            self._detach(m)
        need = {m.name: quota.get(m.name, q) - m.count for m in receivers}
        room = [(m.load(), m.name) for m in receivers]
        heapq.heapify(room)
        taken: dict[str, set[int]] = {}
        got: dict[str, list[int]] = {}
        moved: list[int] = []
        moved_to: list[_Member] = []
        before = self._before_owner
        gives.sort(key=lambda g: g[0], reverse=True)  # heaviest first
        for entry, donor in gives:
            _, name = heapq.heappop(room)
            b = members[name]
            pid, weight = entry & PID_MASK, entry >> LAG_SHIFT
            before.setdefault(pid, donor.name)
            moved.append(pid)
            moved_to.append(b)
            taken.setdefault(donor.name, set()).add(pid)
            got.setdefault(name, []).append(pid)
            donor.lag -= weight
            b.by_lag.append(entry)
            b.lag += weight
            need[name] -= 1
            if need[name]:
                heapq.heappush(room, (b.load(), name))
        self._hand_over(moved, moved_to)
        for m in touched.values():
            gone = taken.get(m.name, set())
            if gone:  # by pid: a stale list's entries carry earlier weights
                m.by_lag = [e for e in m.by_lag if e & PID_MASK not in gone]
            elif not m.stale:
                m.by_lag.sort()
            if m.listed is not None:
                self._relist(m.listed, gone, got.get(m.name, ()))
            m.held = None  # recounted on next need
            self._attach(m)

    def _lightest(self, ms: list[_Member]) -> list[int]:
        """Each member's lightest entry by current weight (``_entries(m)[0]``: ties to
        the smaller pid), found for all of them in array passes instead of re-sorting
        each list. Every member holds a partition."""
        if not ms:
            return []
        lists = list(map(_by_lag_of, ms))
        counts = np.fromiter(map(len, lists), np.intp, len(lists))
        pids = np.fromiter(map(pid_of, chain.from_iterable(lists)), np.int64, int(counts.sum()))
        weights = self._plag.exact_many(pids)
        if weights is None:  # a lag past 64 bits: one by one
            return [self._entries(m)[0] for m in ms]
        starts = np.cumsum(counts) - counts
        least = np.minimum.reduceat(weights, starts)
        at_least = weights == np.repeat(least, counts)
        first = np.minimum.reduceat(np.where(at_least, pids, np.iinfo(np.int64).max), starts)
        return list(map(or_, map(lshift, least.tolist(), repeat(LAG_SHIFT)), first.tolist()))

    def _relist(
        self, listed: list[TopicPartition], lost: Iterable[int], gained: Iterable[int]
    ) -> None:
        """Keep a member's ``listed`` in step with partitions it lost and gained."""
        tp = self._ids.tp
        for pid in lost:
            del listed[bisect.bisect_left(listed, tp(pid))]
        for pid in gained:
            bisect.insort(listed, tp(pid))

    def _violators(self) -> list[str]:
        """The repair worklist after a bulk load: every member that may be the short side
        of a KIP-54 violation (one the fullest member could give to: 2+ fewer partitions
        when no capacity is declared). Repairing them reaches every violation; any found
        later involves a member the repair itself changed."""
        if not self._load:
            return []
        top = self._load[-1][0]
        return sorted(n for n, m in self._members.items() if m.take_key()[0] < top)

    def _find_donor(self, b: _Member) -> _Member | None:
        """The fullest member that may give ``b`` a partition (2+ more partitions than
        ``b`` when no capacity is declared) and holds one ``b`` may take.

        The fullest few members are tried first (with identical subscriptions the first
        always qualifies); past them, per-topic heaps of holders answer directly.
        """
        limit = b.take_key()[0]
        if not self._load or self._load[-1][0] <= limit:
            return None
        for i, (score, _lag, name) in enumerate(reversed(self._load)):
            if score <= limit:
                return None
            a = self._members[name]
            if not b.tids.isdisjoint(a.holding()):
                return a
            if i >= _DONOR_SCAN:
                break
        best: Key | None = None
        for t in b.tids:
            top = self._max_holder(t)
            if top is not None and -top[0] > limit and (best is None or top < best):
                best = top
        return None if best is None else self._members[best[2]]

    def _max_holder(self, topic: int) -> Key | None:
        if self._hheap is None:
            heaps: dict[int, list[Key]] = {}
            for member in self._members.values():
                for t in member.holding():
                    key = member.key()
                    heaps.setdefault(t, []).append((-key[0], -key[1], member.name))
            for built in heaps.values():
                heapq.heapify(built)
            self._hheap = heaps
            self._hheap_size = sum(map(len, heaps.values()))
        heap = self._hheap.get(topic)
        while heap:
            c, lag, name = heap[0]
            m = self._members.get(name)
            if m is not None and m.holding().get(topic):
                give, load, _ = m.key()
                if give == -c and load == -lag:
                    return heap[0]
            heapq.heappop(heap)
        return None

    def _receiver_for(self, a: _Member) -> _Member | None:
        """A member ``a`` may give a partition to (2+ fewer partitions than ``a`` when no
        capacity is declared) that could take one of ``a``'s."""
        limit = a.key()[0]
        # Without capacities the least ``take`` is the least ``give`` + 2: nobody qualifies.
        if not self._load or (not self._weighted and self._load[0][0] + 2 >= limit):
            return None
        best: Key | None = None
        tgroup = self._tgroup
        for g in {tgroup[t] for t in a.holding()}:  # a topic group answers for its topics
            key = self._min_in_group(g)
            if key is not None and key[0] < limit and (best is None or key < best):
                best = key
        return None if best is None else self._members[best[2]]

    def _pick(self, a: _Member, b: _Member, target: float) -> int | None:
        """A partition of ``a`` that ``b`` may take with lag closest to ``target``
        (ties: the one at or below it, so a move never overshoots)."""
        entries = self._entries(a)
        # The first entry whose lag exceeds ``target``.
        i = bisect.bisect_right(entries, _last_entry_at(math.floor(target))) if target >= 0 else 0
        lo, hi = i - 1, i
        tids, pinned = b.tids, a.pinned
        while lo >= 0 or hi < len(entries):
            take_lo = hi >= len(entries) or (
                lo >= 0
                and target - (entries[lo] >> LAG_SHIFT) <= (entries[hi] >> LAG_SHIFT) - target
            )
            if take_lo:
                pid = entries[lo] & PID_MASK
                lo -= 1
            else:
                pid = entries[hi] & PID_MASK
                hi += 1
            if pid >> PART_BITS in tids and pid not in pinned:
                return pid
        return None

    # ------------------------------------------------------------------ lag balance

    def _rebalance_lag(self, budget: int, *, eager: bool) -> None:
        """Lower the largest member lag by moves and swaps that keep count balance.

        Hysteresis: start only above ``trigger_ratio`` x the lower bound, then continue to
        ``target_ratio``. A fresh placement (``eager``) moves nothing that was owned, so it
        searches on until no step improves. With capacities, lag is compared per unit
        of capacity: a member twice as strong is meant to carry twice the lag.
        """
        policy = self.policy
        if budget <= 0 or len(self._members) < 2:
            return
        spent = 0
        first = not eager
        #: Members' lags in list order, as arrays for the array search: one step changes
        #: only its two members, so the others' carry over to the next step.
        lags: dict[str, NDArray[np.int64]] = {}
        while spent < budget:
            top_load, top_name = self._by_lag[-1]
            a = self._members[top_name]
            ratio = 1.0 if eager else policy.trigger_ratio if first else policy.target_ratio
            mean = self._total_lag / self._capacity_total
            if a.lag <= policy.min_lag or top_load <= ratio * mean:
                return  # within the ratio of the mean, so of the bound: a's list unsorted
            entries = self._entries(a)
            heaviest = entries[-1] >> LAG_SHIFT if entries else 0
            bound = max(mean, a.share(heaviest))
            if top_load <= ratio * bound:
                return
            if first:
                unit = bound if a.capacity == 1 else bound * a.capacity
                self._trigger = LagTrigger(top_name, a.lag, unit)
            first = False
            step = self._best_lag_step(a, budget - spent, lags)
            if step is None or step[0] > top_load * (1.0 - policy.min_gain):
                return
            cost = self._apply_lag_step(a, step)
            if cost == 0:
                return
            spent += cost
            lags.pop(a.name, None)
            lags.pop(step[1].name, None)

    def _best_lag_step(
        self, a: _Member, allowance: int, lags: dict[str, NDArray[np.int64]]
    ) -> _LagStep | None:
        """The move or swap with the lowest resulting peak; the first found wins a tie.

        Exact pruning: nothing with b can end below ``_peak_floor(a, b)``, so once the
        best so far is at or under it, b is skipped, and a swap search stops on reaching
        it; the first to reach a floor is what the full search would keep. Swaps with
        partners the array search can take are found for all of them at once, before
        the walk; the walk then reads them in its order, as if searched in turn."""
        best: _LagStep | None = None
        a_load = a.load()
        a_top = self._entries(a)[-_SWAP_CANDIDATES:]
        swapping = allowance >= 2
        partners = self._lighter(a, a_load)
        in_arrays = self._swaps_in_arrays(a, a_top, partners, lags) if swapping else {}
        for b in partners:
            half = _even_share(a, b)
            floor = _peak_floor(a, b, half)
            beat = a_load if best is None else best[0]
            if beat <= floor:
                continue
            # A move that keeps a and b balanced with each other: their counts trade
            # places (without capacities, b holds one partition less than a).
            if b.take_key()[0] <= a.key()[0]:
                pid = self._pick(a, b, half)
                if pid is not None:
                    peak = _peak(a, b, self._plag.get(pid, 0))
                    if peak < beat:
                        best, beat = (peak, b, pid, None), peak
            if swapping and beat > floor:
                if b.name in in_arrays:
                    swap = in_arrays[b.name]
                    if swap is not None and swap[0] >= beat:
                        swap = None
                else:
                    swap = self._best_swap(a, b, a_top, half=half, beat=beat, floor=floor)
                if swap is not None:
                    best = (swap[0], b, swap[1], swap[2])
        return best

    def _lighter(self, a: _Member, a_load: float) -> list[_Member]:
        """The first ``policy.candidates`` members with less load than ``a``, lightest
        first: whom a step of the lag search tries."""
        out: list[_Member] = []
        for b_load, b_name in self._by_lag:
            if len(out) >= self.policy.candidates or b_load >= a_load:
                break
            if b_name != a.name:
                out.append(self._members[b_name])
        return out

    def _swaps_in_arrays(
        self,
        a: _Member,
        a_top: list[int],
        partners: list[_Member],
        lags: dict[str, NDArray[np.int64]],
    ) -> dict[str, tuple[float, int, int] | None]:
        """``_best_swap`` (without its ``beat``) for the partners that share a's topics,
        where neither holds pins: there it needs no per-partition checks, and the same
        pairs are found in array passes, for all those partners together. Keyed by
        partner name; a partner left out is searched by the loop."""
        if a.pinned:
            return {}
        able = [b for b in partners if not b.pinned and a.tids == b.tids and exact(a.lag, b.lag)]
        del able[MAX_PARTNERS - 1 :]
        if not able:
            return {}
        entries = [self._entries(b) for b in able]
        found = nearest_swaps(
            self._lag_array(a, lags)[-len(a_top) :],
            a.lag,
            a.capacity,
            [Partner(self._lag_array(b, lags), _even_share(a, b), b.lag, b.capacity) for b in able],
        )
        return {
            b.name: None if f is None else (f[0], a_top[f[1]] & PID_MASK, e[f[2]] & PID_MASK)
            for b, e, f in zip(able, entries, found, strict=True)
        }

    def _lag_array(self, m: _Member, lags: dict[str, NDArray[np.int64]]) -> NDArray[np.int64]:
        """``m``'s lags in its list's order (ascending), kept in ``lags`` until a step
        moves one of its partitions. Only for lags the array search takes (``exact``)."""
        got = lags.get(m.name)
        if got is None:
            e = self._entries(m)
            got = lags[m.name] = np.fromiter(map(rshift, e, repeat(LAG_SHIFT)), np.int64, len(e))
        return got

    def _best_swap(
        self, a: _Member, b: _Member, a_top: list[int], *, half: float, beat: float, floor: float
    ) -> tuple[float, int, int] | None:
        """The exchange p (of a's ``a_top``) <-> q (of b) with lag(p) - lag(q) nearest
        ``half``, the share that evens the two out, if its peak is below ``beat``; it
        stops early at ``floor``, the lowest peak any exchange can reach."""
        b_entries = self._entries(b)
        if not b_entries:
            return None
        best: tuple[float, int, int] | None = None
        a_tids, b_tids = a.tids, b.tids
        for e_p in a_top:
            p = e_p & PID_MASK
            if p >> PART_BITS not in b_tids or p in a.pinned:
                continue
            w_p = e_p >> LAG_SHIFT
            # The first entry of b whose lag is at least w_p - half.
            j = bisect.bisect_left(b_entries, max(0, math.ceil(w_p - half)) << LAG_SHIFT)
            for k in (j - 1, j):
                if 0 <= k < len(b_entries):
                    e_q = b_entries[k]
                    q = e_q & PID_MASK
                    d = w_p - (e_q >> LAG_SHIFT)
                    if d > 0 and q >> PART_BITS in a_tids and q not in b.pinned:
                        peak = _peak(a, b, d)
                        if peak < beat:
                            best, beat = (peak, p, q), peak
                            if peak <= floor:
                                return best
        return best

    def _apply_lag_step(self, a: _Member, step: _LagStep) -> int:
        _, b, p, q = step
        self._move(p, b.name)
        if q is not None:
            self._move(q, a.name)
        if (
            self._find_donor(a)
            or self._find_donor(b)
            or self._receiver_for(a)
            or self._receiver_for(b)
        ):
            # Would break KIP-54 balance (possible only with mixed subscriptions): undo.
            if q is not None:
                self._move(q, b.name)
            self._move(p, a.name)
            return 0
        self._lag_moved.add(p)
        if q is not None:
            self._lag_moved.add(q)
        return 1 if q is None else 2

    # ------------------------------------------------------------------ rack alignment

    def _align(self, candidates: set[int]) -> None:
        """Swap misplaced ``candidates`` onto a replica's rack (``rack_index.py``), until
        no swap helps. Only what the step moved or re-racked is looked at; misplaced
        partitions stay indexed, so a later step's misplaced partition finds them."""
        racks, owner, members, plag = self._racks, self._owner, self._members, self._plag
        cap: float | None = None  # per unit of capacity
        if self.lag_aware and self._by_lag:
            policy = self.policy
            mean = self._total_lag / self._capacity_total
            cap = max(self._by_lag[-1][0], math.floor(policy.target_ratio * mean), policy.min_lag)
        todo = sorted(pid for pid in candidates if racks.misplaced(owner.get(pid), pid))
        for p in todo:  # indexed first, so that two of them can pair up
            racks.note(p, owner[p])
        while todo:
            left: dict[int, None] = {}
            swapped = False
            for p in todo:
                a_name = owner.get(p)
                if a_name is None or not racks.misplaced(a_name, p):
                    continue
                a = members[a_name]
                if p in a.pinned:
                    continue
                w_p = plag.get(p, 0) if cap is not None else 0

                def fits(b_name: str, q: int, a: _Member = a, p: int = p, w_p: int = w_p) -> bool:
                    b = members[b_name]
                    if q >> PART_BITS not in a.tids or p >> PART_BITS not in b.tids:
                        return False
                    if q in b.pinned:
                        return False
                    if self._unbalances(a, q) or self._unbalances(b, p):
                        return False
                    if cap is None:
                        return True
                    d = plag.get(q, 0) - w_p
                    return a.share(a.lag + d) <= cap and b.share(b.lag - d) <= cap

                q = racks.partner(a_name, p, owner.get, fits, self._pids_of)
                if q is None:
                    left[p] = None
                    continue
                b_name = owner[q]
                self._move(p, b_name)
                self._move(q, a_name)
                self._rack_moved.update((p, q))
                swapped = True
                if racks.misplaced(a_name, q):
                    left[q] = None
                    racks.note(q, a_name)
            if not swapped:
                break
            todo = sorted(left)

    def _unbalances(self, m: _Member, pid: int) -> bool:
        """Whether ``m`` taking ``pid`` in a count-neutral swap would leave it a partition
        that a less loaded subscriber of its topic could take (KIP-54's rule; with mixed
        subscriptions a swap can hand a member a topic it had no share of)."""
        taker = self._min_subscriber(pid >> PART_BITS)
        return taker is not None and taker[2] != m.name and taker[0] < m.key()[0]

    def _adopt_racks(self, racks: Racks, misplaced: list[int], *, align: bool) -> None:
        """Take a snapshot's racks and the partitions it holds off them: indexed, for
        later steps to pair with, and aligned unless the placement is already as local
        as it can be."""
        for name, rack in racks.member.items():
            self._racks.set_member(name, rack)
        # Every partition in ``racks`` exists; an empty set reads as no racks known.
        self._racks.replicas.update(
            zip(self._ids.pids_of(racks.partition), racks.partition.values(), strict=True)
        )
        if align:  # indexed and counted by the alignment, in its order
            self._rack_work.update(misplaced)
            return
        owner, note = self._owner, self._racks.note
        for p in misplaced:
            note(p, owner[p])
        self._cross_rack.update(misplaced)

    def _recount_cross_rack(self, pids: Iterable[int]) -> None:
        """Only partitions a step moved or re-racked can have changed side."""
        misplaced, owner, cross = self._racks.misplaced, self._owner.get, self._cross_rack
        for pid in pids:
            if misplaced(owner(pid), pid):
                cross.add(pid)
            else:
                cross.discard(pid)

    def _pids_of(self, name: str) -> Iterator[int]:
        return map(pid_of, self._members[name].by_lag)

    # ------------------------------------------------------------------ primitives

    def _move(self, pid: int, to: str | None, *, vanished: bool = False) -> None:
        """Reassign one partition, keeping every index and the change record in step."""
        frm = self._owner.get(pid)
        if frm == to:
            return
        if pid not in self._before_owner:
            self._before_owner[pid] = None if vanished else frm
            if vanished and frm is not None:
                self._vanished_from[pid] = frm
        weight = self._plag.get(pid, 0) if self.lag_aware else 0
        if frm is not None:
            a = self._members[frm]
            if a.pinned:
                self._unpin(a, pid)
            self._detach(a)
            self._remove_part(a, pid, weight)
            self._attach(a)
            del self._owner[pid]
        if to is None:
            self._held.put_one(pid, -1)
            return
        b = self._members[to]
        self._detach(b)
        self._insert_part(b, pid, weight)
        self._attach(b)
        self._owner[pid] = to
        self._held.put_one(pid, b.slot)

    def _remove_part(self, m: _Member, pid: int, weight: int) -> None:
        # Invariant: an entry's weight is the partition's current effective lag, because a
        # list a lag update made stale is re-sorted with current lag before use. A stale
        # list stays stale: it is searched, not sorted (most are never read before the
        # next lag reading makes them stale again).
        entries = m.by_lag
        if m.stale:
            del entries[list(map(pid_of, entries)).index(pid)]
        else:
            entry = weight << LAG_SHIFT | pid
            i = bisect.bisect_left(entries, entry)
            assert entries[i] == entry
            del entries[i]
        m.lag -= weight
        self._total_lag -= weight
        if m.listed is not None:
            self._relist(m.listed, (pid,), ())
        t = pid >> PART_BITS
        held = m.held
        if held is not None:
            left = held[t] - 1
            if left:
                held[t] = left
            else:
                del held[t]

    def _insert_part(self, m: _Member, pid: int, weight: int) -> None:
        if m.stale:
            m.by_lag.append(weight << LAG_SHIFT | pid)
        else:
            bisect.insort(m.by_lag, weight << LAG_SHIFT | pid)
        m.lag += weight
        self._total_lag += weight
        if m.listed is not None:
            self._relist(m.listed, (), (pid,))
        t = pid >> PART_BITS
        held = m.held
        if held is not None:
            held[t] = held.get(t, 0) + 1

    def _detach(self, m: _Member) -> None:
        self._load.remove(m.key())
        self._by_lag.remove((m.load(), m.name))

    def _attach(self, m: _Member) -> None:
        key = m.key()
        self._load.add(key)
        self._by_lag.add((m.load(), m.name))
        taker = m.take_key()
        for g in self._groups_of(m):
            heap = self._gheap.get(g)
            if heap is not None:
                heapq.heappush(heap, taker)
                if len(heap) > self._glimit[g]:
                    del self._gheap[g]  # mostly stale entries: rebuild on next need
        if self._hheap is not None:
            entry = (-key[0], -key[1], key[2])
            held = m.holding()
            for t in held:
                heapq.heappush(self._hheap.setdefault(t, []), entry)
            self._hheap_size += len(held)
            if self._hheap_size > 8 * len(self._owner) + 1024:
                self._hheap = None  # mostly stale entries: rebuild on next need

    def _refine(self, topics: frozenset[int]) -> None:
        """Split topic groups so that every member subscribes to all or none of each."""
        new = [t for t in sorted(topics) if t not in self._tgroup]
        if new:
            self._add_group(set(new), None)
        for g in sorted({self._tgroup[t] for t in topics}):
            inside = self._gtopics[g] & topics
            if inside != self._gtopics[g]:
                self._gtopics[g] -= inside
                self._add_group(inside, g)

    def _add_group(self, topics: set[int], parent: int | None) -> None:
        gid = len(self._gtopics)
        while gid in self._gtopics:
            gid += 1
        self._gtopics[gid] = topics
        for t in topics:
            self._tgroup[t] = gid
        if parent is not None and parent in self._gheap:
            # The split-off part has the same subscribers so far: share the heap's content.
            self._gheap[gid] = list(self._gheap[parent])
            self._glimit[gid] = self._glimit[parent]
        self._gversion += 1

    def _add_subscriber(self, topic: int, name: str) -> None:
        subs = self._subs.setdefault(topic, set())
        if not subs:
            self._orphans.update(self._topic_pids(topic))
        subs.add(name)

    def _min_subscriber(self, topic: int) -> Key | None:
        g = self._tgroup.get(topic)
        return None if g is None else self._min_in_group(g)

    def _min_in_group(self, g: int) -> Key | None:
        """The least-loaded subscriber of topic group ``g`` (all of its topics alike)."""
        heap = self._gheap.get(g)
        if heap is None:
            self._build_heaps()
            heap = self._gheap[g]
        members = self._members
        while heap:
            key = heap[0]
            m = members.get(key[2])
            if m is not None and m.take_key() == key and g in self._groups_of(m):
                return key
            heapq.heappop(heap)
        return None

    def _tids(self, topics: AbstractSet[str]) -> frozenset[int]:
        index = self._ids.index
        if index.keys() >= topics:
            return frozenset(map(index.__getitem__, topics))
        return frozenset(map(self._ids.add, topics))

    def _pcount(self, topic: int) -> int:
        return self._ppt.get(self._ids.names[topic], 0)

    def _build_heaps(self) -> None:
        """Build every missing topic-group heap in one pass over the members: a member's
        key is made once, not once per group it belongs to."""
        heaps: dict[int, list[Key]] = {g: [] for g in self._gtopics if g not in self._gheap}
        for m in self._members.values():
            key = m.take_key()
            for g in self._groups_of(m):
                if g in heaps:
                    heaps[g].append(key)
        for g, heap in heaps.items():
            heapq.heapify(heap)
            self._gheap[g] = heap
            self._glimit[g] = 4 * len(heap) + 64

    def _groups_of(self, m: _Member) -> tuple[int, ...]:
        if m.groups_version != self._gversion:
            # Members with one subscription share one answer (and usually one tids object).
            if self._groups_cache_version != self._gversion:
                self._groups_cache.clear()
                self._groups_cache_version = self._gversion
            groups = self._groups_cache.get(m.tids)
            if groups is None:
                groups = self._groups_cache[m.tids] = tuple({self._tgroup[t] for t in m.tids})
            m.groups = groups
            m.groups_version = self._gversion
        return m.groups

    def _topic_pids(self, topic: int) -> range:
        name = self._ids.names[topic]
        return self._ids.span(name, self._ppt.get(name, 0))

    def _lists(self, ms: list[_Member]) -> list[list[TopicPartition]]:
        """Each member's sorted partition list (the caller's to keep). With shared
        partitions (``intern_partitions``) each member's list is kept in step move by
        move once made (``_Member.listed``), so a member that changes again is listed by a
        copy; without, nothing is kept (the caller chose not to keep every partition
        alive: a million of them would be a million objects for the collector to walk)."""
        if self._ids.interned is None:
            return self._made(ms)
        fresh = [m for m in ms if m.listed is None]
        for m, listed in zip(fresh, self._made(fresh), strict=True):
            m.listed = listed
        return [m.listed.copy() for m in ms]  # type: ignore[union-attr]

    def _made(self, ms: list[_Member]) -> list[list[TopicPartition]]:
        """Each member's sorted partition list from its ``by_lag``, in array passes."""
        if not ms:
            return []
        counts = [m.count for m in ms]
        entries = chain.from_iterable(m.by_lag for m in ms)
        pids = np.fromiter(map(pid_of, entries), np.int64, sum(counts))
        member_of = np.repeat(np.arange(len(ms), dtype=np.int64), counts)
        return self._ids.tps_runs(sort_runs(pids, member_of), counts)

    def _diff(self, count_lag_moves: bool) -> Change:
        # A member's list changed iff a partition it held, or holds now, changed hands
        # and did not come back. A joiner gets a record even when empty, so it knows it
        # was seen.
        differ: set[str | None] = set(self._joined)
        owner, members = self._owner, self._members
        moved = 0
        lag_moved = 0
        rack_moved = 0
        vanished = self._vanished_from
        gained: dict[str | None, list[int]] = defaultdict(list)
        lost: dict[str | None, list[int]] = defaultdict(list)
        for pid, old in self._before_owner.items():
            now = owner.get(pid)
            held = vanished.get(pid) if old is None else old
            if now == held:
                continue
            differ.add(now)
            differ.add(held)
            gained[now].append(pid)
            lost[held].append(pid)
            if old is None or now is None:
                continue
            m = members.get(old)
            if m is not None and pid >> PART_BITS in m.tids:
                moved += 1
                if pid in self._lag_moved:
                    lag_moved += 1
                elif pid in self._rack_moved:
                    rack_moved += 1
        names = sorted(members.keys() & differ)
        changed = dict(zip(names, self._lists([members[n] for n in names]), strict=True))
        tps = self._ids.tps
        return Change(
            assignments=changed,
            removed=frozenset(self._removed - set(self._members)),
            moved=moved,
            moved_for_lag=lag_moved if count_lag_moves else 0,
            lag_trigger=self._trigger if lag_moved and count_lag_moves else None,
            moved_for_rack=rack_moved,
            deltas={
                n: Delta(frozenset(tps(gained.get(n, ()))), frozenset(tps(lost.get(n, ()))))
                for n in names
            },
        )


@dataclass(slots=True)
class _Start:
    """The starting point of a snapshot: kept claims, or a fresh bulk placement."""

    spec: GroupSpec
    ids: TopicIds
    #: The validated lag map: pids and values in its order.
    readings: tuple[list[int], list[int]]
    lag_aware: bool
    claims: Claims
    uniform: bool
    #: Validated racks, when any member declares one.
    racks: Racks | None = None
    #: Every member's capacity, when they are not all equal.
    capacities: dict[str, float] | None = None
    #: Without ``capacities``, the capacity every member declared (not always 1).
    common_capacity: float = 1.0
    constraints: Constraints = NONE
    #: Readings of partitions that do not exist yet (``TopicIds.existing``).
    ahead: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(  # noqa: PLR0917 -- from_snapshot's arguments, in its order
        cls,
        partitions_per_topic: PartitionsPerTopic,
        subscriptions: Subscriptions,
        current: CurrentAssignment | None,
        lag: LagMap | None,
        lag_aware: bool,
        member_racks: MemberRacks | None = None,
        partition_racks: PartitionRacks | None = None,
        member_capacities: MemberCapacities | None = None,
        constraints: Constraints = NONE,
        *,
        strict: bool = False,
    ) -> _Start:
        check_mappings(
            partitions_per_topic=partitions_per_topic,
            subscriptions=subscriptions,
            current=current,
            lag=lag,
            member_racks=member_racks,
            partition_racks=partition_racks,
            member_capacities=member_capacities,
        )
        spec = build_spec(partitions_per_topic, subscriptions)
        if strict:
            check_against(spec, constraints)
        racks = None
        if member_racks is not None or partition_racks is not None:
            racks = build_racks(spec, member_racks, partition_racks, keep_replicas=not strict)
        ids = TopicIds.for_spec(spec)
        readings: tuple[list[int], list[int]] = ([], [])
        ahead: dict[int, int] = {}
        if lag_aware:
            pids, values, _, ahead = ids.existing(
                spec.partitions_per_topic, *ids.lag(lag, register=False)
            )
            readings = (pids, values)
        elif lag:  # validated all the same: a bad lag map is a caller bug either way
            check_lag(lag)
        claims = ids.claims(spec, current)
        capacities = build_capacities(spec, member_capacities)
        common = 1.0 if capacities else common_capacity(spec, member_capacities)
        return cls(
            spec,
            ids,
            readings,
            lag_aware,
            claims,
            spec.is_uniform(),
            racks,
            capacities,
            common,
            constraints,
            ahead,
        )

    @property
    def fresh(self) -> bool:
        return not self.claims

    @property
    def racked(self) -> bool:
        """Racks can change the result (Kafka's rule): the engine must place."""
        return self.racks is not None and self.racks.useful()

    @property
    def loaded_capacities(self) -> dict[str, float] | None:
        """What the engine holds: equal capacities other than 1 change no placement, but
        the engine keeps them for the members that join later."""
        if self.capacities is None and self.common_capacity != 1:
            return dict.fromkeys(self.spec.members, self.common_capacity)
        return self.capacities

    @property
    def weighted(self) -> bool:
        """Lag can change the result."""
        return self.lag_aware and any(self.readings[1])

    @property
    def free(self) -> bool:
        """Every member may take every partition, and any count: the plain deal's case."""
        return self.uniform and self.capacities is None and not self.constraints

    @property
    def final(self) -> bool:
        """A fresh uniform deal is count-balanced by construction; without lag (and
        capacities or constraints, which the plain deal ignores) it is done."""
        return self.fresh and self.free and not self.weighted

    @property
    def levelable(self) -> bool:
        """Mixed subscriptions and nothing but counts to balance: ``level_place`` places
        and balances the group in array passes (placing and repairing partition by
        partition took 1.2 s at 10 000 members over 100 topics)."""
        return (
            not self.uniform
            and not self.weighted
            and self.capacities is None
            and not self.constraints
        )

    def leveled(self) -> tuple[NDArray[np.int64], NDArray[np.int64], bool]:
        """``level_place``'s result, from the claims when there are any, as the member
        index of each place in ``every()``; the same before it (-1: unowned); and
        whether it is balanced."""
        spec, ids, claims = self.spec, self.ids, self.claims
        n = len(spec.members)
        sizes = [spec.partitions_per_topic[t] for t in spec.topics]
        offsets = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
        kept = np.full(int(offsets[-1]), -1, dtype=np.int64)
        if claims:
            start = np.zeros(len(ids.names), dtype=np.int64)
            start[[ids.index[t] for t in spec.topics]] = offsets[:-1]
            position = {m: i for i, m in enumerate(spec.members)}
            holder = np.fromiter(map(position.__getitem__, claims.members), np.int64)
            pids = claims.pids
            kept[start[pids >> PART_BITS] + (pids & PART_MASK)] = np.repeat(
                holder, np.diff(claims.ends, prepend=0)
            )
        owner, balanced = level_place(subscriber_indexes(spec), offsets, n, kept)
        return owner, kept, balanced

    def leveled_result(self) -> Assignment | None:
        """The final result when ``levelable`` and the leveling balanced the group; with
        claims, only the members whose partitions changed get new lists."""
        owner, kept, balanced = self.leveled()
        if not balanced:
            return None
        members = self.spec.members
        places, ends = grouped(owner, len(members))
        if not self.claims:
            every = np.empty(len(places), object)  # of tuples, not a 2-D array of fields
            every[:] = self.partitions()
            return dict(zip(members, runs(every[places], ends), strict=True))
        moved = np.flatnonzero(owner != kept)
        touched = np.union1d(owner[moved], kept[moved][kept[moved] >= 0]).tolist()
        pids = self.every()[places]
        starts = np.concatenate(([0], ends[:-1]))
        return self._kept_but({members[i]: pids[starts[i] : ends[i]].tolist() for i in touched})

    def partitions(self) -> list[TopicPartition]:
        """Every subscribed partition, topic after topic (the order of ``every()``)."""
        return list(chain.from_iterable(map(self.spec.partitions, self.spec.topics)))

    def dealt(self) -> Assignment:
        """The final result when ``final``: a plain deal of every partition."""
        return deal_uniform(list(self.spec.members), self.partitions(), None)

    def dealt_by_rack(self) -> Assignment:
        """The final result when ``final`` and ``racked``: the rack deal, no engine."""
        dealt, _ = self.rack_dealt()
        parts = self.partitions()
        every = np.empty(len(parts), object)  # of tuples, not a 2-D array of their fields
        every[:] = parts
        return {m: every[places].tolist() for m, places in dealt.items()}

    def kept_uniform(self) -> Assignment:
        """The result when every member can take every partition and lag cannot matter:
        the claims rebalanced with the least movement, no engine needed."""
        spec, ids, claims = self.spec, self.ids, self.claims
        counts = spec.partitions_per_topic
        unowned = np.empty(0, dtype=np.int64)
        if len(claims.pids) < sum(counts[t] for t in spec.topics):
            every = np.concatenate(
                [
                    np.arange(ids.base[t], ids.base[t] + counts[t], dtype=np.int64)
                    for t in spec.topics
                ]
            )
            owned = np.zeros(sum(counts.values()), dtype=bool)
            owned[ids.dense(counts, claims.pids)] = True
            unowned = every[~owned[ids.dense(counts, every)]]
        return self._kept_but(keep_uniform(spec.members, claims, unowned))

    def _kept_but(self, changed: Mapping[str, list[int]]) -> Assignment:
        """Every member's claim, but ``changed``: the caller's own partition objects are
        handed back where a claim was kept whole."""
        ids, claims = self.ids, self.claims
        out: dict[str, list[TopicPartition] | None] = dict.fromkeys(self.spec.members)
        out.update(claims.given)
        out.update(zip(changed, map(ids.tps, changed.values()), strict=True))
        if None in out.values():
            kept = claims.by_member()
            for m, now in out.items():
                if now is None:
                    out[m] = ids.tps(kept.get(m, []))
        return out  # type: ignore[return-value]

    def initial(
        self,
    ) -> tuple[dict[str, list[int]], dict[str, tuple[list[int], int]] | None, bool]:
        """Each member's starting pids; when a lag-ordered deal made them, its ``by_lag``
        entries and total lag (so the build need not look lag up again); and whether
        they are count-balanced already (no repair to run)."""
        spec = self.spec
        if self.claims:
            return self.claims.by_member(), None, False
        if self.levelable:
            owner, _, balanced = self.leveled()
            places, ends = grouped(owner, len(spec.members))
            placed = dict(zip(spec.members, runs(self.every()[places], ends), strict=True))
            return placed, None, balanced
        return *self._placed(), self.uniform and not self.constraints

    def _lag_map(self) -> dict[int, int] | None:
        """The readings as a dict, for the placements that look partitions up one by one
        (a million readings take ~0.4 s to put in a dict: only those paths pay it)."""
        return dict(zip(*self.readings, strict=True)) if self.lag_aware else None

    def _placed(self) -> tuple[dict[str, list[int]], dict[str, tuple[list[int], int]] | None]:
        """A fresh placement but the leveled one."""
        spec, ids = self.spec, self.ids
        counts = spec.partitions_per_topic
        if self.capacities is not None:
            if not self.uniform:  # each partition placed by the engine's own rule
                return {}, None
            every = list(chain.from_iterable(ids.span(t, counts[t]) for t in spec.topics))
            return deal_by_capacity(spec.members, self.capacities, every, self._lag_map()), None
        if not self.uniform:
            placed = greedy_place_of(spec, lambda t: ids.span(t, counts[t]), self._lag_map())
            return placed, None
        members = list(spec.members)
        every = list(chain.from_iterable(ids.span(t, counts[t]) for t in spec.topics))
        pids, values = self.readings
        if not (self.lag_aware and pids):
            return deal_uniform(members, every), None
        weights = values if pids == every else LagTable.of(pids, values).many(every)
        weight = weight_array(weights)
        order = heaviest_first_array(weight)
        if order is None:
            return deal_uniform(members, every), None
        # The snake deal of deal_uniform on arrays: a million partitions without a
        # million Python-level lookups.
        heavy = weight[order]
        ordered = np.asarray(every, dtype=np.int64)[order]
        dealt: dict[str, list[int]] = {}
        weighed: dict[str, tuple[list[int], int]] = {}
        for i, m in enumerate(members):
            a, b = snake_places(i, len(members))
            mine = ordered[a].tolist() + ordered[b].tolist()
            lags = heavy[a].tolist() + heavy[b].tolist()
            dealt[m] = mine
            entries = sorted(map(or_, map(lshift, lags, repeat(LAG_SHIFT)), mine))
            weighed[m] = (entries, sum(lags))
        return dealt, weighed

    def every(self) -> NDArray[np.int64]:
        """The pids of every subscribed partition, topic after topic."""
        ids, counts = self.ids, self.spec.partitions_per_topic
        spans = [np.arange(ids.base[t], ids.base[t] + counts[t]) for t in self.spec.topics]
        return np.concatenate([np.empty(0, dtype=np.int64), *spans])

    def rack_dealt(self) -> tuple[dict[str, NDArray[np.int64]], NDArray[np.int64]]:
        """``dealt`` for a racked group (``rack_deal.py``), as places in ``every()``: per
        member, ascending, and those placed off their replicas' racks (as few as the
        counts allow). Only without lag: lagsticky's lag moves are not rack aware, so
        there a rack-blind deal and swaps within the lag target stay the rule."""
        assert self.racks is not None
        layout, layouts = self.layouts(self.every())
        return deal_by_rack(list(self.spec.members), self.racks.member, layout, layouts)

    def layouts(self, pids: NDArray[np.int64]) -> tuple[NDArray[np.int64], list[frozenset[str]]]:
        """The replica layout of each of ``pids`` (an index into the list returned with
        it; -1: no rack known), looked up once per partition at C level."""
        ids, counts, racks = self.ids, self.spec.partitions_per_topic, self.racks
        assert racks is not None
        part = racks.partition
        layouts = list(dict.fromkeys(part.values()))
        index = {named: i for i, named in enumerate(layouts)}
        by_dense = np.full(sum(counts.values()), -1, dtype=np.int64)
        by_dense[ids.dense(counts, np.asarray(ids.pids_of(part), dtype=np.int64))] = list(
            map(index.__getitem__, part.values())
        )
        return by_dense[ids.dense(counts, pids)], layouts

    def misplaced(self, owner: Mapping[int, str]) -> list[int]:
        """The pids of ``owner`` held off their replicas' racks, in array passes: a
        snapshot of a hundred thousand partitions is not checked one by one."""
        racks = self.racks
        assert racks is not None
        if not racks.member:
            return []
        pids = np.fromiter(owner, np.int64, len(owner))
        layout, layouts = self.layouts(pids)
        names = {rack: i for i, rack in enumerate(sorted(set(racks.member.values())))}
        rack_of = {m: names[r] for m, r in racks.member.items()}
        held_on = np.fromiter(map(rack_of.get, owner.values(), repeat(-1)), np.int64, len(owner))
        # local[layout, rack]; the last row stands for "no rack known" (layout -1).
        local = np.zeros((len(layouts) + 1, len(names)), dtype=bool)
        for i, named in enumerate(layouts):
            local[i, [names[r] for r in named if r in names]] = True
        off = (held_on >= 0) & ~local[layout, np.maximum(held_on, 0)]
        found: list[int] = pids[off].tolist()
        return found

    def engine(self, policy: LagPolicy) -> tuple[IncrementalAssignor, Change]:
        spec = self.spec
        eng = IncrementalAssignor(
            spec.partitions_per_topic, lag_aware=self.lag_aware, policy=policy
        )
        eng._ids = self.ids
        eng._plag = LagTable.of(*self.readings)
        eng._ahead = self.ahead
        if self.racks is not None and self.racked and self.final:
            dealt, misplaced = self.rack_dealt()
            every = self.every()
            initial = {m: every[places].tolist() for m, places in dealt.items()}
            eng._bulk_load(spec.members, spec.topics_of, initial, capacities=self.loaded_capacities)
            eng._adopt_racks(self.racks, every[misplaced].tolist(), align=False)
            balanced = True
        else:
            placed, weighed, balanced = self.initial()
            eng._bulk_load(
                spec.members, spec.topics_of, placed, weighed, capacities=self.loaded_capacities
            )
            if self.racks is not None:
                eng._adopt_racks(self.racks, self.misplaced(eng._owner), align=True)
                # A swap keeps counts, but with mixed subscriptions may hand a topic to a
                # member above one of its subscribers: the repair looks again.
                balanced = balanced and self.uniform
        if self.constraints:
            eng._constrain(self.constraints)
        budget = 4 * len(spec.members) + 64 if self.fresh else policy.max_moves
        work = () if balanced else eng._violators()
        change = eng._settle(work, lag_budget=budget, count_lag_moves=not self.fresh)
        return eng, change


def _unweighted_indexes(members: Mapping[str, _Member]) -> tuple[SortedList, SortedList] | None:
    """``_load`` and ``_by_lag`` of members of capacity 1 without caps, ordered by NumPy:
    sorting 10 000 key tuples in Python compares them item by item (~12 ms); ordering
    two int arrays stably over the names in order takes ~3 ms, and the lists are then
    built from keys already in order (one linear pass of comparisons). None when a
    member's lag passes 64 bits: the tuples' own order decides then."""
    names = sorted(members)
    ordered = list(map(members.__getitem__, names))
    n = len(ordered)
    counts = np.fromiter(map(len, map(_by_lag_of, ordered)), np.int64, n)
    try:
        lags = np.fromiter(map(_lag_of, ordered), np.int64, n)
    except OverflowError:
        return None
    # Stable orders over names in order: ties on the ints fall back to the name, as in
    # the tuples' own order.
    by_load = np.lexsort((lags, counts))
    by_lag = np.argsort(lags, kind="stable")
    pick = names.__getitem__
    load = zip(
        (2 * counts[by_load] - 1).tolist(),
        lags[by_load].tolist(),
        map(pick, by_load.tolist()),
        strict=True,
    )
    by_lag_keys = zip(lags[by_lag].tolist(), map(pick, by_lag.tolist()), strict=True)
    return SortedList(load), SortedList(by_lag_keys)


def _last_entry_at(lag: int) -> int:
    """The largest possible ``by_lag`` entry with this lag."""
    return lag << LAG_SHIFT | PID_MASK
