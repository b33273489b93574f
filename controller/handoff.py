"""Revoke-before-grant reconciliation (the KIP-429/KIP-848 rule), as a pure state machine.

The assignor says where partitions *should* be (the target). What a member may consume
is what its latest published record grants. A partition leaving member A is first
dropped from A's record (generation g). It is granted to its new owner only once A
reports having applied g, A is gone, or ``handoff_timeout`` passed (A is then declared
dead). So no partition is ever granted to two members at once (design invariant 1).

``plan()`` computes the records to publish without changing the granted state;
``commit()`` makes a plan the granted state. The daemon commits a plan just before
publishing it and retries publication until it lands, so no member ever sees a record the
controller has not committed. The I/O around it is in ``controller.daemon``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from assignors import TopicPartition


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


@dataclass(slots=True)
class Plan:
    generation: int
    records: list[Outgoing]
    releases: dict[TopicPartition, Release] = field(default_factory=dict)


class Reconciler:
    def __init__(
        self,
        *,
        handoff_timeout: float,
        generation: int = 0,
        granted: Mapping[str, Collection[TopicPartition]] | None = None,
        releasing: Mapping[TopicPartition, tuple[str, int]] | None = None,
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
        self.acked: dict[str, int] = {}
        self.releasing: dict[TopicPartition, Release] = {
            tp: Release(m, gen, now + handoff_timeout)
            for tp, (m, gen) in (releasing or {}).items()
            if tp not in self.owner
        }
        self.timed_out: list[Release] = []
        self._dirty: set[str] = set()
        self._departed: set[str] = set()
        self._waiting: dict[TopicPartition, str] = {}

    # ------------------------------------------------------------------ inputs

    def update_target(
        self, assignments: Mapping[str, Collection[TopicPartition]], removed: Iterable[str] = ()
    ) -> None:
        """Only the members whose target changed; ``removed`` left the group."""
        for m, parts in assignments.items():
            self.target[m] = frozenset(parts)
            self._dirty.add(m)
            self._departed.discard(m)
        for m in removed:
            self.target.pop(m, None)
            self._dirty.discard(m)
            if m in self.granted:
                self._departed.add(m)

    def ack(self, member: str, generation: int) -> None:
        if generation > self.acked.get(member, -1):
            self.acked[member] = generation

    # ------------------------------------------------------------------ planning

    def plan(self, now: float) -> Plan | None:
        self._free_releases(now)
        gen = self.generation + 1
        records: list[Outgoing] = []
        owner = dict(self.owner)
        for m in sorted(self._departed):
            records.append(Outgoing(m, None))
            for tp in self.granted.get(m, ()):
                del owner[tp]
                self._wake(tp)
        releases: dict[TopicPartition, Release] = {}
        for m in sorted(self._dirty):
            want = self.target.get(m)
            if want is None:
                continue
            have = self.granted.get(m)
            held = have or frozenset()
            new = set(held & want)
            for tp in want - held:
                if owner.get(tp) is None and tp not in self.releasing and tp not in releases:
                    new.add(tp)
                    owner[tp] = m
                else:
                    self._waiting[tp] = m
            grant = frozenset(new)
            if grant != have:
                for tp in held - grant:
                    releases[tp] = Release(m, gen, now + self.handoff_timeout)
                    del owner[tp]
                pending = {tp for tp, r in self.releasing.items() if r.member == m}
                pending |= {tp for tp, r in releases.items() if r.member == m}
                records.append(Outgoing(m, grant, frozenset(pending)))
        if not records:
            self._dirty.clear()
            return None
        return Plan(gen, records, releases)

    def commit(self, plan: Plan) -> None:
        """Make the plan the granted state (its records are being published)."""
        for rec in plan.records:
            old = self.granted.get(rec.member, frozenset())
            for tp in old:
                if self.owner.get(tp) == rec.member:
                    del self.owner[tp]
            if rec.partitions is None:
                self.granted.pop(rec.member, None)
                self._departed.discard(rec.member)
                self.acked.pop(rec.member, None)
                continue
            self.granted[rec.member] = rec.partitions
            for tp in rec.partitions:
                self.owner[tp] = rec.member
                if self._waiting.get(tp) == rec.member:
                    del self._waiting[tp]
        self.releasing.update(plan.releases)
        self.generation = plan.generation
        self._dirty = {m for m in self._dirty if self.granted.get(m) != self.target.get(m)}

    # ------------------------------------------------------------------ time and state

    def next_deadline(self) -> float | None:
        return min((r.deadline for r in self.releasing.values()), default=None)

    def pending(self) -> bool:
        return bool(self._dirty or self._departed)

    def revoking(self) -> int:
        return len(self.releasing)

    def holders(self, tp: TopicPartition) -> list[str]:
        """Members that may be consuming ``tp`` now (granted, or not yet confirmed released)."""
        out = [m for m, parts in self.granted.items() if tp in parts]
        rel = self.releasing.get(tp)
        if rel is not None and rel.member not in out:
            out.append(rel.member)
        return out

    def _free_releases(self, now: float) -> None:
        for tp, rel in list(self.releasing.items()):
            gone = rel.member not in self.granted or rel.member in self._departed
            if self.acked.get(rel.member, -1) >= rel.generation or gone or now >= rel.deadline:
                if (
                    not gone
                    and now >= rel.deadline
                    and self.acked.get(rel.member, -1) < rel.generation
                ):
                    self.timed_out.append(rel)
                del self.releasing[tp]
                self._wake(tp)

    def _wake(self, tp: TopicPartition) -> None:
        waiter = self._waiting.pop(tp, None)
        if waiter is not None:
            self._dirty.add(waiter)
