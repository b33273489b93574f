"""One consumer group's control logic, free of I/O: membership with leave grace,
coalescing, lag smoothing, the incremental assignor and the handoff reconciler.

The daemon feeds it observations with the current time and publishes the plans it
returns. Time is a parameter, so every rule here is tested without sleeping.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from typing import NamedTuple

from assignors import (
    ConstraintsChanged,
    Event,
    IncrementalAssignor,
    LagPolicy,
    LagTrigger,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionRacksChanged,
    PartitionsChanged,
    SubscriptionChanged,
    TopicPartition,
    check_constraints,
)
from controller.core.deadlines import Deadlines
from controller.core.handoff import Plan, Reconciler, Tags
from controller.core.lag_cooldown import LagCooldown
from controller.wire.fencing import Order
from controller.wire.records import Assignment, ConstraintSet, Presence

REASONS = (
    "join",
    "leave",
    "crash",
    "subscription",
    "lag",
    "partitions",
    "racks",
    "capacity",
    "constraints",
    "drain",
    "undrain",
    "forced",
)
#: How a member's partitions came to need a new reader when it went away.
DEPARTURES = frozenset({"leave", "crash", "drain"})
#: Members named per reason in a rebalance's ``about`` (a log line stays short).
ABOUT_SHOWN = 10
_NO_RACKS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class GroupTuning:
    rebalance_delay: float = 1.0
    #: An empty group's first rebalance waits until no member joined for
    #: ``rebalance_delay``, but at most this long after the first join (Kafka's
    #: ``group.initial.rebalance.delay.ms``): a fleet starting up gets one placement,
    #: not a placement and then handoffs to everyone who joined a moment later.
    initial_delay: float = 0.0
    leave_grace: float = 10.0
    handoff_timeout: float = 15.0
    #: Weight of a new lag reading in the exponential moving average (1.0: no smoothing).
    lag_smoothing: float = 0.3
    #: Lag readings one tick hands the engine; the rest wait for the next ticks, so a
    #: poll of every partition never stalls the loop (costs O(readings), spread out).
    lag_batch: int = 2000
    policy: LagPolicy = field(default_factory=LagPolicy)
    #: After a step that moved partitions for lag, none moves for lag for this long;
    #: doubled, up to ``lag_backoff_max``, while the same member stays the most lagged
    #: at no lower lag (``lag_cooldown.py``). 0: no wait.
    lag_cooldown: float = 0.0
    lag_backoff_max: float = 600.0


@dataclass(frozen=True, slots=True)
class Rebalance:
    """What one rebalance decided, for logs and metrics."""

    reasons: tuple[str, ...]
    moved: int
    moved_for_lag: int
    changed_members: int
    #: Time of the earliest event this rebalance absorbed (for latency).
    first_event_at: float
    #: When its coalescing window closed (``first_event_at`` + the delay it waited).
    due_at: float
    #: Time the engine took (``IncrementalAssignor.apply``).
    assign_seconds: float
    #: Why the lag policy moved partitions, when it did.
    lag_trigger: LagTrigger | None = None
    #: Of ``moved``, those swapped onto a replica's rack.
    moved_for_rack: int = 0
    #: Partitions of members that went away (by how: leave, crash, drain): they change
    #: reader too, though nobody present gave them up.
    freed: Mapping[str, int] = field(default_factory=dict)
    #: The members each reason was about (at most ``ABOUT_SHOWN`` named per reason).
    about: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def reassigned(self) -> int:
        """Partitions whose reader changed: taken from a present member or freed."""
        return self.moved + sum(self.freed.values())

    def by_reason(self) -> dict[str, int]:
        """``reassigned`` split by why: freed ones by how their member went; taken ones
        for lag, for a rack, or else for the step's first other reason (a join, an
        undrain, new constraints...)."""
        out = {k: v for k, v in self.freed.items() if v}
        balance = self.moved - self.moved_for_lag - self.moved_for_rack
        other = next((r for r in self.reasons if r not in DEPARTURES), None)
        cause = other or (self.reasons[0] if self.reasons else "forced")
        for reason, count in (("lag", self.moved_for_lag), ("rack", self.moved_for_rack)):
            if count:
                out[reason] = out.get(reason, 0) + count
        if balance:
            out[cause] = out.get(cause, 0) + balance
        return out

    def why(self) -> str:
        """One line an operator reads: who it was about, what moved, and for lag, whose
        lag and how far past the bound."""
        about = "; ".join(
            f"{reason} {', '.join(names)}" for reason, names in self.about.items() if names
        )
        head = (
            f"{','.join(self.reasons)}{f' ({about})' if about else ''}: "
            f"{self.changed_members} member(s) changed, moved {self.reassigned()}"
        )
        freed = sum(self.freed.values())
        if freed and self.moved:
            head += f" ({freed} from departed members)"
        if self.moved_for_rack:
            head += f" ({self.moved_for_rack} onto a replica's rack)"
        t = self.lag_trigger
        if not self.moved_for_lag or t is None:
            return head
        cause = (
            f"for lag: {t.member} was {t.lag / t.bound:.1f}x the bound "
            f"(lag {t.lag}, best possible largest {t.bound:.0f})"
        )
        if self.moved == self.moved_for_lag:
            return f"{head} {cause}"
        return f"{head}, {self.moved_for_lag} of them {cause}"


class _Readings(NamedTuple):
    """Queued lag readings (None: forget the partition): an iterator over the readings as
    handed over, how many it has left, and when they arrived."""

    items: Iterator[tuple[TopicPartition, int | None]]
    left: int
    at: float


class _Declared(NamedTuple):
    """What a member declares about itself beside its topics."""

    rack: str | None
    capacity: float


def _weight(capacity: float | None) -> float:
    return 1.0 if capacity is None else capacity


def effective_constraints(configured: ConstraintSet, overrides: ConstraintSet) -> ConstraintSet:
    """The overrides laid over the config, checked as the engine will take them."""
    effective = configured.over(overrides)
    check_constraints(effective.pinned(), effective.max_partitions)
    return effective


class RejectedError(ValueError):
    """A presence message that is well-formed but inconsistent with what we granted."""


@dataclass(frozen=True, slots=True)
class Recovered:
    generation: int
    controller_epoch: int
    granted: Mapping[str, frozenset[TopicPartition]]
    topics: Mapping[str, frozenset[str]]
    #: Handoffs in flight when the previous controller stopped: partition -> (owner, gen).
    releasing: Mapping[TopicPartition, tuple[str, int]] = field(default_factory=dict)
    #: Members recorded as absent, and since when (state clock): their grace goes on.
    absent: Mapping[str, float] = field(default_factory=dict)
    #: The client process each member's grant was issued to.
    instances: Mapping[str, str] = field(default_factory=dict)
    #: Members whose record on the log claims more than ``granted`` gives them: their
    #: record is written again at once.
    stale: frozenset[str] = frozenset()

    def tags(self) -> dict[str, Tags]:
        return {m: Tags(self.absent.get(m), self.instances.get(m)) for m in self.granted}

    @classmethod
    def from_records(
        cls,
        records: Mapping[str, tuple[Order, Assignment | None]],
        generation: int,
        epoch: int,
        to_state_clock: Callable[[float], float],
    ) -> tuple[Recovered, list[str]]:
        """The state the current records show (``fencing.AssignmentView``), made
        consistent whatever they hold: a partition claimed by two members stays with the
        newer record (by epoch, then generation), and the loser's record is rewritten.
        Returns the state and one line per conflict resolved."""
        newest_first = sorted(
            ((order, m, rec) for m, (order, rec) in records.items() if rec is not None),
            key=lambda e: (e[0], e[1]),
            reverse=True,
        )
        owner: dict[TopicPartition, str] = {}
        granted: dict[str, frozenset[TopicPartition]] = {}
        topics: dict[str, frozenset[str]] = {}
        absent: dict[str, float] = {}
        instances: dict[str, str] = {}
        stale: set[str] = set()
        notes: list[str] = []
        for _, member, rec in newest_first:
            keep = set()
            for tp in sorted(rec.held()):
                if tp in owner:
                    stale.add(member)
                    notes.append(
                        f"{tp.topic}-{tp.partition}: {member} (generation {rec.generation}) "
                        f"and {owner[tp]} both hold it; the newer record, {owner[tp]}'s, keeps it"
                    )
                    continue
                owner[tp] = member
                keep.add(tp)
            granted[member] = frozenset(keep)
            topics[member] = frozenset(rec.topics)
            if rec.absent_since is not None:
                absent[member] = to_state_clock(rec.absent_since)
            if rec.instance is not None:
                instances[member] = rec.instance
        releasing: dict[TopicPartition, tuple[str, int]] = {}
        for _, member, rec in newest_first:
            for tp in sorted(rec.releasing()):
                if tp not in owner and tp not in releasing:
                    releasing[tp] = (member, rec.generation)
        state = cls(
            generation, epoch, granted, topics, releasing, absent, instances, frozenset(stale)
        )
        return state, notes


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
    ) -> None:
        """``capacities``: what recovered members declare, from the presence heard so
        far; the predecessor balanced with them, so the rebuild keeps its assignment.
        ``configured`` and ``overrides``: the operator's constraints from the config and
        from the admin API (the constraints topic); the latter win entry by entry."""
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
        #: member -> when it is declared gone unless it comes back. A recovered member
        #: is absent until its presence is heard; since when is kept in its record, so
        #: a takeover does not restart the clock.
        self.grace: Deadlines[str] = Deadlines()
        #: member -> when it was last seen, written into its record at the time held in
        #: ``_record_at``. A short absence (a rolling restart) ends before it is recorded
        #: and costs no record.
        self._unrecorded: dict[str, float] = {}
        self._record_at: Deadlines[str] = Deadlines()
        recorded_absence = recovered.absent if recovered else {}
        for m in granted:
            since = min(now, recorded_absence.get(m, now))
            self.grace.set(m, since + tuning.leave_grace)
            if m not in recorded_absence:
                self._absent(m, since, now)
        self.lag: dict[TopicPartition, float] = {}
        #: Readings not yet absorbed, oldest first.
        self._lag_inbox: deque[_Readings] = deque()
        self._lag_queued = 0
        self._pending: list[Event] = []
        self._coalesced: dict[str, frozenset[str] | None] = {}
        #: A member's rack and capacity as they will be once the queued events are applied.
        self._declared_queued: dict[str, _Declared] = {}
        #: Replica racks last read from topic metadata (partitions with none are absent).
        self.replica_racks: dict[TopicPartition, frozenset[str]] = {}
        self._reasons: set[str] = set()
        #: Members each queued reason is about, in order (see ``Rebalance.about``).
        self._about: dict[str, list[str]] = {}
        #: How each member with a queued ``MemberLeft`` went (a ``DEPARTURES`` reason).
        self._departing: dict[str, str] = {}
        self._due: float | None = None
        self._first_event: float | None = None
        #: Time the last tick's reconciliation took (``Reconciler.plan``).
        self.plan_seconds = 0.0

    # ------------------------------------------------------------------ observations

    def on_presence(self, p: Presence, now: float) -> None:
        """A member announced itself. Raises ``RejectedError`` when its claims are impossible."""
        if p.group != self.name:
            raise RejectedError(f"presence for group {p.group!r} arrived on group {self.name!r}")
        claimed = p.held()
        granted = self.reconciler.granted.get(p.member, frozenset())
        stray = claimed - granted - self.reconciler.releasing_from(p.member)
        if stray:
            shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(stray)[:5])
            raise RejectedError(
                f"member {p.member!r} claims partitions it does not hold (never granted, or "
                f"given away after it was declared dead): {shown}"
            )
        live = self.presence.get(p.member)
        if live is not None and live.instance and p.instance and live.instance != p.instance:
            raise RejectedError(
                f"duplicate member id {p.member!r}: instance {p.instance!r} while "
                f"{live.instance!r} is live"
            )
        if p.state == "leaving":
            self.presence.pop(p.member, None)
            self.heard.pop(p.member, None)
            self.reconciler.ack(p.member, p.generation)
            self._depart(p.member, now, "leave")
            return
        topics = frozenset(p.topics)
        known = self._subscription(p.member)
        self.presence[p.member] = p
        self.heard[p.member] = now
        self.grace.pop(p.member)
        self._present(p.member)
        self.reconciler.mark_present(p.member, p.instance)
        if p.member in self.drained:
            self.reconciler.ack(p.member, p.generation)
            return
        rack = self.rack_for(p.member, p.rack)
        declared = _Declared(rack, _weight(p.capacity))
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
        if not self._known(member):
            self._retire(member)
            return
        seen = now if since is None else min(since, now)
        if self.tuning.leave_grace <= 0:
            self._depart(member, now, "crash")
        elif member not in self.grace:
            self.grace.set(member, seen + self.tuning.leave_grace)
            self._absent(member, seen, now)

    def seen_absent(self, member: str, since: float) -> None:
        """Another source (this replica's own MQTT session) saw a recovered member leave
        at ``since``: its grace counts from there."""
        deadline = self.grace.get(member)
        if deadline is not None and member not in self.presence:
            self.grace.set(member, min(deadline, since + self.tuning.leave_grace))
            if member in self._unrecorded:
                self._unrecorded[member] = since

    def lag_queued(self) -> bool:
        """Lag readings wait to be absorbed (``lag_batch`` a tick)."""
        return bool(self._lag_inbox)

    def on_lag(self, readings: dict[TopicPartition, int], now: float) -> None:
        """New lag readings, absorbed by the next ticks (``lag_batch`` a tick). The dict is
        handed over, not copied (a poll of a million partitions is ~10 ms of copying):
        the caller builds it for this call and does not touch it afterwards."""
        self._queue_lag(readings, now)

    def forget_lag(self, partitions: Iterable[TopicPartition], now: float) -> None:
        """A partition that stopped reporting weighs 0 again, like one never reported."""
        self._queue_lag({tp: None for tp in partitions}, now)

    def _queue_lag(self, readings: Mapping[TopicPartition, int | None], now: float) -> None:
        """Queue the readings as handed over: O(1), nothing smoothed yet."""
        if not readings:
            return
        inbox = self._lag_inbox
        inbox.append(_Readings(iter(readings.items()), len(readings), now))
        self._lag_queued += len(readings)
        limit = 2 * sum(self.engine.partitions_per_topic.values()) + self.tuning.lag_batch
        if self._lag_queued > limit:
            # Readings come faster than ticks absorb them (or the group is paused): only
            # the latest of each partition matters. Amortized O(1) a reading.
            oldest = inbox[0].at
            latest = dict(chain.from_iterable(r.items for r in inbox))
            inbox.clear()
            inbox.append(_Readings(iter(latest.items()), len(latest), oldest))
            self._lag_queued = len(latest)

    def _absorb_lag(self) -> tuple[LagUpdated, float] | None:
        """Up to ``lag_batch`` queued readings, smoothed so that one noisy reading cannot
        trigger moves, as one event for the engine, with when the oldest arrived."""
        inbox = self._lag_inbox
        if not inbox:
            return None
        # The step's first event: when the oldest reading it absorbs arrived (the
        # readings queued behind it count from their own arrival, in later steps).
        since = inbox[0].at
        budget = self.tuning.lag_batch
        alpha = self.tuning.lag_smoothing
        keep = 1 - alpha
        lag = self.lag
        update: dict[TopicPartition, int] = {}
        while inbox and budget > 0:
            first = inbox[0]
            take = min(budget, first.left)
            if take == first.left:
                inbox.popleft()
            else:
                inbox[0] = first._replace(left=first.left - take)
            budget -= take
            self._lag_queued -= take
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
        if not update:
            return None
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
        return self._due is None and self.reconciler.settled()

    def next_wakeup(self) -> float | None:
        if self.paused:
            return None
        times = (
            self._due,
            self._lag_inbox[0].at if self._lag_inbox else None,
            self.reconciler.next_deadline(),
            self.grace.earliest(),
            self._record_at.earliest(),
        )
        return min((t for t in times if t is not None), default=None)

    def tick(self, now: float) -> tuple[Rebalance | None, Plan | None]:
        """Run what is due: expired graces, a coalesced rebalance, and handoff progress.
        A paused group does none of it (events wait for ``paused = False``)."""
        if self.paused:
            return None, None
        for member, _ in self._record_at.due(now):
            self.reconciler.mark_absent(member, self._unrecorded.pop(member))
        for member, deadline in self.grace.due(now):
            self._present(member)
            self._depart(member, deadline, "crash")
        rebalance = None
        if self._due is not None and self._due <= now:
            # A membership (or operator, metadata) step carries no lag batch: queued
            # readings wait for the next step, the change does not wait for them.
            first = self._first_event if self._first_event is not None else now
            reasons = tuple(r for r in REASONS if r in self._reasons)
            rebalance = self._step(self._pending, reasons, first, self._due, now)
            self._pending, self._reasons, self._due, self._first_event = [], set(), None, None
            self._about, self._departing = {}, {}
            self._coalesced = {}
            self._declared_queued = {}
        elif (absorbed := self._absorb_lag()) is not None:
            # Its own step, due at once; events still coalescing stay queued until their
            # delay ends (a lag batch does not cut a burst of joins in two).
            event, since = absorbed
            rebalance = self._step([event], ("lag",), since, since, now)
            if not rebalance.changed_members:
                rebalance = None  # a lag reading that moved nothing is not a rebalance
        started = time.perf_counter()
        plan = self.reconciler.plan(now)
        self.plan_seconds = time.perf_counter() - started
        return rebalance, plan

    # ------------------------------------------------------------------ internals

    def _step(
        self, events: list[Event], reasons: tuple[str, ...], first: float, due: float, now: float
    ) -> Rebalance:
        freed: dict[str, int] = {}
        for e in events:
            if not isinstance(e, MemberLeft) or self.engine.topics_of(e.member) is None:
                continue
            how = self._departing.get(e.member, "leave")
            freed[how] = freed.get(how, 0) + len(self.engine.partitions_of(e.member))
        about = {r: tuple(ms) for r, ms in self._about.items() if r in reasons}
        cooling = not self.cooldown.allows(now)
        if cooling:  # readings and membership apply; only lag moves wait
            self.engine.policy = self._still
        started = time.perf_counter()
        try:
            change = self.engine.apply(events)
        finally:
            self.engine.policy = self.tuning.policy
        assign_seconds = time.perf_counter() - started
        trigger = change.lag_trigger
        if change.moved_for_lag and trigger is not None:
            self.cooldown.moved(now, trigger.member, trigger.lag)
        # A drained member left the engine but still runs and reads: its partitions are
        # revoked like any move (granted elsewhere only once it acknowledged), not
        # tombstoned like a dead member's, which are granted at once.
        draining = change.removed & self.drained
        targets = {**change.assignments, **dict.fromkeys(draining, ())}
        self.reconciler.update_target(targets, change.removed - draining, change.deltas)
        return Rebalance(
            reasons=reasons,
            moved=change.moved,
            moved_for_lag=change.moved_for_lag,
            moved_for_rack=change.moved_for_rack,
            changed_members=len(change.assignments) + len(change.removed),
            first_event_at=first,
            due_at=due,
            assign_seconds=assign_seconds,
            lag_trigger=change.lag_trigger,
            freed=freed,
            about=about,
        )

    def _absent(self, member: str, since: float, now: float) -> None:
        self._unrecorded[member] = since
        self._record_at.set(member, now + self.tuning.leave_grace / 2)

    def _present(self, member: str) -> None:
        """No absence of ``member`` is waiting to be recorded any more."""
        self._unrecorded.pop(member, None)
        self._record_at.pop(member)

    def _depart(self, member: str, now: float, how: str) -> None:
        """``how``: a clean ``leave``, or a ``crash`` (presence lost, grace over)."""
        self.grace.pop(member)
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

    def _declared(self, member: str) -> _Declared:
        if member in self._declared_queued:
            return self._declared_queued[member]
        return _Declared(self.engine.rack_of(member), _weight(self.engine.capacity_of(member)))

    def _subscription(self, member: str) -> frozenset[str] | None:
        """The member's topics as they will be once the coalesced events are applied."""
        if member in self._coalesced:
            return self._coalesced[member]
        return self.engine.topics_of(member)

    def _enqueue(self, event: Event, reason: str, now: float, delay: float | None = None) -> None:
        self._pending.append(event)
        if self.recorder is not None:
            self.recorder(event, now)
        if isinstance(event, MemberJoined | SubscriptionChanged):
            self._coalesced[event.member] = frozenset(event.topics)
            if isinstance(event, MemberJoined):
                self._declared_queued[event.member] = _Declared(event.rack, _weight(event.capacity))
        elif isinstance(event, MemberLeft):
            self._coalesced[event.member] = None
            self._declared_queued[event.member] = _Declared(None, 1.0)
            self._departing[event.member] = reason
        member = getattr(event, "member", None)
        if isinstance(member, str):
            named = self._about.setdefault(reason, [])
            if len(named) < ABOUT_SHOWN and member not in named:
                named.append(member)
        self._reasons.add(reason)
        if self._first_event is None:
            self._first_event = now
        due = now + (self.tuning.rebalance_delay if delay is None else delay)
        if delay is None and isinstance(event, MemberJoined) and not self.engine.member_count():
            latest = self._first_event + max(self.tuning.initial_delay, self.tuning.rebalance_delay)
            self._due = min(due if self._due is None else max(due, self._due), latest)
        elif self._due is None or due < self._due:
            self._due = due
