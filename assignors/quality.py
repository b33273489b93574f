"""How good an assignment is: validity, KIP-54 balance, movement, lag skew."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .spec import build_spec
from .types import (
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
)

Held = Mapping[str, list[TopicPartition]] | CurrentAssignment


class Quality(NamedTuple):
    valid: bool
    balanced: bool
    #: max - min partitions per member.
    count_spread: int
    moved: int
    max_member_lag: int
    #: largest member lag / mean member lag (1.0 when there is no lag).
    lag_skew: float


def problems(
    assignment: Held, partitions_per_topic: PartitionsPerTopic, subscriptions: Subscriptions
) -> list[str]:
    """Everything that makes ``assignment`` invalid, as readable sentences (empty if valid)."""
    spec = build_spec(partitions_per_topic, subscriptions)
    out: list[str] = []
    owner: dict[TopicPartition, str] = {}
    for member in spec.members:
        if member not in assignment:
            out.append(f"member {member!r} is missing from the assignment")
    for member in sorted(assignment):
        if member not in spec.topics_of:
            out.append(f"{member!r} is not a member of the group")
            continue
        for raw in assignment[member]:
            tp = TopicPartition(*raw)
            if not 0 <= tp.partition < spec.partitions_per_topic.get(tp.topic, 0):
                out.append(f"{member!r} holds {tp}, which does not exist")
            elif tp.topic not in spec.topics_of[member]:
                out.append(f"{member!r} holds {tp} but is not subscribed to {tp.topic!r}")
            if tp in owner:
                out.append(f"{tp} is held by both {owner[tp]!r} and {member!r}")
            owner[tp] = member
    for topic in spec.topics:
        for tp in spec.partitions(topic):
            if tp not in owner:
                out.append(f"{tp} has subscribers but no owner")
    return out


def is_balanced(assignment: Held, subscriptions: Subscriptions) -> bool:
    """KIP-54: counts differ by at most one, or no member with 2+ more partitions than
    another holds a partition that other member could take."""
    return not imbalances(assignment, subscriptions)


def imbalances(assignment: Held, subscriptions: Subscriptions) -> list[tuple[str, str, str]]:
    """(bigger member, smaller member, topic) triples that violate KIP-54 balance."""
    counts = {m: len(assignment.get(m, ())) for m in subscriptions}
    if not counts or max(counts.values()) - min(counts.values()) <= 1:
        return []
    least: dict[str, tuple[int, str]] = {}
    for member in sorted(subscriptions):
        for topic in subscriptions[member]:
            cand = (counts[member], member)
            if topic not in least or cand < least[topic]:
                least[topic] = cand
    out: list[tuple[str, str, str]] = []
    for member in sorted(assignment):
        if member not in counts:
            continue
        for topic in sorted({TopicPartition(*tp).topic for tp in assignment[member]}):
            if topic in least and counts[member] >= least[topic][0] + 2:
                out.append((member, least[topic][1], topic))
    return out


def movement(before: Held, after: Held, subscriptions: Subscriptions | None = None) -> int:
    """Partitions whose previous owner is still present (and, given subscriptions, still
    subscribed to the topic) but no longer holds them."""
    owner_after = {TopicPartition(*tp): m for m, tps in after.items() for tp in tps}
    moved = 0
    for member, tps in before.items():
        if member not in after:
            continue
        topics = None if subscriptions is None else set(subscriptions.get(member, ()))
        for raw in tps:
            tp = TopicPartition(*raw)
            if topics is not None and tp.topic not in topics:
                continue
            if tp in owner_after and owner_after[tp] != member:
                moved += 1
    return moved


def member_lag(assignment: Held, lag: LagMap | None) -> dict[str, int]:
    lag = lag or {}
    return {m: sum(lag.get(TopicPartition(*tp), 0) for tp in tps) for m, tps in assignment.items()}


def lag_skew(assignment: Held, lag: LagMap | None) -> float:
    """Largest member lag / mean member lag; 1.0 is perfectly even (or no lag at all)."""
    totals = member_lag(assignment, lag)
    if not totals:
        return 1.0
    mean = sum(totals.values()) / len(totals)
    return max(totals.values()) / mean if mean > 0 else 1.0


def evaluate(
    assignment: Held,
    partitions_per_topic: PartitionsPerTopic,
    subscriptions: Subscriptions,
    *,
    before: Held | None = None,
    lag: LagMap | None = None,
) -> Quality:
    counts = [len(assignment.get(m, ())) for m in subscriptions]
    totals = member_lag(assignment, lag)
    return Quality(
        valid=not problems(assignment, partitions_per_topic, subscriptions),
        balanced=is_balanced(assignment, subscriptions),
        count_spread=(max(counts) - min(counts)) if counts else 0,
        moved=movement(before, assignment, subscriptions) if before else 0,
        max_member_lag=max(totals.values(), default=0),
        lag_skew=lag_skew(assignment, lag),
    )


def minimal_movement_uniform(current: Held, members: list[str], total: int) -> int:
    """The least movement any count-balanced assignment needs when every member can take
    every partition: members keep up to their quota, and the ``total % n`` larger quotas go
    to the members holding most."""
    if not members:
        return 0
    q, r = divmod(total, len(members))
    held = sorted((len(current.get(m, ())) for m in members), reverse=True)
    return sum(max(0, h - (q + 1 if i < r else q)) for i, h in enumerate(held))
