"""The pinned entry point: ``assign(strategy, partitions_per_topic, subscriptions, ...)``."""

from __future__ import annotations

from collections.abc import Callable

from .classic import range_assign, roundrobin_assign
from .engine import IncrementalAssignor
from .lagbased import lag_assign
from .placement import greedy_place
from .rack_range import rack_range_assign
from .racks import MemberRacks, PartitionRacks, build_racks
from .spec import GroupSpec, build_spec, normalize_lag
from .types import (
    Assignment,
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
)

STRATEGIES: tuple[str, ...] = ("range", "roundrobin", "fair", "sticky", "lag", "lagsticky")

_Stateless = Callable[[GroupSpec, LagMap], Assignment]
_STATELESS: dict[str, _Stateless] = {
    "range": lambda spec, _lag: range_assign(spec),
    "roundrobin": lambda spec, _lag: roundrobin_assign(spec),
    "fair": lambda spec, _lag: greedy_place(spec),
    "lag": lag_assign,
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
) -> Assignment:
    """Assign every partition of every subscribed topic to exactly one subscriber.

    ``range``, ``roundrobin``, ``fair`` and ``lag`` ignore ``current``; ``sticky`` and
    ``lagsticky`` keep as much of it as balance allows. Every member of ``subscriptions``
    is a key of the result and each list is sorted.

    ``member_racks`` (``{member: client.rack}``) and ``partition_racks`` (``{partition:
    racks of its replicas}``) make ``range``, ``sticky`` and ``lagsticky`` rack aware
    (KIP-881): members are matched with replica racks where that costs no balance (and,
    for ``lagsticky``, not the lag target). The other strategies validate and ignore them.
    """
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
        )
    if strategy in _STATELESS:
        spec = build_spec(partitions_per_topic, subscriptions)
        racks = build_racks(spec, member_racks, partition_racks)
        if strategy == "range" and racks is not None:
            return rack_range_assign(spec, racks)
        return _STATELESS[strategy](spec, normalize_lag(lag))
    return IncrementalAssignor.solve(
        partitions_per_topic,
        subscriptions,
        current,
        lag,
        lag_aware=strategy == "lagsticky",
        member_racks=member_racks,
        partition_racks=partition_racks,
    )
