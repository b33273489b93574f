"""The compacted assignments topic read: to its end (where ListOffsets and the Fetch high
watermark agree: Tansu's ListOffsets can be short), by a reader assigned its partitions,
and into the view every recovery and ``ballast audit`` starts from."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTP

from controller.adapters.connection import client_options
from controller.adapters.metadata import topic_metadata
from controller.config import Config
from controller.errors import UnreachableError
from controller.wire.assignments import (
    READ_ISOLATION,
    log_entry,
)
from controller.wire.fencing import AssignmentView
from controller.wire.records import (
    Logged,
)
from controller.wire.signing import Verifier

#: How long a reader waits for its topic to appear in the cluster's metadata.
TOPIC_WAIT = 30.0


async def read_to_end(
    consumer: AIOKafkaConsumer, tps: list[KafkaTP], idle: float = 0.3
) -> list[object]:
    """Every record from the beginning to the current end of ``tps``."""
    await rewind(consumer, tps)
    return await catch_up(consumer, tps, idle)


async def rewind(consumer: AIOKafkaConsumer, tps: list[KafkaTP]) -> None:
    """Read ``tps`` from their beginning."""
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)


async def catch_up(
    consumer: AIOKafkaConsumer, tps: list[KafkaTP], idle: float = 0.3
) -> list[object]:
    """Every record from the consumer's positions to the current end of ``tps``.

    The end is where both ListOffsets and the Fetch high watermark say it is: some brokers
    (Tansu 0.6) answer ListOffsets with the last batch's base offset + 1, so reading to
    that alone could stop inside the last batch.
    """
    ends = await consumer.end_offsets(tps)
    out: list[object] = []
    quiet_since: float | None = None
    while True:
        batch = await consumer.getmany(*tps, timeout_ms=int(idle * 1000))
        for records in batch.values():
            out.extend(records)
        behind = False
        for tp in tps:
            position = await consumer.position(tp)
            target = max(ends[tp], consumer.highwater(tp) or 0)
            if position < target:
                behind = True
        if behind or batch:
            quiet_since = None
            continue
        quiet_since = quiet_since or time.monotonic()
        if time.monotonic() - quiet_since >= idle:
            return out


async def read_past(consumer: AIOKafkaConsumer, offsets: Mapping[KafkaTP, int]) -> list[object]:
    """Every record from the consumer's positions through ``offsets`` (records this
    process wrote and saw acknowledged): an end known exactly, so no wait for quiet."""
    out: list[object] = []
    while waiting := [tp for tp, last in offsets.items() if await consumer.position(tp) <= last]:
        batch = await consumer.getmany(*waiting, timeout_ms=1000)
        for records in batch.values():
            out.extend(records)
    return out


async def assigned_reader(
    connection: Mapping[str, Any], topic: str, client_id: str
) -> tuple[AIOKafkaConsumer, list[KafkaTP]]:
    consumer = AIOKafkaConsumer(
        **connection,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=READ_ISOLATION,
    )
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()  # a failed start leaves its client open
        raise
    # Not ``partitions_for_topic``: on Kafka the client's bootstrap learns no topic, and
    # ``topics()`` asks about all of them without keeping the answer. A topic created a
    # moment ago may not be in a broker's metadata yet (Apache Kafka answers without it
    # for a few milliseconds after CreateTopics): asked again until it is, for a while.
    deadline = time.monotonic() + TOPIC_WAIT
    while not (count := (await topic_metadata(consumer, [topic])).counts.get(topic, 0)):
        if time.monotonic() >= deadline:
            await consumer.stop()
            raise UnreachableError(
                f"topic {topic!r} is not in the cluster's metadata after {TOPIC_WAIT:g} s: "
                "check its name, and that it exists (ballast run creates it at start)"
            )
        await asyncio.sleep(0.1)
    return consumer, [KafkaTP(topic, p) for p in range(count)]


async def read_assignment_log(
    connection: Mapping[str, Any],
    topic: str,
    client_id: str,
    on_invalid: Callable[[str], None] | None = None,
    verifier: Verifier | None = None,
) -> list[Logged]:
    """Every valid (and, with a ``verifier``, signed) entry of the assignments topic, in
    partition-offset order. ``connection``: ``client_options(cfg)`` or at least
    ``bootstrap_servers``."""
    consumer, tps = await assigned_reader(connection, topic, client_id)
    try:
        messages = await read_to_end(consumer, tps)
        entries = (log_entry(msg, on_invalid, verifier) for msg in messages)
        return [e for e in entries if e is not None]
    finally:
        await consumer.stop()


class AssignmentLog:
    """The assignments topic read into an ``AssignmentView``, from the beginning once and
    then incrementally: a takeover reads only what was written since the last one. Only
    the configured groups' entries are kept (the view stays bounded whatever keys are
    written), and with a ``verifier`` only the signed ones grant (the others still count
    for the epoch and generation floors)."""

    def __init__(
        self,
        cfg: Config,
        on_invalid: Callable[[str], None] | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self._cfg = cfg
        self._on_invalid = on_invalid
        self._verifier = verifier
        self._groups = frozenset(g.name for g in cfg.groups)
        self.view = AssignmentView()
        self._consumer: AIOKafkaConsumer | None = None
        self._tps: list[KafkaTP] = []
        self._lock = asyncio.Lock()

    async def catch_up(
        self, through: Mapping[int, int] | None = None, idle: float = 0.3
    ) -> AssignmentView:
        """Read everything written up to now (our own acknowledged writes included).
        ``through``: partition -> offset of a record this replica wrote on each partition
        (its fence markers); the read ends exactly there instead of waiting ``idle``
        seconds of quiet."""
        async with self._lock:
            if self._consumer is None:
                self._consumer, self._tps = await assigned_reader(
                    client_options(self._cfg),
                    self._cfg.assignments.name,
                    f"{self._cfg.kafka.client_id}-recovery",
                )
                await rewind(self._consumer, self._tps)
            # Fences on fewer partitions than the topic has now (it grew since): the
            # others have no known end.
            if through is not None and set(through) == {tp.partition for tp in self._tps}:
                ends = {tp: through[tp.partition] for tp in self._tps}
                messages = await read_past(self._consumer, ends)
            else:
                messages = await catch_up(self._consumer, self._tps, idle)
            for msg in messages:
                entry = log_entry(msg, self._on_invalid, self._verifier, self._count)
                if entry is not None and entry.group in self._groups:
                    self.view.add(entry)
            return self.view

    def _count(self, entry: Logged) -> None:
        """A record that does not verify still numbers what comes next (``view.count``)."""
        if entry.group in self._groups:
            self.view.count(entry)

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
