"""One consumer group's control logic, free of I/O: membership with leave grace,
coalescing, lag smoothing, the incremental assignor and the handoff reconciler.

The daemon feeds it observations with the current time and publishes the plans it
returns. Time is a parameter, so every rule here is tested without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from assignors import (
    ConstraintsChanged,
    Event,
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionRacksChanged,
    PartitionsChanged,
    SubscriptionChanged,
    TopicPartition,
    check_constraints,
)
from controller.core.absence import Absences
from controller.core.handoff import Plan, Reconciler, Release
from controller.core.lag_cooldown import LagCooldown
from controller.core.lag_inbox import LagInbox
from controller.core.pending import Declared, PendingStep, Step, weight
from controller.core.rebalance import GroupTuning, Rebalance
from controller.wire.records import ConstraintSet, Presence

if TYPE_CHECKING:  # recovery builds a GroupState: it imports this module
    from controller.core.recovery import Recovered

_NO_RACKS: frozenset[str] = frozenset()


def effective_constraints(configured: ConstraintSet, overrides: ConstraintSet) -> ConstraintSet:
    """The overrides laid over the config, checked as the engine will take them."""
    effective = configured.over(overrides)
    check_constraints(effective.pinned(), effective.max_partitions)
    return effective


class RejectedError(ValueError):
    """A presence message that is well-formed but inconsistent with what we granted."""


class GroupState:
    def __init__(
        self,
        name: str,
        tuning: GroupTuning,
        partitions_per_topic: Mapping[str, int],
        recovered: Recovered | None = None,
        now: float = 0.0,
        *,
        capacities: Mapping[str, float | None] | None = None,
        configured: ConstraintSet | None = None,
        overrides: ConstraintSet | None = None,
        signing_key: str | None = None,
    ) -> None:
        """``capacities``: what recovered members declare, from the presence heard so
        far; the predecessor balanced with them, so the rebuild keeps its assignment.
        ``configured`` and ``overrides``: the operator's constraints from the config and
        from the admin API (the constraints topic); the latter win entry by entry.
        ``signing_key``: the id of the key this controller signs with (None: unsigned)."""
        self.signing_key = signing_key
        #: Live members that verify with keys none of which signs our records: they can
        #: read none of them, so they are given nothing and what they still read is never
        #: timed out from them (``Reconciler.hold_on``) while they live.
        self.cannot_verify: set[str] = set()
        self.configured = configured or ConstraintSet()
        self.overrides = overrides or ConstraintSet()
        self.constraints = effective_constraints(self.configured, self.overrides)
        self.name = name
        self.tuning = tuning
        #: Sees every engine input as it is queued (``ballast run --record``).
        self.recorder: Callable[[Event, float], None] | None = None
        granted = dict(recovered.granted) if recovered else {}
        topics = dict(recovered.topics) if recovered else {}
        # A restart moves nothing: rebuild from what was granted, without lag. Only
        # partitions that were mid-handoff (granted to nobody) get a target here.
        self.engine, start = IncrementalAssignor.from_snapshot(
            partitions_per_topic,
            topics,
            current=granted,
            policy=tuning.policy,
            member_capacities={m: c for m, c in (capacities or {}).items() if m in topics},
            pins=self.constraints.pinned(),
            max_partitions=self.constraints.max_partitions,
        )
        self.engine.intern_partitions()
        self.cooldown = LagCooldown(tuning.lag_cooldown, tuning.lag_backoff_max)
        self._still = replace(tuning.policy, max_moves=0)
        self.reconciler = Reconciler(
            handoff_timeout=tuning.handoff_timeout,
            generation=recovered.generation if recovered else 0,
            granted=granted,
            releasing=recovered.releasing if recovered else None,
            tags=None if recovered is None else recovered.tags(),
            now=now,
        )
        for member in sorted(recovered.stale if recovered else ()):
            self.reconciler.refresh(member)
        self.reconciler.update_target(start.assignments, start.removed)
        self.presence: dict[str, Presence] = {}
        #: When each live member's presence (its ack) was last heard, for the group view.
        self.heard: dict[str, float] = {}
        #: Operator controls (HTTP admin API): a paused group publishes nothing; a drained
        #: member keeps its presence but is given no partitions.
        self.paused = False
        self.drained: set[str] = set()
        #: Members leaving through a handoff (presence ``draining``): like drained ones
        #: they read on, their partitions are revoked and granted elsewhere once they
        #: acknowledge, and they get nothing more; unlike them, not an operator's to keep.
        self.handing_off: set[str] = set()
        #: Recovered members are absent until their presence is heard; since when is
        #: kept in their record, so a takeover does not restart the clock.
        self.absences = Absences(tuning.leave_grace)
        recorded_absence = recovered.absent if recovered else {}
        for m in granted:
            since = min(now, recorded_absence.get(m, now))
            self.absences.lost(m, since, now, recorded=m in recorded_absence)
        self._lag = LagInbox(tuning.lag_batch, tuning.lag_smoothing)
        self._pending = PendingStep(tuning.rebalance_delay, tuning.initial_delay, tuning.max_delay)
        #: Replica racks last read from topic metadata (partitions with none are absent).
        self.replica_racks: dict[TopicPartition, frozenset[str]] = {}
        #: Time the last tick's reconciliation took (``Reconciler.plan``).
        self.plan_seconds = 0.0
        #: What ``on_presence`` corrected (a member reading partitions none of our
        #: records grant it), for the runtime to log and count (``pop_corrections``).
        self.corrections: list[str] = []
        #: Topics the group reads: every topic a member announced or a record names,
        #: kept when its last reader is drained or gone (its partitions are then unread,
        #: and the group degraded), dropped when a member stops subscribing to it and no
        #: other does, or when it does not exist and nobody subscribes (bounded).
        self._read: set[str] = {
            t for ts in (recovered.topics.values() if recovered else ()) for t in ts
        }
        #: member -> what it was last corrected for reading (``on_presence``).
        self._strays: dict[str, frozenset[TopicPartition]] = {}
        #: Members whose record a previous key (or no key) signed, until they
        #: acknowledge one signed with ours: the old key retires when this is empty.
        self._behind_key: set[str] = set()

    # ------------------------------------------------------------------ front door
    # What the runtime reads and does: it never reaches into the engine or the reconciler.

    def commit(self, plan: Plan) -> None:
        """The plan's records are about to be published: they count as written (a member
        may acknowledge one the moment it is durable)."""
        self.reconciler.commit(plan)

    def pop_corrections(self) -> list[str]:
        """What was corrected since the last call, one line each."""
        corrections, self.corrections = self.corrections, []
        return corrections

    def re_sign(self, members: Iterable[str]) -> None:
        """These members' records were signed by a previous key, or by none: write each
        again, signed with ours (same grant, next generation)."""
        for member in members:
            if member in self.reconciler.granted:
                self.reconciler.refresh(member)
                self._behind_key.add(member)

    def behind_key(self) -> int:
        """Members that have not yet acknowledged a record signed with this controller's
        key (those ``re_sign`` named): the previous key is still needed for them."""
        r = self.reconciler
        self._behind_key = {
            m
            for m in self._behind_key
            if m in r.granted and (m not in r.written or r.acked.get(m, -1) < r.written[m])
        }
        return len(self._behind_key)

    def pop_timeouts(self) -> list[Release]:
        """The handoffs that timed out since the last call."""
        timed_out = self.reconciler.timed_out
        self.reconciler.timed_out = []
        return timed_out

    @property
    def generation(self) -> int:
        """The generation of the latest plan."""
        return self.reconciler.generation

    @property
    def partitions_per_topic(self) -> Mapping[str, int]:
        """The partition counts the group is built on."""
        return self.engine.partitions_per_topic

    def subscriptions(self) -> dict[str, frozenset[str]]:
        """Each member's subscription (a copy), members in order."""
        return self.engine.members

    def subscribed_topics(self) -> set[str]:
        """Every topic some member subscribes to."""
        return {t for topics in self.engine.members.values() for t in topics}

    def unread_topics(self) -> list[str]:
        """Topics the group reads that no member may take (every subscriber drained,
        handing off, unable to verify, or gone): all their partitions go unread."""
        subscribed = self.subscribed_topics()
        known = self.partitions_per_topic
        self._read = {t for t in self._read if t in subscribed or t in known}
        return sorted(t for t in self._read - subscribed if known.get(t))

    def unread(self) -> list[TopicPartition]:
        """Partitions nobody reads or will read once in-flight revokes end: those every
        subscriber's cap leaves out, and every partition of an unread topic."""
        r = self.reconciler
        orphaned = [
            tp
            for t in self.unread_topics()
            for p in range(self.partitions_per_topic[t])
            if (tp := TopicPartition(t, p)) not in r.owner and tp not in r.releasing
        ]
        return sorted([*self.engine.unassigned(), *orphaned])

    def draining_leaves_unread(self, member: str) -> list[str]:
        """The topics ``member`` reads that no other member may take: draining it would
        leave them unread."""
        mine = self._subscription(member) or frozenset()
        leaving = self.drained | self.handing_off | self.cannot_verify  # maybe not applied yet
        others = {
            t
            for m, ts in self.engine.members.items()
            if m != member and m not in leaving
            for t in ts
        }
        return sorted(mine - others)

    def holders(self) -> tuple[dict[TopicPartition, str], dict[str, float]]:
        """Who holds each partition now (a copy, for a worker thread) and each member's
        capacity: what the autoscale recommender attributes processing to."""
        engine = self.engine
        capacities = {m: engine.capacity_of(m) or 1.0 for m in engine.members}
        return dict(self.reconciler.owner), capacities

    def topics_of(self, member: str) -> frozenset[str] | None:
        """A member's subscription (None: not in the group)."""
        return self.engine.topics_of(member)

    def member_count(self) -> int:
        return self.engine.member_count()

    def cross_rack(self) -> int:
        """Partitions read by a member outside every rack of their replicas."""
        return self.engine.cross_rack()

    def lag_skew(self) -> float:
        """The largest member lag over the mean."""
        return self.engine.lag_skew()

    def granted_members(self) -> int:
        """Members holding a grant."""
        return len(self.reconciler.granted)

    # ------------------------------------------------------------------ observations

    def on_presence(self, p: Presence, now: float) -> None:
        """A member announced itself. Raises ``RejectedError`` when its claims are impossible."""
        if p.group != self.name:
            raise RejectedError(f"presence for group {p.group!r} arrived on group {self.name!r}")
        live = self.presence.get(p.member)
        if live is not None and live.instance and p.instance and live.instance != p.instance:
            raise RejectedError(
                f"duplicate member id {p.member!r}: instance {p.instance!r} while "
                f"{live.instance!r} is live"
            )
        claimed = p.held()
        granted = self.reconciler.granted.get(p.member, frozenset())
        stray = claimed - granted - self.reconciler.releasing_from(p.member)
        if stray:
            # It reads partitions no record of ours gives it: a grant of an older
            # controller's that this one did not adopt (signing turned on, a key
            # changed), or a forgery it applied. Nobody else gets them before it has
            # applied a record of ours, which it gets at once; its acknowledgement is
            # of a record we did not write, so it counts for nothing.
            if self._strays.get(p.member) != stray:  # once per claim, not per heartbeat
                self._strays[p.member] = stray
                self.reconciler.correct(p.member, stray, p.generation, now)
                shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(stray)[:5])
                self.corrections.append(
                    f"member {p.member!r} reads {len(stray)} partitions no record of this "
                    f"controller grants it (generation {p.generation}): {shown}; its record "
                    "is written again and they go to nobody else until it applies it"
                )
            p = p.model_copy(update={"generation": -1})
        else:
            self._strays.pop(p.member, None)
        if p.state == "leaving":
            self._strays.pop(p.member, None)
            self.cannot_verify.discard(p.member)
            self.reconciler.let_go(p.member, now)
            self.handing_off.discard(p.member)
            self.presence.pop(p.member, None)
            self.heard.pop(p.member, None)
            self.reconciler.ack(p.member, p.generation)
            self._depart(p.member, now, "leave")
            return
        topics = frozenset(p.topics)
        known = self._subscription(p.member)
        self._read |= topics
        if known is not None and not known <= topics:
            self._stop_reading(p.member, known - topics)
        self.presence[p.member] = p
        self.heard[p.member] = now
        self.absences.back(p.member)
        self.reconciler.mark_present(p.member, p.instance)
        if p.member in self.drained:
            self.reconciler.ack(p.member, p.generation)
            return
        if not self._can_follow(p):
            self.reconciler.ack(p.member, p.generation)
            if p.member not in self.cannot_verify:
                self._cannot_follow(p, known is not None, now)
            return
        if p.member in self.cannot_verify:  # given the key since: it joins again below
            self.cannot_verify.discard(p.member)
            self.reconciler.let_go(p.member, now)
        if p.state == "draining":
            self.reconciler.ack(p.member, p.generation)
            if p.member not in self.handing_off:
                self.handing_off.add(p.member)
                if known is not None:
                    # The usual delay: leaves that trickle in are one step, and the member
                    # reads its partitions while it waits.
                    self._enqueue(MemberLeft(p.member), "leave", now)
            return
        self.handing_off.discard(p.member)  # active again: it joins back (known is None)
        rack = self.rack_for(p.member, p.rack)
        declared = Declared(rack, weight(p.capacity))
        if known is None:
            self._enqueue(MemberJoined(p.member, topics, rack, p.capacity), "join", now)
        elif (was := self._declared(p.member)) != declared:
            # Joining again moves a member to its new rack and capacity (and its topics).
            reason = "racks" if was.rack != declared.rack else "capacity"
            self._enqueue(MemberJoined(p.member, topics, rack, p.capacity), reason, now)
        elif known != topics:
            self._enqueue(SubscriptionChanged(p.member, topics), "subscription", now)
        self.reconciler.ack(p.member, p.generation)
        if p.lag:
            self.on_lag({TopicPartition(t, q): v for t, q, v in p.lag}, now)

    def _stop_reading(self, member: str, dropped: frozenset[str]) -> None:
        """``member`` no longer subscribes to ``dropped``: a topic nobody else reads (or
        announces) is no longer the group's."""
        others = {t for m, ts in self.engine.members.items() if m != member for t in ts}
        others |= {t for m, q in self.presence.items() if m != member for t in q.topics}
        self._read -= dropped - others

    def _can_follow(self, p: Presence) -> bool:
        """Whether the member can verify our records: it verifies nothing, or with a key
        that includes ours."""
        return p.verify_keys is None or (
            self.signing_key is not None and self.signing_key in p.verify_keys
        )

    def _cannot_follow(self, p: Presence, known: bool, now: float) -> None:
        self.cannot_verify.add(p.member)
        self.reconciler.hold_on(p.member)
        ours = self.signing_key or "no key (unsigned)"
        self.corrections.append(
            f"member {p.member!r} verifies with keys {', '.join(p.verify_keys or ())} but "
            f"this controller signs with {ours}: it can apply none of its records, so it is "
            "given nothing and keeps what it reads until it leaves or is given the key "
            '(docs/operations.md, "Signing")'
        )
        if known:
            self._enqueue(MemberLeft(p.member), "unverifiable", now, delay=0.0)

    def drain(self, member: str, now: float) -> bool:
        """Move every partition off ``member`` and keep it empty until ``undrain``. False
        when the group has no such member."""
        if not self.knows(member):
            return False
        self.drained.add(member)
        if self._known(member):
            self._enqueue(MemberLeft(member), "drain", now, delay=0.0)
        return True

    def undrain(self, member: str, now: float) -> bool:
        if member not in self.drained:
            return False
        self.drained.discard(member)
        p = self.presence.get(member)
        if p is not None:
            rack = self.rack_for(member, p.rack)
            joined = MemberJoined(member, frozenset(p.topics), rack, p.capacity)
            self._enqueue(joined, "undrain", now)
        return True

    def rack_for(self, member: str, declared: str | None) -> str | None:
        """The rack the member is treated as in: the operator's, else its own."""
        return self.constraints.racks.get(member, declared)

    def set_constraints(
        self, configured: ConstraintSet, overrides: ConstraintSet, now: float
    ) -> None:
        """New constraints, settled at once. Raises ``ValueError`` (and changes nothing)
        when the pair is contradictory (more pins on a member than its cap)."""
        effective = effective_constraints(configured, overrides)
        if effective == self.constraints:
            self.configured, self.overrides = configured, overrides
            return
        before = self.constraints
        self.configured, self.overrides, self.constraints = configured, overrides, effective
        self._enqueue(
            ConstraintsChanged(effective.pinned(), effective.max_partitions),
            "constraints",
            now,
            delay=0.0,
        )
        for member in sorted(before.racks.keys() | effective.racks.keys()):
            p = self.presence.get(member)
            if p is None or member in self.drained or not self._known(member):
                continue
            rack = self.rack_for(member, p.rack)
            if rack != self._declared(member).rack:
                event = MemberJoined(member, frozenset(p.topics), rack, p.capacity)
                self._enqueue(event, "racks", now, delay=0.0)

    def violations(self) -> list[str]:
        """Constraints the target assignment breaks: always empty (a metric says so)."""
        return self.engine.violations()

    def force_rebalance(self, now: float) -> None:
        """Settle now (pending events included) with a fresh look at lag."""
        self._enqueue(LagUpdated({}), "forced", now, delay=0.0)

    def on_gone(self, member: str, now: float, since: float | None = None) -> None:
        """Presence cleared without a clean leave (crash, Will, session expiry, restart);
        ``since``: when it was last seen, if earlier than ``now``."""
        self.presence.pop(member, None)
        self.heard.pop(member, None)
        self.drained.discard(member)
        self.handing_off.discard(member)
        self._strays.pop(member, None)
        self.cannot_verify.discard(member)
        self.reconciler.let_go(member, now)  # gone: what it still held times out as usual
        if not self._known(member):
            self._retire(member)
            return
        seen = now if since is None else min(since, now)
        if self.tuning.leave_grace <= 0:
            self._depart(member, now, "crash")
        elif member not in self.absences:
            self.absences.lost(member, seen, now)

    def seen_absent(self, member: str, since: float) -> None:
        """Another source (this replica's own MQTT session) saw a recovered member leave
        at ``since``: its grace counts from there."""
        if member not in self.presence:
            self.absences.seen_since(member, since)

    @property
    def lag(self) -> Mapping[TopicPartition, float]:
        """The smoothed lag of every partition that reported."""
        return self._lag.smoothed

    def lag_queued(self) -> bool:
        """Lag readings wait to be absorbed (``lag_batch`` a tick)."""
        return bool(self._lag)

    def on_lag(self, readings: dict[TopicPartition, int], now: float) -> None:
        """New lag readings, absorbed by the next ticks (``lag_batch`` a tick). The dict is
        handed over, not copied (a poll of a million partitions is ~10 ms of copying):
        the caller builds it for this call and does not touch it afterwards."""
        self._queue_lag(readings, now)

    def forget_lag(self, partitions: Iterable[TopicPartition], now: float) -> None:
        """A partition that stopped reporting weighs 0 again, like one never reported."""
        self._queue_lag({tp: None for tp in partitions}, now)

    def _queue_lag(self, readings: Mapping[TopicPartition, int | None], now: float) -> None:
        bound = 2 * sum(self.engine.partitions_per_topic.values()) + self.tuning.lag_batch
        self._lag.put(readings, now, bound)

    def _absorb_lag(self) -> tuple[LagUpdated, float] | None:
        """The next lag batch as one event for the engine, with when its oldest arrived."""
        absorbed = self._lag.absorb()
        if absorbed is None:
            return None
        update, since = absorbed
        event = LagUpdated(update)
        if self.recorder is not None:
            self.recorder(event, since)
        return event, since

    def on_partition_racks(
        self, racks: Mapping[TopicPartition, frozenset[str]], now: float
    ) -> None:
        """Replica racks read from topic metadata; only partitions whose racks changed
        reach the engine (a cluster without ``broker.rack`` sends nothing)."""
        changed = {
            tp: named
            for tp, named in racks.items()
            if self.replica_racks.get(tp, _NO_RACKS) != named
        }
        if not changed:
            return
        for tp, named in changed.items():
            if named:
                self.replica_racks[tp] = named
            else:
                del self.replica_racks[tp]
        self._enqueue(PartitionRacksChanged(changed), "racks", now)

    def adopt_racks(
        self,
        member_racks: Mapping[str, str | None],
        replica_racks: Mapping[TopicPartition, frozenset[str]],
    ) -> None:
        """At recovery, before any event: the racks as they stand now, taken without
        moving anything (invariant 3). Later presence and metadata compare against
        them, so only a rack that changes afterwards realigns."""
        self.replica_racks = {tp: named for tp, named in replica_racks.items() if named}
        self.engine.adopt_racks(member_racks, replica_racks)

    def on_partitions(self, partitions_per_topic: Mapping[str, int], now: float) -> None:
        current = self.engine.partitions_per_topic
        for topic, count in sorted(partitions_per_topic.items()):
            if current.get(topic) != count:
                self._enqueue(PartitionsChanged(topic, count), "partitions", now)

    # ------------------------------------------------------------------ time

    def settled(self) -> bool:
        """No rebalance pending and the reconciler has nothing left to do (O(1): cheap
        enough to poll)."""
        return self._pending.due is None and self.reconciler.settled()

    def next_wakeup(self) -> float | None:
        if self.paused:
            return None
        times = (
            self._pending.due,
            self._lag.oldest(),
            self.reconciler.next_deadline(),
            self.absences.earliest(),
        )
        return min((t for t in times if t is not None), default=None)

    def tick(self, now: float) -> tuple[Rebalance | None, Plan | None]:
        """Run what is due: expired graces, a coalesced rebalance, and handoff progress.
        A paused group does none of it (events wait for ``paused = False``)."""
        if self.paused:
            return None, None
        for member, since in self.absences.to_record(now):
            self.reconciler.mark_absent(member, since)
        for member, deadline in self.absences.expired(now):
            self._depart(member, deadline, "crash")
        rebalance = None
        due = self._pending.due
        if due is not None and due <= now:
            # A membership (or operator, metadata) step carries no lag batch: queued
            # readings wait for the next step, the change does not wait for them.
            rebalance = self._step(self._pending.take(now), now)
        elif (absorbed := self._absorb_lag()) is not None:
            # Its own step, due at once; events still coalescing stay queued until their
            # delay ends (a lag batch does not cut a burst of joins in two).
            event, since = absorbed
            rebalance = self._step(Step([event], ("lag",), since, since, {}, {}), now)
            if not rebalance.changed_members:
                rebalance = None  # a lag reading that moved nothing is not a rebalance
        started = time.perf_counter()
        plan = self.reconciler.plan(now)
        self.plan_seconds = time.perf_counter() - started
        return rebalance, plan

    # ------------------------------------------------------------------ internals

    def _step(self, step: Step, now: float) -> Rebalance:
        freed: dict[str, int] = {}
        for e in step.events:
            if not isinstance(e, MemberLeft) or self.engine.topics_of(e.member) is None:
                continue
            how = step.departing.get(e.member, "leave")
            freed[how] = freed.get(how, 0) + len(self.engine.partitions_of(e.member))
        cooling = not self.cooldown.allows(now)
        if cooling:  # readings and membership apply; only lag moves wait
            self.engine.policy = self._still
        started = time.perf_counter()
        try:
            change = self.engine.apply(step.events)
        finally:
            self.engine.policy = self.tuning.policy
        assign_seconds = time.perf_counter() - started
        trigger = change.lag_trigger
        if change.moved_for_lag and trigger is not None:
            self.cooldown.moved(now, trigger.member, trigger.lag)
        # A drained, handing-off or unverifying member left the engine but still runs and
        # reads: its partitions are revoked like any move (granted elsewhere only once it
        # acknowledged), not tombstoned like a dead member's, which are granted at once.
        draining = change.removed & (self.drained | self.handing_off | self.cannot_verify)
        targets = {**change.assignments, **dict.fromkeys(draining, ())}
        self.reconciler.update_target(targets, change.removed - draining, change.deltas)
        return Rebalance(
            reasons=step.reasons,
            moved=change.moved,
            moved_for_lag=change.moved_for_lag,
            moved_for_rack=change.moved_for_rack,
            changed_members=len(change.assignments) + len(change.removed),
            first_event_at=step.first,
            due_at=step.due,
            assign_seconds=assign_seconds,
            lag_trigger=change.lag_trigger,
            freed=freed,
            about=step.about,
        )

    def _depart(self, member: str, now: float, how: str) -> None:
        """``how``: a clean ``leave``, or a ``crash`` (presence lost, grace over)."""
        self.absences.departed(member)
        if self._known(member):
            self._enqueue(MemberLeft(member), how, now)
        else:
            self._retire(member)

    def _retire(self, member: str) -> None:
        """A drained member (out of the engine, holding an empty grant) went away: its
        record becomes a tombstone."""
        if member in self.reconciler.granted and not self._known(member):
            self.reconciler.update_target({}, [member])

    def knows(self, member: str) -> bool:
        """Is ``member`` in the group: announced, assigned, or joining in the coalesced
        events?"""
        return member in self.presence or self._known(member)

    def _known(self, member: str) -> bool:
        return self._subscription(member) is not None

    def _declared(self, member: str) -> Declared:
        queued = self._pending.declared.get(member)
        if queued is not None:
            return queued
        return Declared(self.engine.rack_of(member), weight(self.engine.capacity_of(member)))

    def _subscription(self, member: str) -> frozenset[str] | None:
        """The member's topics as they will be once the coalesced events are applied."""
        if member in self._pending.topics:
            return self._pending.topics[member]
        return self.engine.topics_of(member)

    def _enqueue(self, event: Event, reason: str, now: float, delay: float | None = None) -> None:
        if self.recorder is not None:
            self.recorder(event, now)
        self._pending.add(event, reason, now, delay, group_empty=not self.engine.member_count())
