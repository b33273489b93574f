"""Ballast's strategies in Kafka's own group protocol, for fleets that use ``subscribe()``
and no controller (docs/client.md, "Without a controller"): what a member says in its
subscription, and what the group leader makes of every member's claims. Pure: the
plug-in for a client library (``controller.adapters.group_protocol`` for aiokafka) calls
these and does the I/O.

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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from assignors import STRATEGIES, TopicPartition, assign
from controller.wire.records import (
    MAX_COUNTER,
    MAX_OFFSET,
    Name,
    Offset,
    Partition,
    PartitionNumber,
    decode,
)

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


def protocol_name(strategy: str) -> str:
    """The assignor's name in the group protocol; ``ValueError`` for an unknown strategy."""
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
        )
    return f"ballast-{strategy}"


def subscription_user_data(
    generation: int, owned: Iterable[TopicPartition], lag: Mapping[TopicPartition, int]
) -> bytes:
    """A member's user data: what it owns since ``generation`` and the lag it measured
    (only for partitions it owns, clamped into what a reader accepts)."""
    mine = set(owned)
    data: dict[str, object] = {
        "v": USER_DATA_VERSION,
        "generation": generation,
        "owned": [[tp.topic, tp.partition] for tp in sorted(mine)],
    }
    measured = sorted(
        [tp.topic, tp.partition, min(max(0, v), MAX_OFFSET)] for tp, v in lag.items() if tp in mine
    )
    if measured:
        data["lag"] = measured
    return json.dumps(data).encode()


def assignment_generation(user_data: bytes) -> int:
    """The generation the leader handed out with an assignment (-1: unreadable)."""
    try:
        return UserData.read(user_data).generation
    except ValueError:
        return -1


class Claims(NamedTuple):
    """What one member's user data says."""

    generation: int
    owned: list[TopicPartition]
    lag: dict[TopicPartition, int]


#: Claims of a member that sent none, or whose user data could not be read.
NO_CLAIMS = Claims(-1, [], {})


def read_claims(user_data: bytes) -> Claims:
    """One member's claims; ``ValueError`` when its user data is malformed."""
    if not user_data:
        return NO_CLAIMS
    data = UserData.read(user_data)
    owned = [TopicPartition(t, p) for t, p in data.owned]
    lag = {TopicPartition(t, p): v for t, p, v in data.lag}
    return Claims(data.generation, owned, lag)


@dataclass(frozen=True)
class LedRebalance:
    """A rebalance as its leader computed it: ``assign(strategy, counts, subscriptions,
    current=current, lag=lag) == result``. ``generation`` goes to every member with its
    assignment (``assignment_user_data``)."""

    counts: dict[str, int]
    subscriptions: dict[str, list[str]]
    current: dict[str, list[TopicPartition]]
    lag: dict[TopicPartition, int] | None
    result: dict[str, list[TopicPartition]]
    generation: int


def lead(
    strategy: str,
    counts: Mapping[str, int],
    subscriptions: Mapping[str, list[str]],
    claims: Mapping[str, Claims],
    known_lag: dict[TopicPartition, int],
) -> LedRebalance:
    """The leader's rebalance: each partition to the newest generation's claimant (no
    claim beyond a topic's partitions counts), lag from what members report now and
    what ``known_lag`` heard before (updated here), and ``strategy``'s result. A
    lag-aware strategy with no lag known balances partition counts (``lag`` is None)."""
    best: dict[TopicPartition, tuple[int, str]] = {}
    heard: dict[TopicPartition, int] = {}
    generations = [-1]
    for member in sorted(subscriptions):
        said = claims.get(member, NO_CLAIMS)
        generations.append(said.generation)
        heard.update(said.lag)
        for tp in said.owned:
            if tp.partition >= counts.get(tp.topic, 0):
                continue
            held = best.get(tp)
            if held is None or said.generation > held[0]:
                best[tp] = (said.generation, member)
    current: dict[str, list[TopicPartition]] = {}
    for tp, (_, member) in sorted(best.items()):
        current.setdefault(member, []).append(tp)
    lag: dict[TopicPartition, int] | None = None
    if strategy in LAG_AWARE:
        known_lag.update(heard)
        lag = {tp: v for tp, v in known_lag.items() if tp.partition < counts.get(tp.topic, 0)}
        lag = lag or None
    result = assign(strategy, dict(counts), dict(subscriptions), current=current, lag=lag)
    generation = min(max(generations) + 1, MAX_COUNTER)
    return LedRebalance(dict(counts), dict(subscriptions), current, lag, result, generation)


def assignment_user_data(generation: int) -> bytes:
    """The user data the leader sends every member with its assignment."""
    return json.dumps({"v": USER_DATA_VERSION, "generation": generation}).encode()


def by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """An assignment as Kafka's ConsumerProtocol writes it: topics in order, each with
    its partitions."""
    out: dict[str, list[int]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp.partition)
    return sorted(out.items())
