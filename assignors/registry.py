"""The pinned entry point: ``assign(strategy, partitions_per_topic, subscriptions, ...)``."""

from __future__ import annotations

from collections.abc import Callable

from .capacity import MemberCapacities, build_capacities
from .classic import range_assign, roundrobin_assign
from .constraints import MaxPartitions, Pins, check_constraints
from .engine import IncrementalAssignor
from .lagbased import lag_assign
from .placement import greedy_place
from .rack_range import rack_range_assign
from .racks import MemberRacks, PartitionRacks, build_racks
from .spec import GroupSpec, build_spec, check_lag, check_mapping, normalize_lag
from .types import (
    Assignment,
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
)

STRATEGIES: tuple[str, ...] = ("range", "roundrobin", "fair", "sticky", "lag", "lagsticky")

#: The strategies that read neither ``current`` nor ``lag`` (they still validate ``lag``).
_COUNT_ONLY: dict[str, Callable[[GroupSpec], Assignment]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "fair": greedy_place,
}


def assign(
    strategy: str,
    partitions_per_topic: PartitionsPerTopic,
    subscriptions: Subscriptions,
    *,
    current: CurrentAssignment | None = None,
    lag: LagMap | None = None,
    member_racks: MemberRacks | None = None,
    partition_racks: PartitionRacks | None = None,
    member_capacities: MemberCapacities | None = None,
    pins: Pins | None = None,
    max_partitions: MaxPartitions | None = None,
) -> Assignment:
    """Assign every partition of every subscribed topic to exactly one subscriber.

    ``range``, ``roundrobin``, ``fair`` and ``lag`` ignore ``current``; ``sticky`` and
    ``lagsticky`` keep as much of it as balance allows. Every member of ``subscriptions``
    is a key of the result and each list is sorted.

    ``member_racks`` (``{member: client.rack}``) and ``partition_racks`` (``{partition:
    racks of its replicas}``) make ``range``, ``sticky`` and ``lagsticky`` rack aware
    (KIP-881): members are matched with replica racks where that costs no balance (and,
    for ``lagsticky``, not the lag target). The other strategies validate and ignore them.

    ``member_capacities`` (``{member: weight}``, default 1) makes ``sticky`` and
    ``lagsticky`` balance partitions, and lag, in proportion to each member's weight
    (``capacity.py``); the other strategies validate and ignore it.

    ``pins`` (``{partition: member}``) and ``max_partitions`` (``{member: cap}``) are the
    operator's hard constraints (``constraints.py``), honoured by ``sticky`` and
    ``lagsticky``; the other strategies are fixed rules and refuse them. Partitions no
    subscriber has room for under the caps are left out of the result, with an
    ``UnassignedPartitionsWarning`` that says how many.
    """
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
        )
    if strategy == "lag" or strategy in _COUNT_ONLY:
        if check_constraints(pins, max_partitions):
            raise ValueError(
                f"strategy {strategy!r} cannot honour pins or max_partitions: "
                "use sticky or lagsticky"
            )
        spec = build_spec(partitions_per_topic, subscriptions)
        check_mapping(current, "current")  # ignored here, but never silently misread
        racks = build_racks(spec, member_racks, partition_racks)
        build_capacities(spec, member_capacities)
        if strategy == "lag":
            return lag_assign(spec, normalize_lag(lag))
        if lag:
            check_lag(lag)
        if strategy == "range" and racks is not None:
            return rack_range_assign(spec, racks)
        return _COUNT_ONLY[strategy](spec)
    return IncrementalAssignor.solve(
        partitions_per_topic,
        subscriptions,
        current,
        lag,
        lag_aware=strategy == "lagsticky",
        member_racks=member_racks,
        partition_racks=partition_racks,
        member_capacities=member_capacities,
        pins=pins,
        max_partitions=max_partitions,
    )
