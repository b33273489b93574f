"""How good an assignment is: validity, KIP-54 balance (proportional to capacity when
members declare one, around operator constraints), movement, lag skew, cross-rack
fetches (KIP-881), constraint violations."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from itertools import accumulate, chain, compress, repeat
from operator import contains, itemgetter, lt, ne, sub
from typing import NamedTuple

from .capacity import MemberCapacities, build_capacities, give, take
from .constraints import (
    NONE,
    Constraints,
    MaxPartitions,
    Pins,
    check_against,
    check_constraints,
    violations,
)
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

_first, _second = itemgetter(0), itemgetter(1)
_topic, _number = _first, _second


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
    #: With capacities: the largest distance, in partitions, between a member's count and
    #: its exact share (total x capacity / total capacity). 0.0 without capacities.
    share_error: float = 0.0
    #: Pins not held by their (present, subscribed) member, and members above their cap:
    #: must be 0.
    violations: int = 0
    #: Partitions with subscribers but no owner (every subscriber at its cap).
    unassigned: int = 0


def problems(
    assignment: Held, partitions_per_topic: PartitionsPerTopic, subscriptions: Subscriptions
) -> list[str]:
    """Everything that makes ``assignment`` invalid, as readable sentences (empty if valid)."""
    spec = build_spec(partitions_per_topic, subscriptions)
    held = _as_partitions(assignment)
    if _valid_in_bulk(held, _Flat.of(held), spec):
        return []
    return _named_problems(held, spec)


def _named_problems(held: Mapping[str, Collection[TopicPartition]], spec: GroupSpec) -> list[str]:
    ppt = spec.partitions_per_topic
    out: list[str] = []
    owner: dict[TopicPartition, str] = {}
    for member in spec.members:
        if member not in held:
            out.append(f"member {member!r} is missing from the assignment")
    for member in sorted(held):
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


class _Flat(NamedTuple):
    """Every partition an assignment holds, beside each its holder, and the reverse map:
    built once per assignment and shared by the validity and movement checks."""

    owners: list[str]
    parts: list[TopicPartition]
    owner: dict[TopicPartition, str]

    @classmethod
    def of(cls, held: Mapping[str, Collection[TopicPartition]]) -> _Flat:
        owners, parts = _flatten(held, held)
        return cls(owners, parts, dict(zip(parts, owners, strict=True)))


def _valid_in_bulk(
    held: Mapping[str, Collection[TopicPartition]], flat: _Flat, spec: GroupSpec
) -> bool:
    """``problems`` finds nothing: the usual case, checked in C-level passes over every
    partition; the loop in ``problems`` then runs only to name what is wrong."""
    if held.keys() != set(spec.members):
        return False
    owners, parts, owned = flat
    ppt = spec.partitions_per_topic
    if len(owned) != len(parts) or len(owned) != sum(ppt[t] for t in spec.topics):
        return False  # a partition held twice, or one without an owner
    numbers = list(map(_number, parts))
    if set(map(type, numbers)) - {int} or min(numbers, default=0) < 0:
        return False
    if not all(map(lt, numbers, map(ppt.get, map(_topic, parts), repeat(0)))):
        return False
    pairs = set(zip(owners, map(_topic, parts), strict=True))  # (holder, topic)
    subscribed = map(spec.topics_of.__getitem__, map(_first, pairs))
    return all(map(contains, subscribed, map(_second, pairs)))


def _flatten(
    held: Mapping[str, Collection[TopicPartition]], members: Iterable[str]
) -> tuple[list[str], list[TopicPartition]]:
    """Every partition ``members`` hold, and beside each its holder."""
    names = list(members)
    lists = list(map(held.__getitem__, names))
    owners = list(chain.from_iterable(map(repeat, names, map(len, lists))))
    return owners, list(chain.from_iterable(lists))


def is_balanced(
    assignment: Held,
    subscriptions: Subscriptions,
    capacities: Mapping[str, float] | None = None,
) -> bool:
    """KIP-54: counts differ by at most one, or no member with 2+ more partitions than
    another holds a partition that other member could take. With ``capacities``, "2+
    more" is ``capacity.py``'s rule (a move that would bring both nearer their shares)."""
    return not imbalances(assignment, subscriptions, capacities)


def imbalances(
    assignment: Held,
    subscriptions: Subscriptions,
    capacities: Mapping[str, float] | None = None,
    constraints: Constraints = NONE,
) -> list[tuple[str, str, str]]:
    """(bigger member, smaller member, topic) triples that violate (capacity-relative)
    KIP-54 balance. Around ``constraints``: a member at its cap takes nothing, and a
    pinned partition is not the holder's to give."""
    counts = {m: len(assignment.get(m, ())) for m in subscriptions}
    if not counts or (
        not capacities and not constraints and max(counts.values()) - min(counts.values()) <= 1
    ):
        return []
    weight = (capacities or {}).get
    caps, pins = constraints.caps, constraints.pins
    least: dict[str, tuple[float, str]] = {}
    for member in sorted(subscriptions):
        if member in caps and counts[member] >= caps[member]:
            continue
        for topic in subscriptions[member]:
            cand = (take(counts[member], weight(member, 1.0)), member)
            if topic not in least or cand < least[topic]:
                least[topic] = cand
    out: list[tuple[str, str, str]] = []
    for member in sorted(assignment):
        if member not in counts:
            continue
        gives = give(counts[member], weight(member, 1.0))
        movable = [tp for tp in assignment[member] if pins.get(TopicPartition(*tp)) != member]
        for topic in sorted(set(map(_topic, movable))):
            if topic in least and gives > least[topic][0]:
                out.append((member, least[topic][1], topic))
    return out


def share_error(counts: Mapping[str, int], capacities: Mapping[str, float]) -> float:
    """The largest distance between a member's count and its exact share of the total."""
    total_capacity = sum(capacities.get(m, 1.0) for m in counts)
    if not counts or not total_capacity:
        return 0.0
    per_unit = sum(counts.values()) / total_capacity
    return max(abs(c - per_unit * capacities.get(m, 1.0)) for m, c in counts.items())


def movement(before: Held, after: Held, subscriptions: Subscriptions | None = None) -> int:
    """Partitions whose previous owner is still present (and, given subscriptions, still
    subscribed to the topic) but no longer holds them."""
    now = _as_partitions(after)
    return _moved(_as_partitions(before), now, _Flat.of(now).owner, subscriptions)


def _moved(
    held: Mapping[str, Collection[TopicPartition]],
    after: Mapping[str, object],
    owner_after: Mapping[TopicPartition, str],
    subscriptions: Subscriptions | None,
) -> int:
    owners, parts = _flatten(held, filter(after.__contains__, held))
    now = list(map(owner_after.get, parts))
    # Only partitions whose holder changed can count; None != owner too, so the
    # partitions nobody holds now are counted out afterwards.
    changed = list(map(ne, now, owners))
    owners, now = list(compress(owners, changed)), list(compress(now, changed))
    moved = len(owners) - now.count(None)
    if subscriptions is None or not moved:
        return moved
    pairs = list(zip(owners, map(_topic, compress(parts, changed)), strict=True))
    dropped = {(m, t) for m, t in set(pairs) if t not in subscriptions.get(m, ())}
    if dropped:  # the previous owner gave the topic up: not a move
        moved -= sum(
            1 for pair, n in zip(pairs, now, strict=True) if n is not None and pair in dropped
        )
    return moved


def member_lag(assignment: Held, lag: LagMap | None) -> dict[str, int]:
    """Lag per member, summed in C-level passes over all partitions at once (a loop per
    member costs more than its few partitions in groups of many small members)."""
    held = _as_partitions(assignment)
    return _member_lag(held, chain.from_iterable(held.values()), lag)


def _member_lag(
    held: Mapping[str, Collection[TopicPartition]],
    parts: Iterable[TopicPartition],
    lag: LagMap | None,
) -> dict[str, int]:
    """``parts``: every partition of ``held``, in its order."""
    members = list(held)
    if not lag:
        return dict.fromkeys(members, 0)
    running = [0, *accumulate(map(lag.get, parts, repeat(0)))]
    ends = [0, *accumulate(map(len, map(held.__getitem__, members)))]
    at = running.__getitem__
    return dict(zip(members, map(sub, map(at, ends[1:]), map(at, ends[:-1])), strict=True))


def lag_skew(assignment: Held, lag: LagMap | None) -> float:
    """Largest member lag / mean member lag; 1.0 is perfectly even (or no lag at all)."""
    return _skew(member_lag(assignment, lag))


def _skew(totals: Mapping[str, int], capacities: Mapping[str, float] | None = None) -> float:
    """With capacities, lag per unit of capacity: a member twice as strong is meant to
    carry twice the lag."""
    if not totals:
        return 1.0
    if capacities:
        weight = capacities.get
        mean = sum(totals.values()) / sum(weight(m, 1.0) for m in totals)
        peak = max(lag / weight(m, 1.0) for m, lag in totals.items())
        return peak / mean if mean > 0 else 1.0
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
    member_capacities: MemberCapacities | None = None,
    pins: Pins | None = None,
    max_partitions: MaxPartitions | None = None,
) -> Quality:
    """With ``member_capacities``, balance is capacity-relative and ``share_error`` says
    how far the worst member is from its exact share. With ``pins`` and
    ``max_partitions``, balance is judged around them and their violations counted."""
    spec = build_spec(partitions_per_topic, subscriptions)
    rules = check_constraints(pins, max_partitions)
    check_against(spec, rules)
    held = _as_partitions(assignment)
    flat = _Flat.of(held)
    counts = list(map(len, map(held.get, subscriptions, repeat(()))))
    spread = (max(counts) - min(counts)) if counts else 0
    totals = _member_lag(held, flat.parts, lag)
    racks = build_racks(spec, member_racks, partition_racks) if member_racks else None
    caps = build_capacities(spec, member_capacities)
    balanced = (spread <= 1 and caps is None and not rules) or not imbalances(
        held, subscriptions, caps, rules
    )
    counted = dict(zip(subscriptions, counts, strict=True))
    ppt = spec.partitions_per_topic
    subscribed = sum(ppt[t] for t in spec.topics)
    return Quality(
        valid=_valid_in_bulk(held, flat, spec) or not _named_problems(held, spec),
        balanced=balanced,
        count_spread=spread,
        moved=_moved(_as_partitions(before), held, flat.owner, subscriptions) if before else 0,
        max_member_lag=max(totals.values(), default=0),
        lag_skew=_skew(totals, caps),
        cross_rack=cross_rack(held, racks) if racks else 0,
        share_error=share_error(counted, caps) if caps else 0.0,
        violations=len(violations(flat.owner.get, counted.__getitem__, ppt, spec.topics_of, rules))
        if rules
        else 0,
        unassigned=max(0, subscribed - len(flat.owner)),
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
