"""A member's feed of what it is to hold: its one partition of the assignments topic,
read through the fencing rule, each current record turned into a ``Grant``.

Only the record keyed by the member (and the group's fence) matters; a record from a
fenced controller, a malformed one, or (with a verifier) an unsigned one is skipped with
a metric and a log line. The feed keeps only the latest grant: applying it is the
consumer's business, and a newer record replaces one not yet applied.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka import TopicPartition as KafkaTP
from prometheus_client import Counter

from controller import logs
from controller.adapters.metadata import topic_metadata
from controller.wire.assignments import READ_ISOLATION, assignments_partition, log_entry
from controller.wire.fencing import AssignmentView, Verdict
from controller.wire.records import LoggedFence, LoggedRecord, assignment_key, fence_key
from controller.wire.signing import Verifier

log = logs.get("ballast.client")

INVALID_RECORDS = Counter(
    "ballast_client_invalid_records_total",
    "Records of the assignments topic a managed consumer skipped: malformed, or not "
    "signed by the controller's key when one is configured.",
    ["source"],
)

#: How long a member waits for the assignments topic to exist (s).
TOPIC_WAIT = 30.0


class Grant(NamedTuple):
    """What to hold next, and the generation that applying it acknowledges (None:
    nothing new to acknowledge)."""

    partitions: frozenset[KafkaTP]
    generation: int | None


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
        self.group = group
        self.member = member
        self.topic = topic
        self._instance = instance
        self._key = assignment_key(group, member)
        self._fence_key = fence_key(group)
        self._verifier = verifier
        self._view = AssignmentView()
        #: Highest epoch seen for the group.
        self.epoch = -1
        #: The latest grant not yet taken, when it arrived, and an event set on arrival.
        self.pending: Grant | None = None
        self.pending_since = 0.0
        self.changed = asyncio.Event()
        # Kafka answers a waiting fetch as soon as a record lands, so the wait only sets
        # how often an idle reader asks; a broker that answers late delivers records
        # sooner with less (docs/operations.md, "Failover").
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
                return assignments_partition(self._key, count)
            if time.monotonic() > deadline:
                raise TimeoutError(f"assignments topic {self.topic!r} not found")
            await asyncio.sleep(0.2)

    def _consider(self, msg: ConsumerRecord) -> None:
        if msg.key not in (self._key, self._fence_key):
            return
        entry = log_entry(msg, self._invalid_record, self._verifier)
        if entry is None or entry.group != self.group:
            return
        verdict = self._view.add(entry)
        if verdict is Verdict.FENCED:
            log.warning(
                "fenced_record_ignored", member=self.member, offset=msg.offset, current=self.epoch
            )
        if isinstance(entry, LoggedFence):
            self.epoch = max(self.epoch, entry.epoch)
        if verdict is not Verdict.CURRENT or not isinstance(entry, LoggedRecord):
            return
        epoch, generation, _ = self._view.order[(self.group, self.member)]
        self.epoch = max(self.epoch, epoch)
        rec = entry.record
        if rec is not None and rec.issued_to(self._instance):
            self.pending = Grant(frozenset(KafkaTP(t, p) for t, p in rec.partitions), generation)
        else:
            # Our tombstone, or a grant issued to another process under our member id (our
            # predecessor's, until the controller has seen us): hold nothing, ack nothing.
            self.pending = Grant(frozenset(), None)
        self.pending_since = time.monotonic()
        self.changed.set()

    def _invalid_record(self, why: str) -> None:
        INVALID_RECORDS.labels("assignment").inc()
        log.warning("invalid_assignment_record", member=self.member, reason=why)
