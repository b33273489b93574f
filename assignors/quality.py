"""How good an assignment is: validity, KIP-54 balance, movement, lag skew, cross-rack
fetches (KIP-881)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from itertools import chain, compress, repeat
from operator import itemgetter, lt, ne
from typing import NamedTuple

from .racks import MemberRacks, PartitionRacks, build_racks, cross_rack
from .spec import GroupSpec, build_spec
from .types import (
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
)

Held = Mapping[str, list[TopicPartition]] | CurrentAssignment

_topic, _number = itemgetter(0), itemgetter(1)


class Quality(NamedTuple):
    valid: bool
    balanced: bool
    #: max - min partitions per member.
    count_spread: int
    moved: int
    max_member_lag: int
    #: largest member lag / mean member lag (1.0 when there is no lag).
    lag_skew: float
    #: Partitions on a member whose rack holds none of their replicas (0 without racks).
    cross_rack: int = 0


def problems(
    assignment: Held, partitions_per_topic: PartitionsPerTopic, subscriptions: Subscriptions
) -> list[str]:
    """Everything that makes ``assignment`` invalid, as readable sentences (empty if valid)."""
    spec = build_spec(partitions_per_topic, subscriptions)
    ppt = spec.partitions_per_topic
    held = _as_partitions(assignment)
    if _valid_in_bulk(held, spec):
        return []
    out: list[str] = []
    owner: dict[TopicPartition, str] = {}
    for member in spec.members:
        if member not in assignment:
            out.append(f"member {member!r} is missing from the assignment")
    for member in sorted(assignment):
        if member not in spec.topics_of:
            out.append(f"{member!r} is not a member of the group")
            continue
        topics = spec.topics_of[member]
        for tp in held[member]:
            if not 0 <= tp.partition < ppt.get(tp.topic, 0):
                out.append(f"{member!r} holds {tp}, which does not exist")
            elif tp.topic not in topics:
                out.append(f"{member!r} holds {tp} but is not subscribed to {tp.topic!r}")
            if tp in owner:
                out.append(f"{tp} is held by both {owner[tp]!r} and {member!r}")
            owner[tp] = member
    for topic in spec.topics:
        # Plain (topic, partition) tuples find partitions as keys: no object per partition
        # unless one is missing.
        n = ppt[topic]
        if not all(map(owner.__contains__, zip(repeat(topic, n), range(n), strict=True))):
            out.extend(
                f"{tp} has subscribers but no owner"
                for tp in spec.partitions(topic)
                if tp not in owner
            )
    return out


def _valid_in_bulk(held: Mapping[str, Collection[TopicPartition]], spec: GroupSpec) -> bool:
    """``problems`` finds nothing: the usual case, checked in C-level passes over every
    partition; the loop in ``problems`` then runs only to name what is wrong."""
    if held.keys() != set(spec.members):
        return False
    owners, parts = _flatten(held, held)
    owned = dict(zip(parts, owners, strict=True))
    ppt = spec.partitions_per_topic
    if len(owned) != len(parts) or len(owned) != sum(ppt[t] for t in spec.topics):
        return False  # a partition held twice, or one without an owner
    numbers = list(map(_number, parts))
    if set(map(type, numbers)) - {int} or min(numbers, default=0) < 0:
        return False
    if not all(map(lt, numbers, map(ppt.get, map(_topic, parts), repeat(0)))):
        return False
    pairs = set(zip(owners, map(_topic, parts), strict=True))
    return all(t in spec.topics_of[m] for m, t in pairs)


def _flatten(
    held: Mapping[str, Collection[TopicPartition]], members: Iterable[str]
) -> tuple[list[str], list[TopicPartition]]:
    """Every partition ``members`` hold, and beside each its holder."""
    names = list(members)
    lists = list(map(held.__getitem__, names))
    owners = list(chain.from_iterable(map(repeat, names, map(len, lists))))
    return owners, list(chain.from_iterable(lists))


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
        for topic in sorted(set(map(_topic, assignment[member]))):
            if topic in least and counts[member] >= least[topic][0] + 2:
                out.append((member, least[topic][1], topic))
    return out


def movement(before: Held, after: Held, subscriptions: Subscriptions | None = None) -> int:
    """Partitions whose previous owner is still present (and, given subscriptions, still
    subscribed to the topic) but no longer holds them."""
    owner_after: dict[TopicPartition, str] = {}
    for m, tps in _as_partitions(after).items():
        owner_after.update(zip(tps, repeat(m)))
    held = _as_partitions(before)
    owners, parts = _flatten(held, (m for m in held if m in after))
    if subscriptions is not None:
        pairs = list(zip(owners, map(_topic, parts), strict=True))
        dropped = {(m, t) for m, t in set(pairs) if t not in subscriptions.get(m, ())}
        if dropped:
            keep = [pair not in dropped for pair in pairs]
            owners, parts = list(compress(owners, keep)), list(compress(parts, keep))
    now = list(map(owner_after.get, parts))
    # None != owner too, so the partitions nobody holds now are taken back out.
    changed: int = sum(map(ne, now, owners))
    return changed - now.count(None)


def member_lag(assignment: Held, lag: LagMap | None) -> dict[str, int]:
    get = (lag or {}).get
    return {m: sum(map(get, tps, repeat(0))) for m, tps in _as_partitions(assignment).items()}


def lag_skew(assignment: Held, lag: LagMap | None) -> float:
    """Largest member lag / mean member lag; 1.0 is perfectly even (or no lag at all)."""
    return _skew(member_lag(assignment, lag))


def _skew(totals: Mapping[str, int]) -> float:
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
    member_racks: MemberRacks | None = None,
    partition_racks: PartitionRacks | None = None,
) -> Quality:
    counts = [len(assignment.get(m, ())) for m in subscriptions]
    totals = member_lag(assignment, lag)
    racks = None
    if member_racks:
        racks = build_racks(
            build_spec(partitions_per_topic, subscriptions), member_racks, partition_racks
        )
    return Quality(
        valid=not problems(assignment, partitions_per_topic, subscriptions),
        balanced=is_balanced(assignment, subscriptions),
        count_spread=(max(counts) - min(counts)) if counts else 0,
        moved=movement(before, assignment, subscriptions) if before else 0,
        max_member_lag=max(totals.values(), default=0),
        lag_skew=_skew(totals),
        cross_rack=cross_rack(_as_partitions(assignment), racks) if racks else 0,
    )


def _as_partitions(held: Held) -> Mapping[str, Collection[TopicPartition]]:
    """``held`` with every entry a ``TopicPartition``; checked in one pass over all of
    them and rebuilt only when the caller passed plain pairs."""
    if set(map(type, chain.from_iterable(held.values()))) <= {TopicPartition}:
        return held  # type: ignore[return-value]
    return {m: [TopicPartition(*raw) for raw in tps] for m, tps in held.items()}


def minimal_movement_uniform(current: Held, members: list[str], total: int) -> int:
    """The least movement any count-balanced assignment needs when every member can take
    every partition: members keep up to their quota, and the ``total % n`` larger quotas go
    to the members holding most."""
    if not members:
        return 0
    q, r = divmod(total, len(members))
    held = sorted((len(current.get(m, ())) for m in members), reverse=True)
    return sum(max(0, h - (q + 1 if i < r else q)) for i, h in enumerate(held))
