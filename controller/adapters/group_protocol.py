"""Ballast's strategies as assignors for aiokafka's group protocol (the pure protocol:
``controller.wire.group_protocol``). aiokafka's plug-in points are internal modules:
``AbstractPartitionAssignor`` (``aiokafka.coordinator.assignors.abstract``), the
``ConsumerProtocolMember*`` structs (``aiokafka.coordinator.protocol``) and
``ClusterMetadata`` (``aiokafka.cluster``).

The controller's election uses ``group_assignor("sticky")`` for its control group, so
a replica that comes back does not take shards from a healthy leader just because it
sorts first: only the shards that balance requires move.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from assignors import TopicPartition
from controller import logs
from controller.wire.group_protocol import (
    LAG_AWARE,
    NO_CLAIMS,
    Claims,
    LagSource,
    LedRebalance,
    assignment_generation,
    assignment_user_data,
    by_topic,
    lead,
    protocol_name,
    read_claims,
    subscription_user_data,
)

log = logs.get("ballast.group_protocol")


class BallastAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Base of the classes ``group_assignor`` makes; aiokafka calls them as classes, so
    each holds its consumer's state in class attributes (one class per consumer)."""

    name: ClassVar[str] = "ballast"
    strategy: ClassVar[str] = "sticky"
    version: ClassVar[int] = 0
    owned: ClassVar[list[TopicPartition] | None] = None
    generation: ClassVar[int] = -1
    lag_source: ClassVar[LagSource | None] = None
    #: The lag this member heard of last, as leader (partition -> lag): a partition whose
    #: owner left keeps the weight its owner last reported.
    known_lag: ClassVar[dict[TopicPartition, int]]
    #: Claims that could not be read, since start (for tests and metrics).
    malformed: ClassVar[int] = 0
    #: Rebalances of a lag-aware strategy with no lag from any member (count balance).
    lag_unavailable: ClassVar[int] = 0
    #: The last rebalance this member led: the pure function's inputs and its result.
    last: ClassVar[LedRebalance | None] = None

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        data = subscription_user_data(cls.generation, cls.owned or (), cls._own_lag())
        return ConsumerProtocolMemberMetadata(cls.version, sorted(topics), data)

    @classmethod
    def assign(
        cls, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        subscriptions = {m: sorted(md.subscription) for m, md in members.items()}
        topics = {t for ts in subscriptions.values() for t in ts}
        counts = {t: len(cluster.partitions_for_topic(t) or ()) for t in sorted(topics)}
        claims = {m: cls._claims(m, md.user_data) for m, md in members.items()}
        led = lead(cls.strategy, counts, subscriptions, claims, cls.known_lag)
        if cls.strategy in LAG_AWARE and led.lag is None:
            if cls.lag_unavailable == 0:
                log.warning(
                    "lag_unavailable",
                    assignor=cls.name,
                    detail="no member reported lag: balancing partition counts only",
                )
            cls.lag_unavailable += 1
        cls.last = led
        data = assignment_user_data(led.generation)
        return {
            member: ConsumerProtocolMemberAssignment(cls.version, by_topic(parts), data)
            for member, parts in led.result.items()
        }

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        cls.owned = sorted(TopicPartition(tp.topic, tp.partition) for tp in assignment.partitions())
        cls.generation = assignment_generation(assignment.user_data)

    @classmethod
    def _own_lag(cls) -> dict[TopicPartition, int]:
        if cls.lag_source is None or cls.strategy not in LAG_AWARE:
            return {}
        try:  # the application's callable and its numbers: never fail a rebalance
            return {tp: int(v) for tp, v in dict(cls.lag_source()).items()}
        except Exception as exc:
            log.warning("lag_source_failed", assignor=cls.name, error=repr(exc))
            return {}

    @classmethod
    def _claims(cls, member: str, user_data: bytes) -> Claims:
        try:
            return read_claims(user_data)
        except ValueError as exc:
            cls.malformed += 1
            log.warning("malformed_assignor_user_data", member=member[:255], error=str(exc))
            return NO_CLAIMS


def group_assignor(strategy: str, *, lag: LagSource | None = None) -> type[BallastAssignor]:
    """An aiokafka assignor running ``strategy`` (a name in ``assignors.STRATEGIES``),
    registered in the group protocol as ``ballast-<strategy>``. Make one per consumer.

    ``lag``: for ``lag`` and ``lagsticky``, a callable returning this consumer's lag for
    the partitions it owns (``controller.client.GroupLag``), read when it joins a
    rebalance. Without it, and with no other member reporting, a lag-aware strategy
    balances partition counts (logged once, counted in ``lag_unavailable``)."""
    name = protocol_name(strategy)
    return type(
        f"Ballast{strategy.capitalize()}Assignor",
        (BallastAssignor,),
        {
            "name": name,
            "strategy": strategy,
            "owned": None,
            "generation": -1,
            "lag_source": staticmethod(lag) if lag is not None else None,
            "known_lag": {},
            "malformed": 0,
            "lag_unavailable": 0,
            "last": None,
        },
    )
