"""A takeover's state: what the records on the assignments topic show, made consistent
(``Recovered``), and the group rebuilt from it with what the replica heard meanwhile
(``rebuilt``). Pure: the runtime reads the records and the topics' metadata and hands
them over."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from assignors import TopicPartition
from controller.core.group import GroupState, RejectedError
from controller.core.handoff import Tags
from controller.core.rebalance import GroupTuning
from controller.wire.fencing import Order
from controller.wire.records import Assignment, ConstraintSet, ConstraintsRecord, Presence


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


def rebuilt(
    name: str,
    tuning: GroupTuning,
    recovered: Recovered,
    counts: Mapping[str, int],
    racks: Mapping[TopicPartition, frozenset[str]],
    *,
    now: float,
    heard: Mapping[str, Presence],
    last_seen: Mapping[str, float],
    configured: ConstraintSet,
    overrides: ConstraintsRecord | None,
    signing_key: str | None = None,
) -> GroupState:
    """The group a takeover leads: rebuilt from ``recovered`` on the topics' partition
    counts and replica racks, under the config's constraints and the constraints topic's
    ``overrides`` (paused, drained as operators left them), then given the presence the
    replica ``heard`` of every member and when it saw members leave (``last_seen``), so
    graces go on from there rather than from the takeover. ``signing_key``: the id of
    the key the group's records are signed with (None: unsigned)."""
    state = GroupState(
        name,
        tuning,
        counts,
        recovered,
        now,
        capacities={m: p.capacity for m, p in heard.items()},
        configured=configured,
        overrides=overrides.constraints if overrides else None,
        signing_key=signing_key,
    )
    if overrides is not None:  # what operators did, whether or not it took effect
        state.paused = overrides.paused
        for member in overrides.drained:
            if not state.drain(member, now):
                state.drained.add(member)  # not here yet: kept empty when it comes
    state.adopt_racks({m: state.rack_for(m, p.rack) for m, p in heard.items()}, racks)
    for p in heard.values():
        with contextlib.suppress(RejectedError):
            state.on_presence(p, now)
    for member, since in last_seen.items():
        state.seen_absent(member, since)
    return state
