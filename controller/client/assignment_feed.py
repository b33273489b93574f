"""A member's feed of what it is to hold, read with aiokafka: its one partition of the
assignments topic, each record judged by a ``GrantReader`` (``grants.py``). The feed
keeps only the latest grant: applying it is the consumer's business, and a newer record
replaces one not yet applied.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka import TopicPartition as KafkaTP

from controller import logs
from controller.adapters.metadata import topic_metadata
from controller.client.grants import Grant, GrantReader, topic_missing
from controller.wire.assignments import READ_ISOLATION, assignments_partition
from controller.wire.signing import Verifier

log = logs.get("ballast.client")

#: How long a member waits for the assignments topic to exist (s).
TOPIC_WAIT = 30.0


class AssignmentFeed:
    def __init__(
        self,
        group: str,
        member: str,
        instance: str,
        topic: str,
        kafka: Mapping[str, Any],
        *,
        fetch_max_wait_ms: int,
        verifier: Verifier | None,
    ) -> None:
        """``instance``: this process; a grant issued to another process under the same
        member id (its predecessor's) is read as holding nothing. ``kafka``: bootstrap and
        security settings (aiokafka names)."""
        self.member = member
        self.topic = topic
        self._grants = GrantReader(group, member, instance, verifier=verifier)
        #: The latest grant not yet taken, when it arrived, and an event set on arrival.
        self.pending: Grant | None = None
        self.pending_since = 0.0
        self.changed = asyncio.Event()
        # Kafka answers a waiting fetch as soon as a record lands, so the wait only sets
        # how often an idle reader asks; a broker that answers late delivers records
        # sooner with less (docs/performance.md, "Failover").
        self.reader = AIOKafkaConsumer(
            **kafka,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=fetch_max_wait_ms,
            isolation_level=READ_ISOLATION,
        )

    async def start(self) -> None:
        """Connect, once the assignments topic exists, to the member's partition of it."""
        await self.reader.start()
        tp = KafkaTP(self.topic, await self._own_partition())
        self.reader.assign([tp])
        await self.reader.seek_to_beginning(tp)

    async def catch_up(self) -> None:
        """Read to the member's latest record (a restart acts on it before it announces
        itself)."""
        (tp,) = self.reader.assignment()
        end = (await self.reader.end_offsets([tp]))[tp]
        while True:
            batch = await self.reader.getmany(tp, timeout_ms=200)
            for msg in batch.get(tp, []):
                self._consider(msg)
            position = await self.reader.position(tp)
            if position >= max(end, self.reader.highwater(tp) or 0) and not batch:
                return

    async def follow(self) -> None:
        """Read on, for as long as the member lives."""
        async for msg in self.reader:
            self._consider(msg)

    async def stop(self) -> None:
        await self.reader.stop()

    def take(self) -> Grant | None:
        grant, self.pending = self.pending, None
        return grant

    async def _own_partition(self) -> int:
        """Our key's partition of the assignments topic, once the topic exists. Asked
        about by name without creating it (``topic_metadata``): on Kafka a client's
        bootstrap learns no topic, and ``topics()`` would read the whole cluster's
        metadata without keeping it."""
        deadline = time.monotonic() + TOPIC_WAIT
        while True:
            count = (await topic_metadata(self.reader, [self.topic])).counts.get(self.topic)
            if count:
                return assignments_partition(self._grants.key, count)
            if time.monotonic() > deadline:
                raise topic_missing(self.topic, TOPIC_WAIT)
            await asyncio.sleep(0.2)

    @property
    def epoch(self) -> int:
        """Highest controller epoch seen for the group."""
        return self._grants.epoch

    def _consider(self, msg: ConsumerRecord) -> None:
        grant = self._grants.read(msg)
        if grant is not None:
            self.pending = grant
            self.pending_since = time.monotonic()
            self.changed.set()
