"""Incremental lag-aware sticky assignment.

The engine holds one group's assignment with the indexes that make each event cost in
proportion to the partitions it moves, not to the size of the group:

* ``_load``: every member's key ``(count, lag, name)`` in one sorted list; the donor for a
  member that is short of partitions is found from the top.
* ``_gheap``: a lazy min-heap of subscribers' keys per *topic group*, the topics that
  have exactly the same subscribers (one group when subscriptions are identical). The
  receiver for a partition is the top valid entry of its topic's group. Stale entries are
  skipped on read; a heap is rebuilt when stale entries outnumber live ones. Groups are
  refined (split) when a subscription cuts across one, never merged.
* per member, its partitions sorted by lag, so the partition that best evens two members'
  lag is found by bisection.

Priorities: validity > count balance (KIP-54's definition) > lag balance (smallest
largest member lag) > stickiness. After an event, balance is restored by a worklist over
the members whose holdings changed: only pairs involving such a member can newly violate
balance, and every repair move strictly lowers the sum of squared counts, so it ends.
"""

from __future__ import annotations

import bisect
import gc
import heapq
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter

from sortedcontainers import SortedList

from .events import (
    Change,
    Event,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionsChanged,
    SubscriptionChanged,
)
from .placement import deal_uniform, greedy_place
from .policy import DEFAULT_POLICY, LagPolicy
from .spec import GroupSpec, build_spec, normalize_lag, valid_claims
from .types import (
    Assignment,
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
    topic_partitions,
)

Key = tuple[int, int, str]
#: Donor candidates scanned from the top before falling back to per-topic holder heaps.
_DONOR_SCAN = 8
_SWAP_CANDIDATES = 256


@dataclass(slots=True, eq=False)
class _Member:
    name: str
    topics: frozenset[str]
    #: (effective lag, partition), ascending; the member's partitions.
    by_lag: list[tuple[int, TopicPartition]] = field(default_factory=list)
    lag: int = 0
    #: topic -> how many of its partitions this member holds.
    held: dict[str, int] = field(default_factory=dict)
    #: The topic groups this member subscribes to, valid while ``groups_version`` is current.
    groups: tuple[int, ...] = ()
    groups_version: int = -1

    @property
    def count(self) -> int:
        return len(self.by_lag)

    def key(self) -> Key:
        return (len(self.by_lag), self.lag, self.name)

    def partitions(self) -> list[TopicPartition]:
        return sorted(map(itemgetter(1), self.by_lag))


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
        self._members: dict[str, _Member] = {}
        self._owner: dict[TopicPartition, str] = {}
        self._plag: dict[TopicPartition, int] = {}
        self._subs: dict[str, set[str]] = {}
        self._load: SortedList = SortedList()
        self._by_lag: SortedList = SortedList()
        self._tgroup: dict[str, int] = {}
        self._gtopics: dict[int, set[str]] = {}
        self._gheap: dict[int, list[Key]] = {}
        #: A heap longer than this is mostly stale entries and is rebuilt on next need.
        self._glimit: dict[int, int] = {}
        self._gversion = 0
        #: topic -> lazy max-heap (negated count and lag) of members holding its partitions;
        #: built on first need, only groups with mixed subscriptions ever need it.
        self._hheap: dict[str, list[tuple[int, int, str]]] | None = None
        self._hheap_size = 0
        self._total_lag = 0
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
    ) -> tuple[IncrementalAssignor, Change]:
        """Build an engine from a whole group at once and settle it.

        Valid parts of ``current`` are kept; with nothing to keep, a fresh placement is
        computed in bulk (far faster than placing partitions one by one). The returned
        ``Change`` is relative to the kept part of ``current``.
        """
        with _gc_paused():
            start = _Start.of(partitions_per_topic, subscriptions, current, lag, lag_aware)
            return start.engine(policy)

    @staticmethod
    def solve(
        partitions_per_topic: PartitionsPerTopic,
        subscriptions: Subscriptions,
        current: CurrentAssignment | None = None,
        lag: LagMap | None = None,
        *,
        lag_aware: bool = True,
        policy: LagPolicy = DEFAULT_POLICY,
    ) -> Assignment:
        """``from_snapshot(...)[0].assignment()`` without building the indexes when a
        fresh uniform deal is already final (nothing to keep, no lag to even out)."""
        with _gc_paused():
            start = _Start.of(partitions_per_topic, subscriptions, current, lag, lag_aware)
            if start.final:
                return start.initial
            return start.engine(policy)[0].assignment()

    def _bulk_load(
        self,
        members: Iterable[str],
        topics_of: Mapping[str, frozenset[str]],
        initial: Mapping[str, list[TopicPartition]],
    ) -> None:
        """Adopt a whole assignment at once (each list sorted, no partition twice)."""
        plag = self._plag if self.lag_aware else {}
        owner = self._owner
        by_topics: dict[frozenset[str], list[str]] = {}
        for name in members:
            topics = topics_of[name]
            parts = initial.get(name, [])
            if plag:
                by_lag = sorted(zip(map(plag.get, parts, repeat(0)), parts, strict=True))
            else:  # all weights are 0 and ``parts`` is sorted: already in order
                by_lag = list(zip(repeat(0), parts))
            owner.update(zip(parts, repeat(name)))
            held: dict[str, int] = {}
            for t in map(itemgetter(0), parts):
                held[t] = held.get(t, 0) + 1
            m = _Member(name, topics, by_lag, sum(map(itemgetter(0), by_lag)), held)
            self._total_lag += m.lag
            self._members[name] = m
            by_topics.setdefault(topics, []).append(name)
        for topics, names in by_topics.items():
            for t in topics:
                self._subs.setdefault(t, set()).update(names)
        # Topic groups in one pass: topics with the same subscribers share a group.
        by_subscribers: dict[frozenset[str], set[str]] = {}
        for t, subs in sorted(self._subs.items()):
            by_subscribers.setdefault(frozenset(subs), set()).add(t)
        for topics_in_group in by_subscribers.values():
            self._add_group(topics_in_group, None)
        self._load = SortedList(m.key() for m in self._members.values())
        self._by_lag = SortedList((m.lag, m.name) for m in self._members.values())
        coverable = sum(self._ppt.get(t, 0) for t, subs in self._subs.items() if subs)
        if len(owner) < coverable:
            for t, subs in self._subs.items():
                if subs:
                    self._orphans.update(tp for tp in self._topic_partitions(t) if tp not in owner)

    # ------------------------------------------------------------------ public API

    def apply(self, events: Iterable[Event]) -> Change:
        """Apply coalesced events, then restore balance once and return only what changed."""
        lag_only = True
        for event in events:
            if isinstance(event, MemberJoined):
                self._join(event.member, frozenset(event.topics))
            elif isinstance(event, MemberLeft):
                self._leave(event.member)
            elif isinstance(event, SubscriptionChanged):
                self._resubscribe(event.member, frozenset(event.topics))
            elif isinstance(event, PartitionsChanged):
                self._repartition(event.topic, event.count)
            elif isinstance(event, LagUpdated):
                self._update_lag(event.lag)
                continue
            else:  # pragma: no cover - the union above is exhaustive
                raise TypeError(f"unknown event {event!r}")
            lag_only = False
        work = sorted(self._touched)
        return self._settle(
            work, lag_budget=self.policy.max_moves, count_lag_moves=True, lag_only=lag_only
        )

    def assignment(self) -> Assignment:
        return {name: m.partitions() for name, m in sorted(self._members.items())}

    def partitions_of(self, member: str) -> list[TopicPartition]:
        return self._members[member].partitions()

    def owner_of(self, tp: TopicPartition) -> str | None:
        return self._owner.get(tp)

    @property
    def members(self) -> dict[str, frozenset[str]]:
        return {name: m.topics for name, m in sorted(self._members.items())}

    @property
    def partitions_per_topic(self) -> dict[str, int]:
        return dict(self._ppt)

    def member_lag(self) -> dict[str, int]:
        return {name: m.lag for name, m in sorted(self._members.items())}

    def lag(self) -> dict[TopicPartition, int]:
        return dict(self._plag)

    # ------------------------------------------------------------------ event handlers

    def _join(self, name: str, topics: frozenset[str]) -> None:
        if name in self._members:
            self._resubscribe(name, topics)
            return
        self._removed.discard(name)
        self._joined.add(name)
        m = _Member(name, topics)
        self._members[name] = m
        self._record_member(m)
        self._refine(topics)
        self._attach(m)
        for t in topics:
            self._add_subscriber(t, name)
        self._touched.add(name)

    def _leave(self, name: str) -> None:
        m = self._members.get(name)
        if m is None:
            return
        self._record_member(m)
        for _, tp in list(m.by_lag):
            self._move(tp, None)
            self._orphans.add(tp)
        self._detach(m)
        for t in m.topics:
            self._subs[t].discard(name)
        del self._members[name]
        self._removed.add(name)
        self._touched.discard(name)

    def _resubscribe(self, name: str, topics: frozenset[str]) -> None:
        m = self._members.get(name)
        if m is None:
            self._join(name, topics)
            return
        if topics == m.topics:
            return
        self._record_member(m)
        for _, tp in [e for e in m.by_lag if e[1].topic not in topics]:
            self._move(tp, None)
            self._orphans.add(tp)
        old = m.topics
        self._detach(m)
        for t in old - topics:
            self._subs[t].discard(name)
        m.topics = topics
        m.groups_version = -1
        self._refine(topics)
        self._attach(m)
        for t in sorted(topics - old):
            self._add_subscriber(t, name)
        self._touched.add(name)

    def _repartition(self, topic: str, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(
                f"PartitionsChanged({topic!r}): count must be an int >= 0, got {count!r}"
            )
        old = self._ppt.get(topic, 0)
        self._ppt[topic] = count
        for p in range(count, old):
            tp = TopicPartition(topic, p)
            self._orphans.discard(tp)
            if tp in self._owner:
                self._touched.add(self._owner[tp])
                self._move(tp, None, vanished=True)
            self._plag.pop(tp, None)
        if self._subs.get(topic):
            self._orphans.update(TopicPartition(topic, p) for p in range(old, count))

    def _update_lag(self, lag: Mapping[TopicPartition, int]) -> None:
        changed: dict[str, list[TopicPartition]] = {}
        fresh = normalize_lag(lag)
        for tp, value in fresh.items():
            if self._plag.get(tp, 0) == value:
                continue
            owner = self._owner.get(tp)
            if owner is not None and self.lag_aware:
                changed.setdefault(owner, []).append(tp)
            else:
                self._plag[tp] = value
        for name, tps in changed.items():
            m = self._members[name]
            self._detach(m)
            for tp in tps:
                self._remove_part(m, tp)
                self._plag[tp] = fresh[tp]
                self._insert_part(m, tp, fresh[tp])
            self._attach(m)

    # ------------------------------------------------------------------ settling

    def _begin(self) -> None:
        self._before_parts: dict[str, frozenset[TopicPartition]] = {}
        self._before_owner: dict[TopicPartition, str | None] = {}
        self._touched: set[str] = set()
        self._orphans: set[TopicPartition] = set()
        self._removed: set[str] = set()
        self._joined: set[str] = set()
        self._lag_moved: set[TopicPartition] = set()

    def _settle(
        self,
        work: Iterable[str],
        *,
        lag_budget: int,
        count_lag_moves: bool,
        lag_only: bool = False,
    ) -> Change:
        if not lag_only:
            touched = self._place_orphans()
            self._repair([*work, *touched])
        if self.lag_aware:
            self._rebalance_lag(lag_budget, eager=not count_lag_moves)
        change = self._diff(count_lag_moves)
        self._begin()
        return change

    def _place_orphans(self) -> list[str]:
        """Give each unowned partition of a subscribed topic to its least-loaded subscriber,
        heaviest first (longest-processing-time order evens lag)."""
        plag = self._plag if self.lag_aware else {}
        orphans = [
            tp
            for tp in self._orphans
            if tp not in self._owner
            and tp.partition < self._ppt.get(tp.topic, 0)
            and self._subs.get(tp.topic)
        ]
        orphans.sort(key=lambda tp: (-plag.get(tp, 0), tp))
        receivers: list[str] = []
        for tp in orphans:
            key = self._min_subscriber(tp.topic)
            if key is None:
                continue
            self._move(tp, key[2])
            receivers.append(key[2])
        self._orphans.clear()
        return receivers

    def _repair(self, work: Iterable[str]) -> None:
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
            tp = self._pick(donor, receiver, (donor.lag - receiver.lag) / 2)
            assert tp is not None, "a donor always holds a partition its receiver may take"
            self._move(tp, receiver.name)
            for n in (name, donor.name, receiver.name):
                if n not in queued:
                    queued.add(n)
                    stack.append(n)

    def _violators(self) -> list[str]:
        """Members on either side of a KIP-54 violation: the repair worklist after a bulk
        load (any violation found later involves a member the repair itself changed)."""
        least: dict[str, tuple[int, str]] = {}
        for t, subs in self._subs.items():
            if subs:
                least[t] = min((self._members[n].count, n) for n in subs)
        out: set[str] = set()
        for m in self._members.values():
            for t in m.held:
                low = least.get(t)
                if low is not None and m.count >= low[0] + 2:
                    out.add(m.name)
                    out.add(low[1])
        return sorted(out)

    def _find_donor(self, b: _Member) -> _Member | None:
        """The fullest member with 2+ more partitions than ``b`` holding one ``b`` may take.

        The fullest few members are tried first (with identical subscriptions the first
        always qualifies); past them, per-topic heaps of holders answer directly.
        """
        need = b.count + 2
        if not self._load or self._load[-1][0] < need:
            return None
        for i, (count, _lag, name) in enumerate(reversed(self._load)):
            if count < need:
                return None
            a = self._members[name]
            if any(t in b.topics for t in a.held):
                return a
            if i >= _DONOR_SCAN:
                break
        best: tuple[int, int, str] | None = None
        for t in b.topics:
            top = self._max_holder(t)
            if top is not None and -top[0] >= need and (best is None or top < best):
                best = top
        return None if best is None else self._members[best[2]]

    def _max_holder(self, topic: str) -> tuple[int, int, str] | None:
        if self._hheap is None:
            heaps: dict[str, list[tuple[int, int, str]]] = {}
            for member in self._members.values():
                for t in member.held:
                    heaps.setdefault(t, []).append((-member.count, -member.lag, member.name))
            for built in heaps.values():
                heapq.heapify(built)
            self._hheap = heaps
            self._hheap_size = sum(map(len, heaps.values()))
        heap = self._hheap.get(topic)
        while heap:
            c, lag, name = heap[0]
            m = self._members.get(name)
            if m is not None and m.held.get(topic) and m.count == -c and m.lag == -lag:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _receiver_for(self, a: _Member) -> _Member | None:
        """A member with 2+ fewer partitions than ``a`` that could take one of ``a``'s."""
        limit = a.count - 2
        if limit < 0 or not self._load or self._load[0][0] > limit:
            return None
        best: Key | None = None
        for t in a.held:
            key = self._min_subscriber(t)
            if key is not None and key[0] <= limit and (best is None or key < best):
                best = key
        return None if best is None else self._members[best[2]]

    def _pick(self, a: _Member, b: _Member, target: float) -> TopicPartition | None:
        """A partition of ``a`` that ``b`` may take with lag closest to ``target``
        (ties: the one at or below it, so a move never overshoots)."""
        entries = a.by_lag
        i = bisect.bisect_right(entries, (target, _MAX_TP))
        lo, hi = i - 1, i
        while lo >= 0 or hi < len(entries):
            take_lo = hi >= len(entries) or (
                lo >= 0 and target - entries[lo][0] <= entries[hi][0] - target
            )
            if take_lo:
                tp = entries[lo][1]
                lo -= 1
            else:
                tp = entries[hi][1]
                hi += 1
            if tp.topic in b.topics:
                return tp
        return None

    # ------------------------------------------------------------------ lag balance

    def _rebalance_lag(self, budget: int, *, eager: bool) -> None:
        """Lower the largest member lag by moves and swaps that keep count balance.

        Hysteresis: start only above ``trigger_ratio`` x the lower bound, then continue to
        ``target_ratio``. A fresh placement (``eager``) moves nothing that was owned, so it
        searches on until no step improves.
        """
        policy = self.policy
        if budget <= 0 or len(self._members) < 2:
            return
        spent = 0
        first = not eager
        while spent < budget:
            top_lag, top_name = self._by_lag[-1]
            a = self._members[top_name]
            bound = max(self._total_lag / len(self._members), a.by_lag[-1][0] if a.by_lag else 0)
            ratio = 1.0 if eager else policy.trigger_ratio if first else policy.target_ratio
            if top_lag <= max(policy.min_lag, ratio * bound):
                return
            first = False
            step = self._best_lag_step(a, budget - spent)
            if step is None:
                return
            cost = self._apply_lag_step(a, step)
            if cost == 0:
                return
            spent += cost

    def _best_lag_step(
        self, a: _Member, allowance: int
    ) -> tuple[int, _Member, TopicPartition, TopicPartition | None] | None:
        best: tuple[int, _Member, TopicPartition, TopicPartition | None] | None = None
        tried = 0
        for b_lag, b_name in self._by_lag:
            if tried >= self.policy.candidates or b_lag >= a.lag:
                break
            b = self._members[b_name]
            if b is a:
                continue
            tried += 1
            gap = a.lag - b.lag
            if b.count == a.count - 1:
                tp = self._pick(a, b, gap / 2)
                if tp is not None:
                    w = self._plag.get(tp, 0)
                    peak = max(a.lag - w, b.lag + w)
                    if best is None or peak < best[0]:
                        best = (peak, b, tp, None)
            if allowance >= 2:
                swap = self._best_swap(a, b)
                if swap is not None and (best is None or swap[0] < best[0]):
                    best = (swap[0], b, swap[1], swap[2])
        if best is None or best[0] >= a.lag:
            return None
        return best

    def _best_swap(
        self, a: _Member, b: _Member
    ) -> tuple[int, TopicPartition, TopicPartition] | None:
        """The exchange p (of a) <-> q (of b) with lag(p) - lag(q) nearest half the gap."""
        gap = a.lag - b.lag
        half = gap / 2
        b_entries = b.by_lag
        if not b_entries:
            return None
        best: tuple[int, TopicPartition, TopicPartition] | None = None
        for w_p, p in a.by_lag[-_SWAP_CANDIDATES:]:
            if p.topic not in b.topics:
                continue
            j = bisect.bisect_left(b_entries, (w_p - half,))
            for k in (j - 1, j):
                if 0 <= k < len(b_entries):
                    w_q, q = b_entries[k]
                    d = w_p - w_q
                    if 0 < d < gap and q.topic in a.topics:
                        peak = max(a.lag - d, b.lag + d)
                        if best is None or peak < best[0]:
                            best = (peak, p, q)
        return best

    def _apply_lag_step(
        self, a: _Member, step: tuple[int, _Member, TopicPartition, TopicPartition | None]
    ) -> int:
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

    # ------------------------------------------------------------------ primitives

    def _move(self, tp: TopicPartition, to: str | None, *, vanished: bool = False) -> None:
        """Reassign one partition, keeping every index and the change record in step."""
        frm = self._owner.get(tp)
        if frm == to:
            return
        if tp not in self._before_owner:
            self._before_owner[tp] = None if vanished else frm
        weight = self._plag.get(tp, 0) if self.lag_aware else 0
        if frm is not None:
            a = self._members[frm]
            self._record_member(a)
            self._detach(a)
            self._remove_part(a, tp)
            self._attach(a)
            del self._owner[tp]
        if to is not None:
            b = self._members[to]
            self._record_member(b)
            self._detach(b)
            self._insert_part(b, tp, weight)
            self._attach(b)
            self._owner[tp] = to

    def _remove_part(self, m: _Member, tp: TopicPartition) -> None:
        # Invariant: an entry's weight is the partition's current effective lag, because
        # lag updates re-insert entries (see _update_lag).
        weight = self._plag.get(tp, 0) if self.lag_aware else 0
        entries = m.by_lag
        i = bisect.bisect_left(entries, (weight, tp))
        assert entries[i][1] == tp
        del entries[i]
        m.lag -= weight
        self._total_lag -= weight
        left = m.held[tp.topic] - 1
        if left:
            m.held[tp.topic] = left
        else:
            del m.held[tp.topic]

    def _insert_part(self, m: _Member, tp: TopicPartition, weight: int) -> None:
        bisect.insort(m.by_lag, (weight, tp))
        m.lag += weight
        self._total_lag += weight
        m.held[tp.topic] = m.held.get(tp.topic, 0) + 1

    def _detach(self, m: _Member) -> None:
        self._load.remove(m.key())
        self._by_lag.remove((m.lag, m.name))

    def _attach(self, m: _Member) -> None:
        key = m.key()
        self._load.add(key)
        self._by_lag.add((m.lag, m.name))
        if m.groups_version != self._gversion:
            m.groups = tuple({self._tgroup[t] for t in m.topics})
            m.groups_version = self._gversion
        for g in m.groups:
            heap = self._gheap.get(g)
            if heap is not None:
                heapq.heappush(heap, key)
                if len(heap) > self._glimit[g]:
                    del self._gheap[g]  # mostly stale entries: rebuild on next need
        if self._hheap is not None:
            entry = (-key[0], -key[1], key[2])
            for t in m.held:
                heapq.heappush(self._hheap.setdefault(t, []), entry)
            self._hheap_size += len(m.held)
            if self._hheap_size > 8 * len(self._owner) + 1024:
                self._hheap = None  # mostly stale entries: rebuild on next need

    def _refine(self, topics: frozenset[str]) -> None:
        """Split topic groups so that every member subscribes to all or none of each."""
        new = [t for t in sorted(topics) if t not in self._tgroup]
        if new:
            self._add_group(set(new), None)
        for g in sorted({self._tgroup[t] for t in topics}):
            inside = self._gtopics[g] & topics
            if inside != self._gtopics[g]:
                self._gtopics[g] -= inside
                self._add_group(inside, g)

    def _add_group(self, topics: set[str], parent: int | None) -> None:
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

    def _add_subscriber(self, topic: str, name: str) -> None:
        subs = self._subs.setdefault(topic, set())
        if not subs:
            self._orphans.update(self._topic_partitions(topic))
        subs.add(name)

    def _min_subscriber(self, topic: str) -> Key | None:
        g = self._tgroup.get(topic)
        if g is None:
            return None
        heap = self._gheap.get(g)
        if heap is None:
            heap = [self._members[n].key() for n in self._subs.get(topic, ())]
            heapq.heapify(heap)
            self._gheap[g] = heap
            self._glimit[g] = 4 * len(heap) + 64
        members = self._members
        while heap:
            key = heap[0]
            m = members.get(key[2])
            if m is not None and topic in m.topics and m.key() == key:
                return key
            heapq.heappop(heap)
        return None

    def _topic_partitions(self, topic: str) -> list[TopicPartition]:
        return topic_partitions(topic, self._ppt.get(topic, 0))

    def _record_member(self, m: _Member) -> None:
        if m.name not in self._before_parts:
            self._before_parts[m.name] = frozenset(tp for _, tp in m.by_lag)

    def _diff(self, count_lag_moves: bool) -> Change:
        changed: dict[str, list[TopicPartition]] = {}
        for name in sorted(self._before_parts.keys() | self._joined):
            m = self._members.get(name)
            if m is None:
                continue
            now = m.partitions()
            # A joiner gets a record even when empty, so it knows it was seen.
            if name in self._joined or frozenset(now) != self._before_parts[name]:
                changed[name] = now
        moved = 0
        lag_moved = 0
        for tp, old in self._before_owner.items():
            if old is None or self._owner.get(tp) == old:
                continue
            m = self._members.get(old)
            if m is not None and tp.topic in m.topics:
                moved += 1
                if tp in self._lag_moved:
                    lag_moved += 1
        return Change(
            assignments=changed,
            removed=frozenset(self._removed - set(self._members)),
            moved=moved,
            moved_for_lag=lag_moved if count_lag_moves else 0,
        )


@dataclass(slots=True)
class _Start:
    """The starting point of a snapshot: kept claims, or a fresh bulk placement."""

    spec: GroupSpec
    plag: dict[TopicPartition, int]
    lag_aware: bool
    initial: Assignment
    fresh: bool
    uniform: bool

    @classmethod
    def of(
        cls,
        partitions_per_topic: PartitionsPerTopic,
        subscriptions: Subscriptions,
        current: CurrentAssignment | None,
        lag: LagMap | None,
        lag_aware: bool,
    ) -> _Start:
        spec = build_spec(partitions_per_topic, subscriptions)
        plag = normalize_lag(lag)
        claims = valid_claims(spec, current)
        uniform = spec.is_uniform()
        effective = plag if lag_aware else None
        if claims:
            initial = {m: claims.get(m, []) for m in spec.members}
        elif uniform:
            every = [tp for t in spec.topics for tp in spec.partitions(t)]
            initial = deal_uniform(list(spec.members), every, effective)
        else:
            initial = greedy_place(spec, effective)
        return cls(spec, plag, lag_aware, initial, not claims, uniform)

    @property
    def final(self) -> bool:
        """A fresh uniform deal is count-balanced by construction; without lag it is done."""
        return self.fresh and self.uniform and not (self.lag_aware and any(self.plag.values()))

    def engine(self, policy: LagPolicy) -> tuple[IncrementalAssignor, Change]:
        spec = self.spec
        eng = IncrementalAssignor(
            spec.partitions_per_topic, lag_aware=self.lag_aware, policy=policy
        )
        eng._plag = self.plag
        eng._bulk_load(spec.members, spec.topics_of, self.initial)
        budget = 4 * len(spec.members) + 64 if self.fresh else policy.max_moves
        work = () if self.fresh and self.uniform else eng._violators()
        change = eng._settle(work, lag_budget=budget, count_lag_moves=not self.fresh)
        return eng, change


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Bulk loads allocate ~10 objects per partition, all acyclic; letting the cyclic
    collector rescan them mid-build costs about a third of a 100 000-partition load."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_MAX_TP = TopicPartition("\U0010ffff" * 8, 2**62)
