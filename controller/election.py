"""Leadership of group shards, elected by Kafka itself.

Every replica joins one consumer group (``ha.election_group``) subscribed to the control
topic, which has one partition per shard. Kafka's group coordinator gives each partition
to exactly one live member: holding partition *k* is leading shard *k*, i.e. every
configured group with ``shard_of(group) == k``. A replica that stops heartbeating (crash,
SIGSTOP, partition from the coordinator) loses its shards after ``session_timeout``.

Before each publication the leader calls ``confirm``: an offset commit under its group
generation, which the coordinator refuses once that generation is over. A deposed leader
that wakes up therefore finds out before it writes, not after.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    CommitFailedError,
    ConsumerStoppedError,
    IllegalGenerationError,
    RebalanceInProgressError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
)

from . import logs
from .config import Config
from .kafka_io import TopicConfigError, client_options

log = logs.get("ballast.election")

ShardsChanged = Callable[[frozenset[int]], Awaitable[None]]


def shard_of(group: str, shards: int) -> int:
    """Stable across replicas, restarts and languages (CRC-32 of the UTF-8 name)."""
    return zlib.crc32(group.encode()) % shards


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, election: ShardElection) -> None:
        self._e = election

    async def on_partitions_revoked(self, revoked: set[KafkaTP]) -> None:
        shards = frozenset(tp.partition for tp in revoked)
        self._e.owned -= shards
        if shards:
            await self._e.on_release(shards)

    async def on_partitions_assigned(self, assigned: set[KafkaTP]) -> None:
        shards = frozenset(tp.partition for tp in assigned)
        self._e.owned |= shards
        if shards:
            await self._e.on_acquire(shards)


class ShardElection:
    def __init__(
        self, cfg: Config, replica: str, on_acquire: ShardsChanged, on_release: ShardsChanged
    ) -> None:
        self._cfg = cfg
        self.replica = replica
        self.on_acquire = on_acquire
        self.on_release = on_release
        self.owned: frozenset[int] = frozenset()
        self._confirmations = 0
        ha = cfg.ha
        self._consumer = AIOKafkaConsumer(
            group_id=ha.election_group,
            client_id=f"{cfg.kafka.client_id}-election-{replica}",
            enable_auto_commit=False,
            session_timeout_ms=int(ha.session_timeout * 1000),
            heartbeat_interval_ms=int(ha.heartbeat_interval * 1000),
            rebalance_timeout_ms=int(ha.session_timeout * 1000),
            **client_options(cfg),
        )

    async def start(self) -> None:
        await ensure_control_topic(self._cfg)
        self._consumer.subscribe([self._cfg.ha.control_topic], listener=_Listener(self))
        await self._consumer.start()

    async def run(self) -> None:
        """Keep the membership alive (the control topic carries no records)."""
        with contextlib.suppress(ConsumerStoppedError):  # stop() ends the loop
            while True:
                await self._consumer.getmany(timeout_ms=1000)

    async def confirm(self, shard: int) -> bool:
        """Still the leader of ``shard``, as the coordinator sees it right now."""
        if shard not in self.owned:
            return False
        self._confirmations += 1
        tp = KafkaTP(self._cfg.ha.control_topic, shard)
        try:
            await self._consumer.commit({tp: self._confirmations})
        except (
            CommitFailedError,
            IllegalGenerationError,
            UnknownMemberIdError,
            RebalanceInProgressError,
        ) as exc:
            log.warning("leadership_not_confirmed", shard=shard, error=repr(exc))
            return False
        return True

    async def stop(self) -> None:
        """Leave the group at once, so the other replicas take over without waiting for
        the session to time out."""
        await self._consumer.stop()


async def ensure_control_topic(cfg: Config) -> None:
    """Create the control topic with one partition per shard; refuse one whose partition
    count differs (replicas would disagree on which groups a shard holds)."""
    ha = cfg.ha
    admin = AIOKafkaAdminClient(client_id=f"{cfg.kafka.client_id}-admin", **client_options(cfg))
    await admin.start()
    try:
        if ha.control_topic not in await admin.list_topics():
            with contextlib.suppress(TopicAlreadyExistsError):  # another replica raced us
                await admin.create_topics([NewTopic(ha.control_topic, ha.shards, 1)])
        meta = await admin.describe_topics([ha.control_topic])
    finally:
        await admin.close()
    found = len(meta[0]["partitions"])
    if found != ha.shards:
        raise TopicConfigError(
            f"control topic {ha.control_topic!r} has {found} partitions but ha.shards is "
            f"{ha.shards}; every replica must use the topic's partition count"
        )
