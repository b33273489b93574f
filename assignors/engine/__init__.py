"""Incremental lag-aware sticky assignment: ``IncrementalAssignor`` and its building.

The engine holds one group's assignment with the indexes that make each event cost in
proportion to the partitions it moves, not to the size of the group. Priorities:
validity > count balance (KIP-54's definition) > lag balance (smallest largest member
lag) > stickiness. After an event, balance is restored by a worklist over the members
whose holdings changed: only pairs involving such a member can newly violate balance, and
every repair move strictly lowers the sum of squared counts (over capacities), so it ends.

The package reads bottom up, each layer a class that extends the one below it, so that
every concept lives in one module and ``IncrementalAssignor`` here is only the public face:

* ``member.py``: a member, its lag-ordered partitions and its balance keys.
* ``state.py``: what the engine holds (owner map, slot array, lag table, the indexes).
* ``receivers.py``: topic groups and their heaps: who takes a partition, who gives one.
* ``moves.py``: moving one partition, bulk loading, keeping every index in step.
* ``lag_search.py``: lag balance: the moves and swaps that lower the peak member lag.
* ``repair.py``: pins, caps, orphans, the KIP-54 worklist and bulk rebalancing.
* ``rack_alignment.py``: count-neutral swaps onto replicas' racks.
* ``handlers.py``: one method per event.
* ``step.py``: a step: settle after events, then report what changed (``Change``).
* ``snapshot.py``: building from a whole group at once, and its fast paths.

Events are checked before any of this runs (``event_checks.py``), so a step is atomic.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterable

from ..capacity import MemberCapacities
from ..collector import paused as collector_paused
from ..constraints import (
    Constraints,
    MaxPartitions,
    Pins,
    check_constraints,
    violations,
)
from ..event_checks import Constrain, check_events, checked_racks
from ..events import (
    Change,
    Event,
    MemberJoined,
    MemberLeft,
    PartitionRacksChanged,
    PartitionsChanged,
    SubscriptionChanged,
)
from ..policy import DEFAULT_POLICY, LagPolicy
from ..racks import MemberRacks, PartitionRacks, check_rack
from ..types import (
    Assignment,
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
)
from .snapshot import Snapshot
from .step import Steps


class UnassignedPartitionsWarning(UserWarning):
    """``assign`` left partitions out because the caps leave no subscriber room: the
    result is what the operator asked for, and the caller is told."""


class IncrementalAssignor(Steps):
    """One group's assignment, updated event by event. See the module docstring."""

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
            start = Snapshot.of(
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
            eng, change = start.engine(policy, cls)
            eng._build_heaps()  # ready for the first event
        if gc.isenabled():
            # The build's objects sit in the young generation, and the first collections
            # after it walk them all, billed to the first event (measured in
            # benchmarks/results/assignors-history.md, "Lag table and the collector").
            # The build pays them instead; it outlives them.
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
            start = Snapshot.of(
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
            eng, change = start.engine(policy, IncrementalAssignor)
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

    def apply(self, events: Iterable[Event]) -> Change:
        """Apply coalesced events, then restore balance once and return only what changed.

        With the collector paused, as in a build: an event allocates a few thousand
        tracked objects and frees most of them, but unpaused those allocations set off
        young collections and, now and then, a full one over the whole engine (measured
        in benchmarks/results/assignors-history.md, "Lag table and the collector")."""
        with collector_paused():
            return self._apply(events)

    def _apply(self, events: Iterable[Event]) -> Change:
        # Every event is checked before any changes state: a batch that raises leaves
        # the engine exactly as it was (``event_checks.py``).
        lag_only = True
        for event in check_events(events):
            if isinstance(event, MemberJoined):
                self._join(event.member, event.topics, event.rack, event.capacity or 1.0)
            elif isinstance(event, MemberLeft):
                self._leave(event.member)
            elif isinstance(event, SubscriptionChanged):
                self._resubscribe(event.member, event.topics)
            elif isinstance(event, PartitionsChanged):
                self._repartition(event.topic, event.count)
            elif isinstance(event, PartitionRacksChanged):
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
        for name in self._members:  # the rest as they joined; rackless ones as such
            if name not in self._racks.member:
                self._racks.set_member(name, None)
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
        peak: float = self._by_load[-1][0]
        return peak / self._mean_lag()

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
