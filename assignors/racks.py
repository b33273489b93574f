"""Rack awareness as KIP-881 defines it: a member's ``client.rack`` against the racks of
each partition's replicas, so a member fetches from a replica in its own zone and the
cross-zone traffic that clouds bill disappears.

Kafka applies rack awareness only when it can help: some member declares a rack, that
rack holds replicas, and not every partition has replicas on exactly the same racks (if
every partition is on every rack, any placement is already local). ``use_rack_aware``
is that rule, word for word; every rack-aware strategy asks it first, so a group without
racks is assigned exactly as before.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .replica_layouts import ReplicaLayouts
from .spec import GroupSpec, as_partition, check_mapping
from .types import TopicPartition

#: Kafka sends ``client.rack`` as a protocol string; the limit keeps records bounded.
MAX_RACK_LENGTH = 255
_NO_RACKS: frozenset[str] = frozenset()

MemberRacks = Mapping[str, str | None]
PartitionRacks = Mapping[TopicPartition, Collection[str]]


@dataclass(frozen=True, slots=True)
class Racks:
    """Validated racks of one group: members with a rack, replica racks per partition."""

    member: Mapping[str, str]
    #: Replica racks of each existing partition of a subscribed topic; absent means none known.
    partition: Mapping[TopicPartition, frozenset[str]]
    #: Some subscribed partition is absent from ``partition``: one layout is "none known".
    partial: bool = False

    def replicas(self, tp: TopicPartition) -> frozenset[str]:
        return self.partition.get(tp, _NO_RACKS)

    def mismatched(self, member: str, tp: TopicPartition) -> bool:
        """``member`` declares a rack and no replica of ``tp`` is on it (Kafka's count)."""
        rack = self.member.get(member)
        return rack is not None and rack not in self.partition.get(tp, _NO_RACKS)

    def layouts(self) -> set[frozenset[str]]:
        """The distinct replica layouts of the partitions in ``partition``."""
        if isinstance(self.partition, ReplicaLayouts):
            return self.partition.present()
        return set(self.partition.values())

    def useful(self) -> bool:
        """Kafka's rule over the whole group (the sticky assignors' ``RackInfo``); a
        partition with no racks known counts whether it is absent or given as ``[]``."""
        layouts = self.layouts()
        every = frozenset().union(*layouts)
        named = set(self.member.values())
        if self.partial and every and named & every:
            return True
        return use_rack_aware(named, every, layouts)

    def can_help(self) -> bool:
        """Some placement holds fewer partitions off their racks than another: a member
        declares a rack, and some partition is not on every member's rack. Wider than
        ``useful``: where Kafka gives up (every partition on the same racks, or none on
        a member's rack), which members take the one partition more still counts."""
        named = set(self.member.values())
        if not named:
            return False
        layouts = self.layouts()
        if self.partial:
            layouts.add(_NO_RACKS)
        return any(not named <= layout for layout in layouts)


def use_rack_aware(
    member_racks: Collection[str],
    partition_racks: Collection[str],
    layouts: Iterable[frozenset[str]],
) -> bool:
    """KIP-881: some member rack holds replicas, and the partitions are not all on the
    same racks. ``layouts`` are the racks of every partition considered (each distinct
    set once is enough)."""
    if not member_racks or not set(member_racks) & set(partition_racks):
        return False
    every = frozenset(partition_racks)
    return not all(racks == every for racks in layouts)


def valid_rack(rack: object) -> bool:
    try:
        check_rack(rack, "rack")
    except (TypeError, ValueError):
        return False
    return True


def check_rack(rack: object, where: str) -> str:
    """A rack name as Kafka clients send it: a non-empty printable string, no spaces."""
    if not isinstance(rack, str):
        raise TypeError(f"{where}: rack must be a str, got {rack!r}")
    if not rack or len(rack) > MAX_RACK_LENGTH:
        raise ValueError(f"{where}: rack must be 1..{MAX_RACK_LENGTH} characters, got {len(rack)}")
    if not rack.isprintable() or any(c.isspace() for c in rack):
        raise ValueError(f"{where}: rack {rack!r} contains whitespace or control characters")
    return rack


def build_racks(
    spec: GroupSpec,
    member_racks: MemberRacks | None,
    partition_racks: PartitionRacks | None,
    *,
    keep_replicas: bool = False,
) -> Racks | None:
    """Validate both maps against the group; ``None`` when no member declares a rack, so
    callers keep their rack-blind path (Kafka ignores replica racks then too), unless
    ``keep_replicas`` (an engine: its members may declare racks later).

    A rack of ``None`` means "no rack" (an unset ``client.rack``). A member that is not in
    the group is a caller bug and is named; replica racks of partitions that do not exist
    (yet) are ignored, as metadata and partition counts are read at different times.
    """
    check_mapping(member_racks, "member_racks")
    check_mapping(partition_racks, "partition_racks")
    given = member_racks or {}
    if not given.keys() <= spec.topics_of.keys():
        member = next(m for m in given if m not in spec.topics_of)
        raise ValueError(f"member_racks: {member!r} is not a member of subscriptions")
    members: dict[str, str] = {}
    checked: set[str] = set()  # fleets have few racks: each is checked once
    for member, rack in given.items():
        if rack is None:
            continue
        if type(rack) is not str or rack not in checked:
            checked.add(check_rack(rack, f"member_racks[{member!r}]"))
        members[member] = rack
    replicas = _partition_racks(spec, partition_racks)  # validated: a bad entry is a bug
    if not members and not (keep_replicas and replicas):
        return None
    return Racks(members, replicas, partial=replicas.none_known(spec.topics))


def _partition_racks(spec: GroupSpec, partition_racks: PartitionRacks | None) -> ReplicaLayouts:
    """Replica racks per existing partition: in bulk when the map is well formed, else
    entry by entry (``replica_racks``), which names a bad entry."""
    if partition_racks:
        in_bulk = ReplicaLayouts.in_bulk(spec, partition_racks, valid_rack)
        if in_bulk is not None:
            return in_bulk
    return ReplicaLayouts.of_pairs(spec, replica_racks(partition_racks or {}, "partition_racks"))


def replica_racks(
    partition_racks: Mapping[Any, object], where: str
) -> Iterator[tuple[TopicPartition, frozenset[str]]]:
    """Each entry of ``partition_racks`` as a partition and its racks, checked one by one
    (``where`` names the argument in errors). A cluster has a handful of replica layouts
    over its racks, so each layout is checked, and made a set, once."""
    layouts: dict[tuple[str, ...], frozenset[str]] = {}
    for key, racks in partition_racks.items():
        tp = as_partition(key)
        if tp is None:
            raise TypeError(f"{where}: {key!r} is not a (topic, partition) pair")
        if isinstance(racks, (str, bytes)) or not isinstance(racks, Iterable):
            raise TypeError(
                f"{where}[{key!r}]: expected a collection of rack names, got {racks!r}"
                + (" (one name is not a collection of racks)" if isinstance(racks, str) else "")
            )
        layout = tuple(racks)
        try:
            named = layouts.get(layout)
        except TypeError:  # an unhashable entry, which check_rack names below
            named = None
        if named is None:
            for rack in layout:
                check_rack(rack, f"{where}[{key!r}]")
            named = layouts[layout] = frozenset(layout)
        yield tp, named


def cross_rack(assignment: Mapping[str, Iterable[TopicPartition]], racks: Racks | None) -> int:
    """Partitions held by a member whose rack holds none of their replicas."""
    if racks is None:
        return 0
    total = 0
    for member, rack in racks.member.items():
        for tp in assignment.get(member, ()):
            if rack not in racks.partition.get(tp, _NO_RACKS):
                total += 1
    return total
