"""Typed membership, topology and lag events fed to the incremental engine."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .types import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberJoined:
    member: str
    topics: frozenset[str]
    #: The member's ``client.rack``; a member joining again with another rack (or none)
    #: moves to it.
    rack: str | None = None
    #: The member's capacity weight (None: 1); balance gives it partitions and lag in
    #: proportion. Joining again with another capacity re-weighs the member.
    capacity: float | None = None


@dataclass(frozen=True, slots=True)
class MemberLeft:
    member: str


@dataclass(frozen=True, slots=True)
class SubscriptionChanged:
    member: str
    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class PartitionsChanged:
    topic: str
    count: int


@dataclass(frozen=True, slots=True)
class PartitionRacksChanged:
    #: The racks of these partitions' replicas (from topic metadata); an empty collection
    #: means none known. Partitions not named keep their racks.
    racks: Mapping[TopicPartition, Collection[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConstraintsChanged:
    """The operator's whole set of constraints (``constraints.py``), replacing the last:
    partitions pinned to members, and caps on members' counts."""

    pins: Mapping[TopicPartition, str] = field(default_factory=dict)
    max_partitions: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LagUpdated:
    #: New lag for these partitions; partitions not named keep their last value.
    lag: Mapping[TopicPartition, int] = field(default_factory=dict)


Event = (
    MemberJoined
    | MemberLeft
    | SubscriptionChanged
    | PartitionsChanged
    | PartitionRacksChanged
    | ConstraintsChanged
    | LagUpdated
)


class Delta(NamedTuple):
    """How one member's partitions changed in an ``apply``: the new list is the old one
    without ``lost``, plus ``gained``."""

    gained: frozenset[TopicPartition]
    lost: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Change:
    """What one ``apply`` changed: only the members whose partitions differ."""

    #: Member -> its complete new partition list (sorted), for members whose set changed.
    assignments: dict[str, list[TopicPartition]]
    #: Members that left (their records become tombstones).
    removed: frozenset[str]
    #: Partitions taken from an owner that is still present and still subscribed.
    moved: int
    #: Of ``moved``, those moved by the lag policy rather than by count balance.
    moved_for_lag: int
    #: Why the lag policy acted (None when it did not): the operator's "why did it move".
    lag_trigger: LagTrigger | None = None
    #: Of ``moved``, those swapped onto a replica's rack (rack awareness).
    moved_for_rack: int = 0
    #: Member -> its ``Delta``, for every member of ``assignments``: a caller that keeps
    #: each member's previous list (as sets) updates it at the cost of what moved. From
    #: ``from_snapshot``, relative to the part of ``current`` that was kept.
    deltas: dict[str, Delta] = field(default_factory=dict)


class LagTrigger(NamedTuple):
    """The member whose lag passed the policy's trigger, before any move."""

    member: str
    #: Its lag, and the best largest member lag any assignment could reach (the larger
    #: of the mean member lag and the heaviest partition it holds).
    lag: int
    bound: float
