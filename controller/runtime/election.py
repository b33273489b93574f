"""Leadership of group shards, elected by Kafka itself, with an epoch per tenure.

Every replica joins one consumer group (``ha.election_group``) subscribed to the control
topic, which has one partition per shard. Kafka's group coordinator gives each partition
to exactly one live member: holding partition *k* is leading shard *k*, i.e. every
configured group with ``shard_of(group) == k``. A replica that stops heartbeating (crash,
SIGSTOP, partition from the coordinator) loses its shards after ``session_timeout``. The
group uses Ballast's sticky strategy, so a replica that rejoins takes only the shards
balance requires.

The epoch of a tenure comes from the election, not from what a replica read: the
committed offset of partition *k* is the shard's epoch register. A new leader reads it
and commits ``register + 1`` under its group generation; the coordinator refuses the
commit from a replica that is no longer in the current generation. So an epoch is
granted to one tenure only, and every later tenure gets a larger one. Before each
publication the leader commits its epoch again (``confirm``): a deposed leader that wakes
up finds out before it writes. What it may still have in flight is fenced by the new
leader's markers (docs/fencing.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    ConsumerStoppedError,
    InvalidSessionTimeoutError,
    KafkaError,
)
from aiokafka.structs import OffsetAndMetadata

from controller import logs
from controller.adapters.connection import client_options
from controller.adapters.group_protocol import group_assignor
from controller.adapters.topics import BrokerRefusalError, ensure_topic
from controller.config import Config
from controller.runtime import faultpoints

log = logs.get("ballast.election")

ShardsChanged = Callable[[frozenset[int]], Awaitable[None]]


def shard_of(group: str, shards: int) -> int:
    """Stable across replicas, restarts and languages (CRC-32 of the UTF-8 name)."""
    return zlib.crc32(group.encode()) % shards


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Eager revocation is not acted on: a shard this replica keeps in the next
    generation goes on leading (``assigned`` checks that nobody led it meanwhile).
    Until then every publication still needs ``confirm``."""

    def __init__(self, election: ShardElection) -> None:
        self._e = election

    async def on_partitions_revoked(self, revoked: set[KafkaTP]) -> None:
        self._e.settled.clear()  # publications wait for the new assignment
        if revoked:
            log.info("control_rebalance", shards=sorted(tp.partition for tp in revoked))

    async def on_partitions_assigned(self, assigned: set[KafkaTP]) -> None:
        try:
            await self._e.assigned(frozenset(tp.partition for tp in assigned))
        finally:
            self._e.settled.set()


class ShardElection:
    def __init__(
        self, cfg: Config, replica: str, on_acquire: ShardsChanged, on_release: ShardsChanged
    ) -> None:
        self._cfg = cfg
        self.replica = replica
        self.on_acquire = on_acquire
        self.on_release = on_release
        self.owned: frozenset[int] = frozenset()
        #: shard -> the epoch this replica's tenure holds (committed in the register).
        self.epochs: dict[int, int] = {}
        #: Clear while the control group rebalances: nobody knows yet who keeps what.
        self.settled = asyncio.Event()
        self.settled.set()
        ha = cfg.ha
        self._consumer = AIOKafkaConsumer(
            group_id=ha.election_group,
            client_id=f"{cfg.kafka.client_id}-election-{replica}",
            enable_auto_commit=False,
            session_timeout_ms=int(ha.session_timeout * 1000),
            heartbeat_interval_ms=int(ha.heartbeat_interval * 1000),
            rebalance_timeout_ms=int(ha.session_timeout * 1000),
            partition_assignment_strategy=(group_assignor("sticky"),),
            **client_options(cfg),
        )

    async def start(self) -> None:
        await ensure_control_topic(self._cfg)
        self._consumer.subscribe([self._cfg.ha.control_topic], listener=_Listener(self))
        try:
            await self._consumer.start()
        except InvalidSessionTimeoutError:
            await self._consumer.stop()
            raise BrokerRefusalError(
                f"the brokers refuse ha.session_timeout {self._cfg.ha.session_timeout:g}s: "
                "it must lie within their group.min.session.timeout.ms and "
                "group.max.session.timeout.ms (Kafka's defaults: 6 s and 30 min)"
            ) from None

    async def run(self) -> None:
        """Keep the membership alive (the control topic carries no records)."""
        with contextlib.suppress(ConsumerStoppedError):  # stop() ends the loop
            while True:
                await self._consumer.getmany(timeout_ms=1000)

    async def assigned(self, shards: frozenset[int]) -> None:
        """The coordinator's new assignment: release what went elsewhere, keep a shard
        only if its register still holds this tenure's epoch, acquire the rest."""
        lost = self.owned - shards
        for shard in sorted(self.owned & shards):
            try:
                still_ours = await self._register(shard) == self.epochs.get(shard)
            except KafkaError as exc:
                log.warning("epoch_register_unreadable", shard=shard, error=repr(exc))
                still_ours = False
            if not still_ours:
                lost |= {shard}  # someone led it meanwhile, or we cannot tell
        if lost:
            self.owned -= lost
            for shard in lost:
                self.epochs.pop(shard, None)
            await self.on_release(lost)
        self.settled.set()  # what we keep is verified: its publications may go on
        gained = shards - self.owned
        if gained:
            self.owned |= gained
            await self.on_acquire(gained)

    async def claim_epoch(self, shard: int, floor: int) -> int | None:
        """A new epoch for this tenure of ``shard``, above the register and ``floor``
        (the highest epoch in the log); None when the coordinator refuses it."""
        try:
            register = await self._register(shard)
        except KafkaError as exc:
            log.warning("epoch_register_unreadable", shard=shard, error=repr(exc))
            return None
        epoch = max(register or 0, floor) + 1
        faultpoints.reached("acquire.before_epoch")
        if not await self._commit(shard, epoch):
            return None
        self.epochs[shard] = epoch
        return epoch

    async def confirm(self, shard: int) -> bool:
        """Still the leader of ``shard``, as the coordinator sees it right now (during a
        control-group rebalance: once it is over, or False after a session timeout)."""
        try:
            async with asyncio.timeout(self._cfg.ha.session_timeout):
                await self.settled.wait()
        except TimeoutError:
            return False
        epoch = self.epochs.get(shard)
        return shard in self.owned and epoch is not None and await self._commit(shard, epoch)

    async def _register(self, shard: int) -> int | None:
        """The shard's epoch register (None: never written)."""
        committed: int | None = await self._consumer.committed(self._tp(shard))
        return committed

    async def _commit(self, shard: int, epoch: int) -> bool:
        try:
            await self._consumer.commit({self._tp(shard): OffsetAndMetadata(epoch, self.replica)})
        except KafkaError as exc:  # includes IllegalStateError: not assigned right now
            log.warning("leadership_not_confirmed", shard=shard, error=repr(exc))
            return False
        return True

    def _tp(self, shard: int) -> KafkaTP:
        return KafkaTP(self._cfg.ha.control_topic, shard)

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
        ensured = await ensure_topic(
            admin,
            ha.control_topic,
            ha.shards,
            cfg.assignments.replication_factor,
            compacted=False,
            setting="ha.control_topic",
        )
    finally:
        await admin.close()
    found = ensured.partitions
    if found != ha.shards:
        raise BrokerRefusalError(
            f"control topic {ha.control_topic!r} has {found} partitions but ha.shards is "
            f"{ha.shards}; every replica must use the topic's partition count"
        )
