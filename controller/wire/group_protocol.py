"""Ballast's strategies as assignors for Kafka's own group protocol (aiokafka), for fleets
that use ``subscribe()`` and no controller (docs/client.md, "Without a controller").

The group leader runs ``assign`` during a rebalance, through ``assignors.assign``: its
result is the pure function's on the same subscriptions, ownership and lag. Each
member's subscription carries JSON user data (KIP-54, with KIP-341's generation)::

    {"v": 1, "generation": g, "owned": [[topic, partition], ...],
     "lag": [[topic, partition, lag], ...]}

so the sticky strategies keep ownership across rebalances and leader changes; where two
members claim a partition, the claim of the newer generation wins (a member that was
paused and expelled comes back with stale claims). ``lag`` is what the member measured
for the partitions it owns (``GroupLag``); the leader also remembers what it heard in
earlier rebalances for partitions whose owner left. A malformed blob counts as owning
nothing and reporting no lag: it is logged and counted, never a failed rebalance.
Unknown keys are ignored, so members of other versions interoperate.

Protocol names are stable: ``ballast-range``, ``ballast-roundrobin``, ``ballast-fair``,
``ballast-sticky``, ``ballast-lag``, ``ballast-lagsticky``. A member may list several
assignors; the broker picks one every member supports, as for Kafka's own.

The controller's election uses ``group_assignor("sticky")`` for its control group, so
a replica that comes back does not take shards from a healthy leader just because it
sorts first: only the shards that balance requires move.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, NamedTuple

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from pydantic import BaseModel, ConfigDict, Field

from assignors import STRATEGIES, TopicPartition, assign
from controller import logs
from controller.wire.records import (
    MAX_COUNTER,
    MAX_OFFSET,
    Name,
    Offset,
    Partition,
    PartitionNumber,
    decode,
)

log = logs.get("ballast.group_protocol")

#: Version of the JSON user data. Readers ignore keys they do not know.
USER_DATA_VERSION = 1
#: Strategies that weigh partitions by lag.
LAG_AWARE = frozenset({"lag", "lagsticky"})

#: What a member measured for the partitions it owns, read when it joins a rebalance.
LagSource = Callable[[], Mapping[TopicPartition, int]]


class UserData(BaseModel):
    """The user data's schema. Unknown keys are ignored (other versions' members)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    generation: Annotated[int, Field(ge=-1, le=MAX_COUNTER, strict=True)]
    owned: list[Partition] = Field(default_factory=list)
    lag: list[tuple[Name, PartitionNumber, Offset]] = Field(default_factory=list)

    @classmethod
    def read(cls, raw: bytes) -> UserData:
        """The blob's claims; ``ValueError`` (``DecodeError``) whatever else it holds."""
        return decode(cls, raw, "user data")


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
        data: dict[str, Any] = {
            "v": USER_DATA_VERSION,
            "generation": cls.generation,
            "owned": cls.owned or [],
        }
        lag = cls._own_lag()
        if lag:
            data["lag"] = sorted([tp.topic, tp.partition, v] for tp, v in lag.items())
        return ConsumerProtocolMemberMetadata(
            cls.version, sorted(topics), json.dumps(data).encode()
        )

    @classmethod
    def assign(
        cls, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        subscriptions = {m: sorted(md.subscription) for m, md in members.items()}
        topics = {t for ts in subscriptions.values() for t in ts}
        counts = {t: len(cluster.partitions_for_topic(t) or ()) for t in sorted(topics)}
        best: dict[TopicPartition, tuple[int, str]] = {}
        heard: dict[TopicPartition, int] = {}
        generations = [-1]
        for member in sorted(members):
            claims = cls._claims(member, members[member].user_data)
            generations.append(claims.generation)
            heard.update(claims.lag)
            for tp in claims.owned:
                if tp.partition >= counts.get(tp.topic, 0):
                    continue
                held = best.get(tp)
                if held is None or claims.generation > held[0]:
                    best[tp] = (claims.generation, member)
        current: dict[str, list[TopicPartition]] = {}
        for tp, (_, member) in sorted(best.items()):
            current.setdefault(member, []).append(tp)
        lag = cls._lag(heard, counts)
        result = assign(cls.strategy, counts, subscriptions, current=current, lag=lag)
        cls.last = LedRebalance(counts, subscriptions, current, lag, result)
        generation = min(max(generations) + 1, MAX_COUNTER)
        data = json.dumps({"v": USER_DATA_VERSION, "generation": generation}).encode()
        out = {}
        for member, parts in result.items():
            by_topic: dict[str, list[int]] = {}
            for tp in parts:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            out[member] = ConsumerProtocolMemberAssignment(
                cls.version, sorted(by_topic.items()), data
            )
        return out

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        cls.owned = sorted(TopicPartition(tp.topic, tp.partition) for tp in assignment.partitions())
        try:
            cls.generation = UserData.read(assignment.user_data).generation
        except ValueError:
            cls.generation = -1

    @classmethod
    def _own_lag(cls) -> dict[TopicPartition, int]:
        if cls.lag_source is None or cls.strategy not in LAG_AWARE:
            return {}
        owned = set(cls.owned or ())
        try:  # the application's callable and its numbers: never fail a rebalance
            lag = dict(cls.lag_source())
            return {tp: min(max(0, int(v)), MAX_OFFSET) for tp, v in lag.items() if tp in owned}
        except Exception as exc:
            log.warning("lag_source_failed", assignor=cls.name, error=repr(exc))
            return {}

    @classmethod
    def _lag(
        cls, heard: Mapping[TopicPartition, int], counts: Mapping[str, int]
    ) -> dict[TopicPartition, int] | None:
        if cls.strategy not in LAG_AWARE:
            return None
        cls.known_lag.update(heard)
        lag = {tp: v for tp, v in cls.known_lag.items() if tp.partition < counts.get(tp.topic, 0)}
        if not lag:
            if cls.lag_unavailable == 0:
                log.warning(
                    "lag_unavailable",
                    assignor=cls.name,
                    detail="no member reported lag: balancing partition counts only",
                )
            cls.lag_unavailable += 1
            return None
        return lag

    @classmethod
    def _claims(cls, member: str, user_data: bytes) -> Claims:
        if not user_data:
            return Claims(-1, [], {})
        try:
            data = UserData.read(user_data)
        except ValueError as exc:
            cls.malformed += 1
            log.warning("malformed_assignor_user_data", member=member[:255], error=str(exc))
            return Claims(-1, [], {})
        owned = [TopicPartition(t, p) for t, p in data.owned]
        lag = {TopicPartition(t, p): v for t, p, v in data.lag}
        return Claims(data.generation, owned, lag)


class Claims(NamedTuple):
    """What one member's user data says."""

    generation: int
    owned: list[TopicPartition]
    lag: dict[TopicPartition, int]


@dataclass(frozen=True)
class LedRebalance:
    """A rebalance as its leader computed it: ``assign(strategy, counts, subscriptions,
    current=current, lag=lag) == result``."""

    counts: dict[str, int]
    subscriptions: dict[str, list[str]]
    current: dict[str, list[TopicPartition]]
    lag: dict[TopicPartition, int] | None
    result: dict[str, list[TopicPartition]]


def group_assignor(strategy: str, *, lag: LagSource | None = None) -> type[BallastAssignor]:
    """An aiokafka assignor running ``strategy`` (a name in ``assignors.STRATEGIES``),
    registered in the group protocol as ``ballast-<strategy>``. Make one per consumer.

    ``lag``: for ``lag`` and ``lagsticky``, a callable returning this consumer's lag for
    the partitions it owns (``controller.client.GroupLag``), read when it joins a
    rebalance. Without it, and with no other member reporting, a lag-aware strategy
    balances partition counts (logged once, counted in ``lag_unavailable``)."""
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
        )
    return type(
        f"Ballast{strategy.capitalize()}Assignor",
        (BallastAssignor,),
        {
            "name": f"ballast-{strategy}",
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
