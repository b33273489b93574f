"""The poller's raw offsets written to the samples topic for the Spark lag job."""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka import AIOKafkaProducer

from assignors import TopicPartition
from controller.adapters.connection import client_options
from controller.adapters.metadata_scope import track_when_idle
from controller.adapters.packed_send import PackedSender, Placements
from controller.config import Config
from controller.wire.offsets import PartitionOffsets
from controller.wire.records import (
    encode_samples,
)


class SamplePublisher:
    """Writes the poller's raw offsets to the samples topic for the Spark lag job."""

    def __init__(self, cfg: Config, topic: str) -> None:
        self._cfg = cfg
        self._topic = topic
        #: Where each sampled partition's key goes, by group (the key names the group):
        #: the keys are the same every poll.
        self._placements: dict[str, Placements] = {}
        self._producer = AIOKafkaProducer(
            **client_options(cfg),
            client_id=f"{cfg.kafka.client_id}-samples",
            acks="all",
            linger_ms=20,
            request_timeout_ms=int(cfg.kafka.request_timeout * 1000),
        )

    async def start(self) -> None:
        await self._producer.start()
        track_when_idle(self._producer, self._topic)

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(
        self, group: str, offsets: Mapping[TopicPartition, PartitionOffsets], sampled_at: float
    ) -> list[str]:
        """Write one sample per partition, in partition order; returns why each one not
        written was refused (a commit past the log's end: a topic recreated, a consumer
        committing ahead)."""
        out = PackedSender(self._producer, self._placements.setdefault(group, Placements()))
        refused: list[str] = []
        rows = ((t, p, *o) for (t, p), o in sorted(offsets.items()))
        encoded = encode_samples(group, sampled_at, rows, refused)
        await out.add_many(self._topic, ((k, v, (t, p)) for t, p, k, v in encoded))
        await out.flush()
        return refused
