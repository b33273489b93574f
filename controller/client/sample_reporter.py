"""A member's self-reports for the Spark lag job: every ``interval`` seconds, how far it
has processed each held partition (``ManagedConsumer.offset_samples``), sent to the
offset-samples topic keyed by partition. A sample lost is a sample late."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from controller.adapters.metadata_scope import track_when_idle
from controller.wire.records import OffsetSample, partition_key


class SampleReporter:
    def __init__(
        self,
        topic: str,
        interval: float,
        kafka: Mapping[str, Any],
        samples: Callable[[float], list[OffsetSample]],
    ) -> None:
        self._topic = topic
        self._interval = interval
        self._samples = samples
        self._producer = AIOKafkaProducer(**kafka, linger_ms=20)

    async def start(self) -> None:
        await self._producer.start()
        track_when_idle(self._producer, self._topic)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            for s in self._samples(time.time()):
                key = partition_key(s.group, s.topic, s.partition)
                with contextlib.suppress(KafkaError):
                    await self._producer.send(self._topic, s.encode(), key=key)

    async def stop(self) -> None:
        await self._producer.stop()
