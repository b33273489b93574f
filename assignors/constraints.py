"""Operator constraints: partitions pinned to a member, and a cap on a member's count.

Both are hard. A pin holds while its member is in the group and subscribes to the
partition's topic; while it does not, the partition is placed like any other (a pin
never leaves a partition unread because its member is away). A cap bounds everything a
member holds, pins included; partitions no subscriber has room for stay unassigned until
one has (``IncrementalAssignor.unassigned``), which is what the operator asked for.
Every other member is balanced as before around what the constraints fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import NamedTuple

from .spec import GroupSpec, as_partition, check_mapping
from .types import MAX_PARTITION, TopicPartition

Pins = Mapping[TopicPartition, str]
MaxPartitions = Mapping[str, int]
#: A cap larger than any group could use: a typo, not a bound.
MAX_CAP = 10_000_000


class Constraints(NamedTuple):
    """Validated constraints: ``pins`` by partition, ``caps`` by member."""

    pins: dict[TopicPartition, str]
    caps: dict[str, int]

    def __bool__(self) -> bool:
        return bool(self.pins or self.caps)


NONE = Constraints({}, {})


def check_cap(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: max partitions must be an int, got {value!r}")
    if not 0 <= value <= MAX_CAP:
        raise ValueError(f"{where}: max partitions must be >= 0 and <= {MAX_CAP}, got {value!r}")
    return value


def check_constraints(pins: Pins | None, max_partitions: MaxPartitions | None) -> Constraints:
    """Types and shapes, and that no member has more pins than its cap. Members and
    partitions need not exist yet: a controller keeps constraints for members that are
    away and partitions still to be created."""
    check_mapping(pins, "pins")
    check_mapping(max_partitions, "max_partitions")
    out_pins: dict[TopicPartition, str] = {}
    for key, member in (pins or {}).items():
        tp = as_partition(key)
        if tp is None:
            raise TypeError(f"pins: {key!r} is not a (topic, partition) pair")
        if not 0 <= tp.partition <= MAX_PARTITION:
            raise ValueError(f"pins: {key!r} is not a Kafka partition")
        if not isinstance(member, str) or not member:
            raise TypeError(
                f"pins[{tp.topic}:{tp.partition}]: expected a member id, got {member!r}"
            )
        out_pins[TopicPartition(tp.topic, tp.partition)] = member
    caps: dict[str, int] = {}
    for member, cap in (max_partitions or {}).items():
        if not isinstance(member, str) or not member:
            raise TypeError(f"max_partitions: expected a member id, got {member!r}")
        caps[member] = check_cap(cap, f"max_partitions[{member!r}]")
    pinned = Counter(out_pins.values())
    for member, cap in sorted(caps.items()):
        if pinned[member] > cap:
            raise ValueError(
                f"max_partitions[{member!r}] is {cap} but {pinned[member]} partitions are "
                "pinned to it: raise the cap or remove pins"
            )
    return Constraints(out_pins, caps)


def check_against(spec: GroupSpec, constraints: Constraints) -> None:
    """A stateless call knows the whole group: every pin must name an existing partition
    and a member subscribed to its topic, every cap a member."""
    ppt, topics_of = spec.partitions_per_topic, spec.topics_of
    for tp, member in sorted(constraints.pins.items()):
        where = f"pins[{tp.topic}:{tp.partition}]"
        if tp.partition >= ppt.get(tp.topic, 0):
            raise ValueError(f"{where}: the partition does not exist")
        if member not in topics_of:
            raise ValueError(f"{where}: {member!r} is not a member of subscriptions")
        if tp.topic not in topics_of[member]:
            raise ValueError(f"{where}: {member!r} does not subscribe to {tp.topic!r}")
    for member in sorted(constraints.caps):
        if member not in topics_of:
            raise ValueError(f"max_partitions: {member!r} is not a member of subscriptions")


def violations(
    owner_of: Callable[[TopicPartition], str | None],
    count_of: Callable[[str], int],
    partitions_per_topic: Mapping[str, int],
    topics_of: Mapping[str, frozenset[str]],
    constraints: Constraints,
) -> list[str]:
    """What breaks the constraints, as readable sentences: a pin that holds (its member
    subscribes, its partition exists) but is not held by its member, a member above its
    cap. Must always be empty. Costs O(pins + caps) lookups."""
    out: list[str] = []
    for tp, member in sorted(constraints.pins.items()):
        exists = tp.partition < partitions_per_topic.get(tp.topic, 0)
        if exists and tp.topic in topics_of.get(member, ()) and owner_of(tp) != member:
            held = owner_of(tp)
            out.append(f"{tp.topic}:{tp.partition} is pinned to {member!r} but held by {held!r}")
    for member, cap in sorted(constraints.caps.items()):
        if member in topics_of and count_of(member) > cap:
            out.append(f"{member!r} holds {count_of(member)} partitions, above its cap of {cap}")
    return out
