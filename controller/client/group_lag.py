"""A consumer's lag on the partitions it owns, for the lag-aware group assignors
(``group_assignor("lag" | "lagsticky", lag=...)``).

KAFKA-5337 weighs each partition by its end offset minus the group's committed offset;
a partition without a commit counts per ``auto_offset_reset`` (``earliest``: everything
from its beginning; ``latest``: 0). aiokafka asks an assignor for its subscription
synchronously, so the lag is measured in the background every ``interval`` seconds and
the assignor reads the latest measurement: at a rebalance it is at most that old.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from assignors import TopicPartition
from controller import logs
from controller.tasks import cancel_and_wait

log = logs.get("ballast.group_lag")


class GroupLag:
    def __init__(
        self, *, interval: float = 5.0, reset: Literal["earliest", "latest"] = "latest"
    ) -> None:
        self._interval = interval
        self._reset = reset
        self._lag: dict[TopicPartition, int] = {}
        self._task: asyncio.Task[None] | None = None

    def __call__(self) -> dict[TopicPartition, int]:
        return dict(self._lag)

    async def start(self, consumer: AIOKafkaConsumer) -> None:
        """Measure ``consumer``'s owned partitions until ``stop``."""
        self._task = asyncio.create_task(self._run(consumer))

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def refresh(self, consumer: AIOKafkaConsumer) -> None:
        owned = sorted(consumer.assignment())
        if not owned:
            self._lag = {}
            return
        ends = await consumer.end_offsets(owned)
        starts = await consumer.beginning_offsets(owned) if self._reset == "earliest" else ends
        committed = {tp: await consumer.committed(tp) for tp in owned}
        still = consumer.assignment()  # a rebalance may have run during those awaits
        lag = {}
        for tp in owned:
            done = committed[tp]
            if done is None:
                done = starts[tp]
            # The Fetch high watermark as well: some brokers (Tansu) answer ListOffsets
            # with a stale end for multi-record batches; the larger is right on both.
            end = max(ends[tp], (consumer.highwater(tp) if tp in still else None) or 0)
            lag[TopicPartition(tp.topic, tp.partition)] = max(0, end - done)
        self._lag = lag

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                await self.refresh(consumer)
            except (KafkaError, OSError, TimeoutError) as exc:
                # Broker unreachable for a moment: the last measurement stands.
                log.warning("group_lag_refresh_failed", error=repr(exc))
            await asyncio.sleep(self._interval)
