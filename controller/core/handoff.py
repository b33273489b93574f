"""Revoke-before-grant reconciliation (the KIP-429/KIP-848 rule), as a pure state machine.

The assignor says where partitions *should* be (the target). What a member may consume
is what its latest published record grants. A partition leaving member A is first
dropped from A's record (generation g). It is granted to its new owner only once A
reports having applied g, A is gone, or ``handoff_timeout`` passed (A is then declared
dead). So no partition is ever granted to two members at once (design invariant 1).

``plan()`` computes the records to publish without changing the granted state;
``commit()`` makes a plan the granted state. The daemon commits a plan just before
publishing it and retries publication until it lands, so no member ever sees a record the
controller has not committed. The I/O around it is in ``controller.runtime.group_loop``.

A plan depends only on plans published before it, never on its own records: what a
departed member held is granted by the plan after its tombstone, like a revoke. Any
subset of one publication's records is therefore safe to act on, which is what makes a
deposed leader's half-landed publication harmless (docs/fencing.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from assignors import Delta, TopicPartition
from controller.wire.records import MAX_COUNTER


@dataclass(frozen=True, slots=True)
class Release:
    member: str
    generation: int
    deadline: float


@dataclass(frozen=True, slots=True)
class Outgoing:
    member: str
    #: The member's complete grant; ``None`` is a tombstone (the member left).
    partitions: frozenset[TopicPartition] | None
    #: What the member still has to release (persisted so a restart can resume handoffs).
    revoking: frozenset[TopicPartition] = frozenset()
    #: When the member's presence was lost (state clock), while it is in leave grace.
    absent_since: float | None = None
    #: The client process the grant is issued to (``Assignment.instance``).
    instance: str | None = None
    #: ``partitions`` in order, when the grant is the target as the assignor listed it:
    #: encoding then skips sorting it again (most of a mass change's encoding time). Not
    #: part of the record's identity: ``partitions`` says the same.
    listed: Sequence[TopicPartition] | None = field(default=None, compare=False)


class Tags(NamedTuple):
    """What a member's record says besides its grant; a change is written at once."""

    absent_since: float | None = None
    instance: str | None = None


_UNTAGGED = Tags()
_NOTHING: frozenset[TopicPartition] = frozenset()


class Edit(NamedTuple):
    """What a plan's record changes in its member's grant."""

    #: The grant the plan started from: the commit uses the edit only while it stands.
    grant: frozenset[TopicPartition] | None
    added: Collection[TopicPartition]
    dropped: Collection[TopicPartition]


@dataclass(slots=True)
class Plan:
    generation: int
    records: list[Outgoing]
    releases: dict[TopicPartition, Release] = field(default_factory=dict)
    #: member -> what its record changes: the commit applies these instead of comparing
    #: whole grants.
    edits: dict[str, Edit] = field(default_factory=dict)
    #: Members planned that only wait (every partition they gain is still held or being
    #: released, and they lose nothing): the commit parks them until ``_wake``.
    idle: list[str] = field(default_factory=list)
    #: When it was planned (revokes time out from here).
    at: float = 0.0


class Reconciler:
    def __init__(
        self,
        *,
        handoff_timeout: float,
        generation: int = 0,
        granted: Mapping[str, Collection[TopicPartition]] | None = None,
        releasing: Mapping[TopicPartition, tuple[str, int]] | None = None,
        tags: Mapping[str, Tags] | None = None,
        now: float = 0.0,
    ) -> None:
        self.handoff_timeout = handoff_timeout
        self.generation = generation
        self.granted: dict[str, frozenset[TopicPartition]] = {
            m: frozenset(v) for m, v in (granted or {}).items()
        }
        self.owner: dict[TopicPartition, str] = {
            tp: m for m, parts in self.granted.items() for tp in parts
        }
        self.target: dict[str, frozenset[TopicPartition]] = dict(self.granted)
        #: Each target as ``update_target`` was given it: sorted.
        self._listed: dict[str, Sequence[TopicPartition]] = {}
        #: member -> (the target a ``Delta`` was applied to, the delta), until the next
        #: commit: a plan of a member whose grant is still that target takes its gains
        #: and losses from the delta instead of comparing whole sets.
        self._moved: dict[str, tuple[frozenset[TopicPartition], Delta]] = {}
        self.acked: dict[str, int] = {}
        #: The generation of each member's latest record written by this controller: a
        #: member has applied its grant once it acknowledged that one (a member whose
        #: record a plan left alone has nothing to acknowledge).
        self.written: dict[str, int] = {}
        self.releasing: dict[TopicPartition, Release] = {}
        #: member -> partitions it is releasing; deadline -> partitions released by then,
        #: the deadlines in a lazy min-heap. Acks and plans then cost what they touch, not
        #: the number of handoffs in flight; a plan's revokes share one deadline, so a
        #: scale-out's 50 000 take one heap entry, not 50 000 ordered by partition.
        self._releasing_of: dict[str, set[TopicPartition]] = {}
        self._due: dict[float, set[TopicPartition]] = {}
        self._deadlines: list[float] = []
        self._acked_since: set[str] = set()
        for tp, (m, gen) in (releasing or {}).items():
            if tp not in self.owner:
                self._add_release(tp, Release(m, gen, now + handoff_timeout))
        self.timed_out: list[Release] = []
        self._dirty: set[str] = set()
        self._departed: set[str] = set()
        self._waiting: dict[TopicPartition, str] = {}
        #: Members whose record must be written again although their grant is unchanged.
        self._refresh: set[str] = set()
        #: The tags as wanted, and as the member's latest record carries them.
        self.tags: dict[str, Tags] = dict(tags or {})
        self._published_tags: dict[str, Tags] = dict(tags or {})
        self._tags_changed: set[str] = set()
        #: Members whose revokes never time out (``hold_on``), and members corrected
        #: (``correct``) whose revokes time out only once their record is written.
        self._held_on: set[str] = set()
        self._uncorrected: set[str] = set()

    # ------------------------------------------------------------------ inputs

    def update_target(
        self,
        assignments: Mapping[str, Sequence[TopicPartition]],
        removed: Iterable[str] = (),
        deltas: Mapping[str, Delta] | None = None,
    ) -> None:
        """Only the members whose target changed, each a sorted list (as the assignor's
        ``Change`` has them); ``removed`` left the group. ``deltas`` (the same ``Change``'s)
        say how each list differs from the one given before: a target given as a list
        before is then updated at the cost of what moved, instead of hashing the list."""
        for m, parts in assignments.items():
            delta = None if deltas is None else deltas.get(m)
            base = self.target.get(m) if m in self._listed else None
            if delta is None or base is None:
                self.target[m] = frozenset(parts)
                self._moved.pop(m, None)
            else:
                # One copy of the set, not two: most members a step lists only gain
                # (receivers) or only lose (donors).
                if delta.lost:
                    base_less = base.difference(delta.lost)
                    self.target[m] = base_less.union(delta.gained) if delta.gained else base_less
                else:
                    self.target[m] = base.union(delta.gained)
                self._moved[m] = (base, delta)
            self._listed[m] = parts
            self._dirty.add(m)
            self._departed.discard(m)
        for m in removed:
            self.target.pop(m, None)
            self._listed.pop(m, None)
            self._moved.pop(m, None)
            self._dirty.discard(m)
            if m in self.granted:
                self._departed.add(m)

    def refresh(self, member: str) -> None:
        """Write ``member``'s record again in the next plan (e.g. its record on the log
        claims more than it was recovered with)."""
        if member in self.granted:
            self._refresh.add(member)

    def mark_absent(self, member: str, since: float) -> None:
        self._tag(member, self.tags.get(member, _UNTAGGED)._replace(absent_since=since))

    def mark_present(self, member: str, instance: str | None) -> None:
        """The member is back, as client process ``instance``: a grant issued to another
        process is issued again, to this one."""
        self._tag(member, Tags(None, instance))

    def _tag(self, member: str, tags: Tags) -> None:
        """Every presence message re-tags its member: only a difference from the member's
        record is work for the next plan."""
        self.tags[member] = tags
        if tags != self._published_tags.get(member, _UNTAGGED):
            self._tags_changed.add(member)
        else:
            self._tags_changed.discard(member)

    def correct(
        self, member: str, stray: Iterable[TopicPartition], generation: int, now: float
    ) -> None:
        """``member`` reads ``stray`` although no record of ours grants it those (at
        ``generation``, a number of another writer's): what nobody holds is released
        from it like a revoke, so it is granted to no one else before the member
        acknowledges a record of ours; its next record is written in the next plan, at a
        generation above the one it applied (a record below would be stale to it)."""
        self.generation = max(self.generation, min(generation, MAX_COUNTER - 1))
        release = Release(member, self.generation + 1, now + self.handoff_timeout)
        for tp in sorted(stray):
            if tp not in self.owner and tp not in self.releasing:
                self._add_release(tp, release)
        self._uncorrected.add(member)
        if member in self.granted:
            self._refresh.add(member)
        else:
            self._dirty.add(member)  # written as soon as it has a target

    def hold_on(self, member: str) -> None:
        """``member`` lives but cannot read our records (a signing key it lacks): its
        revokes wait for its acknowledgement or its departure, never for a timeout, which
        would give what it still reads to a second member."""
        self._held_on.add(member)

    def let_go(self, member: str, now: float) -> None:
        """``member``'s revokes time out as usual again (gone, or given the key): in
        ``handoff_timeout`` from ``now``."""
        self._held_on.discard(member)
        self._uncorrected.discard(member)
        self._rearm(member, now)

    def _rearm(self, member: str, now: float) -> None:
        """``member``'s revokes time out ``handoff_timeout`` from ``now``."""
        for tp in sorted(self._releasing_of.get(member, ())):
            rel = self.releasing[tp]
            self._add_release(tp, Release(member, rel.generation, now + self.handoff_timeout))

    def ack(self, member: str, generation: int) -> None:
        """``member`` applied its record of ``generation``. One above any we wrote is
        none of ours (another writer's, or made up) and acknowledges nothing."""
        if generation > self.generation:
            return
        if generation > self.acked.get(member, -1):
            self.acked[member] = generation
            if member in self._releasing_of:
                self._acked_since.add(member)

    # ------------------------------------------------------------------ planning

    def plan(self, now: float) -> Plan | None:
        self._free_releases(now)
        gen = self.generation + 1
        records: list[Outgoing] = []
        #: Granted by this plan so far; what it revokes is in ``releases``. Together with
        #: ``self.owner`` they are the owners as this plan leaves them, without a copy.
        taken: dict[TopicPartition, str] = {}
        owner = self.owner
        for m in sorted(self._departed):
            # What it held stays owned until this tombstone is committed (see above).
            records.append(Outgoing(m, None))
        releases: dict[TopicPartition, Release] = {}
        edits: dict[str, Edit] = {}
        idle: list[str] = []
        refresh = self._refresh | {
            m for m in self._tags_changed if m in self.granted and self._tags_differ(m)
        }
        for m in sorted(self._dirty | (refresh - self._departed)):
            have = self.granted.get(m)
            want = self.target.get(m, have if m in refresh else None)
            if want is None:
                continue
            held = have or _NOTHING
            moved = self._moved.get(m)
            if moved is not None and moved[0] is have:
                # Granted what it was to have: the target's delta is the difference.
                gain, lose = moved[1].gained, moved[1].lost
            else:  # two passes over the member's partitions
                gain, lose = want - held, held - want
            got: list[TopicPartition] = []
            for tp in gain:
                if (
                    tp not in taken
                    and owner.get(tp) is None
                    and tp not in self.releasing
                    and tp not in releases
                ):
                    got.append(tp)
                    taken[tp] = m
                else:
                    self._waiting[tp] = m
            if have is None or lose or got or m in refresh:
                grant = want if len(got) == len(gain) else (held & want).union(got)
                release = Release(m, gen, now + self.handoff_timeout)  # shared by its revokes
                for tp in lose:
                    releases[tp] = release
                pending = set(self._releasing_of.get(m, ())) | lose
                tags = self.tags.get(m, _UNTAGGED)
                listed = self._listed.get(m) if grant is want else None
                edits[m] = Edit(have, got, lose)
                records.append(
                    Outgoing(m, grant, frozenset(pending), tags.absent_since, tags.instance, listed)
                )
            else:
                idle.append(m)
        if not records:
            # Every planned member waits: each is in ``_waiting`` for what it gains, and
            # is planned again when one of those partitions is freed (``_wake``).
            self._dirty.clear()
            return None
        return Plan(gen, records, releases, edits, idle, now)

    def commit(self, plan: Plan) -> None:
        """Make the plan the granted state (its records are being published)."""
        # Members that only wait are planned again when what they wait for is freed
        # (``_wake``, below or later), not on every plan: a wave of receivers waiting
        # for departed members' tombstones or for revokes costs nothing per tick.
        self._dirty.difference_update(plan.idle)
        owner = self.owner
        for rec in plan.records:
            have = self.granted.get(rec.member)
            old = have or _NOTHING
            # Only what changed: a record carries the whole grant, but most of it stays.
            edit = plan.edits.get(rec.member)
            added: Collection[TopicPartition]
            dropped: Collection[TopicPartition]
            if rec.partitions is None:
                added, dropped = _NOTHING, old
            elif edit is not None and edit.grant is have:
                added, dropped = edit.added, edit.dropped
            else:
                added, dropped = rec.partitions - old, old - rec.partitions
            for tp in dropped:
                if owner.get(tp) == rec.member:
                    del owner[tp]
            self._refresh.discard(rec.member)
            if rec.partitions is None:
                self.granted.pop(rec.member, None)
                self._departed.discard(rec.member)
                self.acked.pop(rec.member, None)
                self.written.pop(rec.member, None)
                self.tags.pop(rec.member, None)
                self._published_tags.pop(rec.member, None)
                self._held_on.discard(rec.member)
                self._uncorrected.discard(rec.member)
                for tp in sorted(old):
                    self._wake(tp)  # free now: the next plan grants it
                for tp in sorted(self._releasing_of.get(rec.member, ())):
                    self._drop_release(tp)  # it is gone: nothing of its is held any more
                continue
            if rec.member in self._uncorrected:  # written: its revokes time out from now
                self._uncorrected.discard(rec.member)
                self._rearm(rec.member, plan.at)
            self._published_tags[rec.member] = Tags(rec.absent_since, rec.instance)
            self.granted[rec.member] = rec.partitions
            self.written[rec.member] = plan.generation
            waiting = self._waiting
            for tp in added:
                owner[tp] = rec.member
                if waiting.get(tp) == rec.member:
                    del waiting[tp]
        for tp, rel in plan.releases.items():
            self._add_release(tp, rel)
        self.generation = plan.generation
        self._moved.clear()
        self._dirty = {m for m in self._dirty if not self._granted_its_target(m)}
        self._tags_changed = {m for m in self._tags_changed if self._tags_differ(m)}

    # ------------------------------------------------------------------ time and state

    def next_deadline(self) -> float | None:
        heap = self._deadlines
        while heap and heap[0] not in self._due:
            heapq.heappop(heap)  # everything due then was released or re-timed since
        return heap[0] if heap else None

    def settled(self) -> bool:
        """Every grant is its target and no handoff is in flight."""
        return not (self._dirty or self.releasing or self._departed or self._refresh)

    def revoking(self) -> int:
        return len(self.releasing)

    def _granted_its_target(self, member: str) -> bool:
        granted, target = self.granted.get(member), self.target.get(member)
        return granted is target or granted == target

    def _tags_differ(self, member: str) -> bool:
        return self.tags.get(member, _UNTAGGED) != self._published_tags.get(member, _UNTAGGED)

    def releasing_from(self, member: str) -> frozenset[TopicPartition]:
        return frozenset(self._releasing_of.get(member, ()))

    def holders(self, tp: TopicPartition) -> list[str]:
        """Members that may be consuming ``tp`` now (granted, or not yet confirmed released)."""
        out = [m for m, parts in self.granted.items() if tp in parts]
        rel = self.releasing.get(tp)
        if rel is not None and rel.member not in out:
            out.append(rel.member)
        return out

    def _add_release(self, tp: TopicPartition, rel: Release) -> None:
        was = self.releasing.get(tp)
        if was is not None:
            self._not_due(tp, was.deadline)
        self.releasing[tp] = rel
        self._releasing_of.setdefault(rel.member, set()).add(tp)
        due = self._due.get(rel.deadline)
        if due is None:
            due = self._due[rel.deadline] = set()
            heapq.heappush(self._deadlines, rel.deadline)
        due.add(tp)

    def _not_due(self, tp: TopicPartition, deadline: float) -> None:
        due = self._due.get(deadline)
        if due is not None:
            due.discard(tp)
            if not due:
                del self._due[deadline]  # its heap entry is now stale

    def _drop_release(self, tp: TopicPartition) -> None:
        rel = self.releasing.pop(tp)
        self._not_due(tp, rel.deadline)
        mine = self._releasing_of[rel.member]
        mine.discard(tp)
        if not mine:
            del self._releasing_of[rel.member]
        self._wake(tp)

    def _free_releases(self, now: float) -> None:
        """Free what acked or departed members released, and what timed out."""
        for m in sorted(self._acked_since | self._departed):
            # A member corrected before any record of ours (``correct``) is not granted
            # yet, and not gone: what it reads stays released from it.
            gone = m in self._departed or (m not in self.granted and m not in self._uncorrected)
            for tp in list(self._releasing_of.get(m, ())):  # dropped as we go
                if gone or self.acked.get(m, -1) >= self.releasing[tp].generation:
                    self._drop_release(tp)
        self._acked_since.clear()
        while self._deadlines and self._deadlines[0] <= now:
            for tp in sorted(self._due.pop(heapq.heappop(self._deadlines), ())):
                rel = self.releasing[tp]
                if rel.member in self._held_on or rel.member in self._uncorrected:
                    self._add_release(
                        tp, Release(rel.member, rel.generation, now + self.handoff_timeout)
                    )
                    continue
                self.timed_out.append(rel)
                self._drop_release(tp)

    def _wake(self, tp: TopicPartition) -> None:
        waiter = self._waiting.pop(tp, None)
        if waiter is not None:
            self._dirty.add(waiter)
