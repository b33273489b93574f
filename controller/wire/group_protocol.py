"""Ballast's strategies as assignors for Kafka's own group protocol (aiokafka).

The group leader runs ``assign`` during a rebalance. Each member's subscription carries
what it owned and the generation it owned it in (KIP-54's user data, with KIP-341's
generation), so the sticky strategies keep ownership across rebalances and leader
changes; where two members claim a partition, the claim of the newer generation wins
(a member that was paused and expelled comes back with stale claims). A malformed claim
counts as owning nothing: it is logged, never a failed rebalance.

The controller's own election uses ``group_assignor("sticky")`` for its control group, so
a replica that comes back does not take shards from a healthy leader just because it
sorts first: only the shards that balance requires move.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from assignors import STRATEGIES, TopicPartition, assign
from controller import logs

log = logs.get("ballast.group_protocol")

#: Version of the JSON user data (``{"v": 1, "generation": g, "owned": [[t, p], ...]}``).
USER_DATA_VERSION = 1


class BallastAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Base of the classes ``group_assignor`` makes; aiokafka calls them as classes, so
    each holds its consumer's state in class attributes (one class per consumer)."""

    name: ClassVar[str] = "ballast"
    strategy: ClassVar[str] = "sticky"
    version: ClassVar[int] = 0
    owned: ClassVar[list[TopicPartition] | None] = None
    generation: ClassVar[int] = -1
    #: Claims that could not be read, since start (for tests and metrics).
    malformed: ClassVar[int] = 0

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        data = {"v": USER_DATA_VERSION, "generation": cls.generation, "owned": cls.owned or []}
        return ConsumerProtocolMemberMetadata(
            cls.version, sorted(topics), json.dumps(data).encode()
        )

    @classmethod
    def assign(
        cls, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        subscriptions = {m: list(md.subscription) for m, md in members.items()}
        topics = {t for ts in subscriptions.values() for t in ts}
        counts = {t: len(cluster.partitions_for_topic(t) or ()) for t in topics}
        best: dict[TopicPartition, tuple[int, str]] = {}
        generations = [-1]
        for member in sorted(members):
            generation, owned = cls._claims(member, members[member].user_data)
            generations.append(generation)
            for tp in owned:
                if tp.partition >= counts.get(tp.topic, 0):
                    continue
                held = best.get(tp)
                if held is None or generation > held[0]:
                    best[tp] = (generation, member)
        current: dict[str, list[TopicPartition]] = {}
        for tp, (_, member) in best.items():
            current.setdefault(member, []).append(tp)
        result = assign(cls.strategy, counts, subscriptions, current=current)
        data = json.dumps({"v": USER_DATA_VERSION, "generation": max(generations) + 1}).encode()
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
            cls.generation = int(json.loads(assignment.user_data)["generation"])
        except (ValueError, TypeError, KeyError):
            cls.generation = -1

    @classmethod
    def _claims(cls, member: str, user_data: bytes) -> tuple[int, list[TopicPartition]]:
        if not user_data:
            return -1, []
        try:
            data: Any = json.loads(user_data)
            generation = int(data["generation"])
            owned = [TopicPartition(str(t), int(p)) for t, p in data["owned"]]
        except (ValueError, TypeError, KeyError) as exc:
            cls.malformed += 1
            log.warning("malformed_assignor_user_data", member=member, error=repr(exc))
            return -1, []
        return generation, owned


def group_assignor(strategy: str) -> type[BallastAssignor]:
    """An aiokafka assignor running ``strategy`` (a name in ``assignors.STRATEGIES``),
    registered in the group protocol as ``ballast-<strategy>``."""
    if strategy not in STRATEGIES:
        raise ValueError(
            f"unknown strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
        )
    return type(
        f"Ballast{strategy.capitalize()}Assignor",
        (BallastAssignor,),
        {"name": f"ballast-{strategy}", "strategy": strategy, "owned": None, "generation": -1},
    )
