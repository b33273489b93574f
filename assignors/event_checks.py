"""Every event of a batch checked before the engine changes anything.

``IncrementalAssignor.apply`` is atomic because of this module: a batch is read into
``Checked`` events first, and only a batch in which every event is well formed is
applied, so one bad event leaves the engine exactly as it was. The checks are the
stateless API's (``spec.py``, ``racks.py``, ``capacity.py``, ``constraints.py``): the
same mistake gets the same error, naming the event and the bad entry, on both paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .capacity import check_capacity
from .constraints import Constraints, check_constraints
from .events import (
    ConstraintsChanged,
    Event,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionRacksChanged,
    PartitionsChanged,
    SubscriptionChanged,
)
from .racks import check_rack, replica_racks
from .spec import check_lag, check_member, check_topics, lag_columns
from .types import MAX_PARTITION, TopicPartition


@dataclass(frozen=True, slots=True)
class Constrain:
    constraints: Constraints


@dataclass(frozen=True, slots=True)
class Readings:
    """A lag map that passed ``check_lag``, with its columns when they were read in bulk
    (``spec.lag_columns``): the engine converts it without checking it again."""

    lag: Mapping[TopicPartition, int]
    columns: tuple[list[int], list[Any]] | None


#: An event as ``apply`` runs it: a well-formed copy of a membership or topology event
#: (topic sets frozen, a capacity of None read as 1.0, racks as frozensets), or the
#: checked form of constraints and lag.
Checked = (
    MemberJoined
    | MemberLeft
    | SubscriptionChanged
    | PartitionsChanged
    | PartitionRacksChanged
    | Constrain
    | Readings
)


def check_events(events: Iterable[Event]) -> list[Checked]:
    """The batch, every event checked; raises on the first bad one, naming it."""
    if isinstance(events, (str, bytes, Mapping)) or not isinstance(events, Iterable):
        raise TypeError(f"apply: expected an iterable of events, got {events!r}")
    return [check_event(event, i) for i, event in enumerate(events)]


def check_event(event: object, index: int = 0) -> Checked:
    if isinstance(event, MemberJoined):
        where = f"events[{index}]: MemberJoined({event.member!r})"
        member = check_member(event.member, where)
        rack = None if event.rack is None else check_rack(event.rack, where)
        capacity = 1.0 if event.capacity is None else check_capacity(event.capacity, where)
        return MemberJoined(member, check_topics(event.topics, where), rack, capacity)
    if isinstance(event, MemberLeft):
        return MemberLeft(check_member(event.member, f"events[{index}]: MemberLeft"))
    if isinstance(event, SubscriptionChanged):
        where = f"events[{index}]: SubscriptionChanged({event.member!r})"
        member = check_member(event.member, where)
        return SubscriptionChanged(member, check_topics(event.topics, where))
    if isinstance(event, PartitionsChanged):
        where = f"events[{index}]: PartitionsChanged({event.topic!r})"
        if not isinstance(event.topic, str):
            raise TypeError(f"{where}: topic name must be a str, got {event.topic!r}")
        count = event.count
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"{where}: count must be an int, got {count!r}")
        if not 0 <= count <= MAX_PARTITION + 1:
            raise ValueError(f"{where}: count must be 0..{MAX_PARTITION + 1}, got {count!r}")
        return PartitionsChanged(event.topic, count)
    if isinstance(event, PartitionRacksChanged):
        return PartitionRacksChanged(
            checked_racks(event.racks, f"events[{index}]: PartitionRacksChanged")
        )
    if isinstance(event, ConstraintsChanged):
        return Constrain(check_constraints(event.pins, event.max_partitions))
    if isinstance(event, LagUpdated):
        where = f"events[{index}]: LagUpdated"
        if not isinstance(event.lag, Mapping):
            raise TypeError(f"{where}: lag must be a mapping, got {type(event.lag).__name__}")
        columns = lag_columns(event.lag) if event.lag else None
        if columns is None and event.lag:
            check_lag(event.lag)
        return Readings(event.lag, columns)
    raise TypeError(f"events[{index}]: not an event: {event!r}")


def checked_racks(racks: object, where: str) -> dict[TopicPartition, frozenset[str]]:
    """Replica racks for an engine: every Kafka partition kept, existing or not yet."""
    if not isinstance(racks, Mapping):
        raise TypeError(f"{where}: racks must be a mapping, got {type(racks).__name__}")
    out: dict[TopicPartition, frozenset[str]] = {}
    for tp, named in replica_racks(racks, where):
        if not 0 <= tp.partition <= MAX_PARTITION:
            raise ValueError(f"{where}: {tp!r} is not a Kafka partition")
        out[tp] = named
    return out
