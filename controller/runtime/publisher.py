"""Writing a group's plans and fences to the assignments topic: acks=all, idempotent
and, with HA, transactional per shard, one produce a step."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from controller.adapters.connection import client_options
from controller.adapters.metadata_scope import track_when_idle
from controller.adapters.topics import BrokerRefusalError
from controller.config import Config
from controller.core.plan_records import Encoded
from controller.wire.records import (
    Fence,
    fence_key,
)
from controller.wire.signing import Signer

#: Below Kafka's default ``message.max.bytes`` (1 MiB), which a batch must respect.
PUBLISH_BATCH_BYTES = 512 * 1024


class AssignmentPublisher:
    """Writes assignment records and tombstones; acks=all, idempotent where supported.

    With a ``transactional_id`` each publication is one transaction, and starting the
    publisher fences any older producer with the same id (the deposed leader's)."""

    def __init__(
        self, cfg: Config, transactional_id: str | None = None, signer: Signer | None = None
    ) -> None:
        self._cfg = cfg
        self._signer = signer
        self._transactional = transactional_id is not None
        self._producer = AIOKafkaProducer(
            **client_options(cfg),
            client_id=f"{cfg.kafka.client_id}-publisher",
            acks="all",
            enable_idempotence=cfg.kafka.idempotent_producer or self._transactional,
            transactional_id=transactional_id,
            request_timeout_ms=int(cfg.kafka.request_timeout * 1000),
            linger_ms=0,
            # A step's records are handed over in one go: large batches carry them in
            # one produce request per partition instead of one per 16 KiB.
            max_batch_size=PUBLISH_BATCH_BYTES,
        )

    async def start(self) -> None:
        # The topic exists (ensured at start-up): the first refresh already names it.
        track_when_idle(self._producer, self._cfg.assignments.name)
        try:
            await self._producer.start()
        except KafkaConnectionError:
            raise
        except KafkaError as exc:
            await self._producer.stop()
            if not (self._cfg.kafka.idempotent_producer or self._transactional):
                raise
            # Starting an idempotent or transactional producer asks the brokers for a
            # producer id (InitProducerId); brokers without it fail here, not later.
            raise BrokerRefusalError(
                f"the brokers refused a producer id ({exc}): set kafka.idempotent_producer: "
                "false (and no ha.transactional_id_prefix), or use brokers that support "
                "idempotent producers (the embedded Tansu does not)"
            ) from None

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish_fence(self, group: str, epoch: int, replica: str) -> dict[int, int]:
        """A fence marker for ``group`` on every partition of the assignments topic; where
        each landed (partition -> offset)."""
        topic = self._cfg.assignments.name
        value = Fence(
            group=group, controller_epoch=epoch, replica=replica, issued_at=time.time()
        ).encode()
        key = fence_key(group)
        headers = [] if self._signer is None else self._signer.sign("assignments", key, value)
        scope = self._producer.transaction() if self._transactional else contextlib.nullcontext()
        async with scope:
            partitions = sorted(await self._producer.partitions_for(topic))
            futures = [
                await self._producer.send(topic, value, key=key, partition=p, headers=headers)
                for p in partitions
            ]
            landed = await asyncio.gather(*futures)
        return {meta.partition: meta.offset for meta in landed}

    async def flush(self) -> None:
        """Until every record handed to the producer is acknowledged or failed."""
        await self._producer.flush()

    async def publish(self, records: Sequence[Encoded]) -> None:
        """One step's records, handed to the producer together (batched per partition,
        in order per key) and acknowledged once: one round trip, not one per record."""
        topic = self._cfg.assignments.name
        scope = self._producer.transaction() if self._transactional else contextlib.nullcontext()
        async with scope:
            futures = [
                await self._producer.send(topic, value=r.value, key=r.key, headers=r.headers)
                for r in records
            ]
            await asyncio.gather(*futures)
