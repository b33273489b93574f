"""Kafka I/O: the compacted assignments topic, committed/end offsets, topic metadata.

Only standard Kafka APIs. Where a broker answers differently from Apache Kafka, the code
takes the safe reading that is correct on both (see ``read_to_end``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError

from assignors import TopicPartition
from controller import logs
from controller.adapters.connection import client_options
from controller.adapters.metadata import topic_metadata
from controller.adapters.metadata_scope import track_topics, track_when_idle
from controller.adapters.offsets import (
    committed_offsets,
    committed_through_coordinator,
    list_offsets,
)
from controller.adapters.packed_send import PackedSender, Placements
from controller.adapters.side_loop import SideLoop
from controller.adapters.topics import BrokerRefusalError
from controller.config import Config
from controller.core.handoff import Outgoing
from controller.wire.assignments import (
    EPOCH_HEADER,
    GENERATION_HEADER,
    READ_ISOLATION,
    log_entry,
)
from controller.wire.fencing import AssignmentView
from controller.wire.metadata import TopicMetadata
from controller.wire.offsets import EARLIEST, LATEST, Offsets
from controller.wire.raw_answers import RawDecodeError
from controller.wire.records import (
    Assignment,
    Fence,
    Logged,
    assignment_key,
    encode_samples,
    fence_key,
)
from controller.wire.signing import Signer, Verifier

log = logs.get("ballast.controller")


async def read_to_end(
    consumer: AIOKafkaConsumer, tps: list[KafkaTP], idle: float = 0.3
) -> list[object]:
    """Every record from the beginning to the current end of ``tps``."""
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return await catch_up(consumer, tps, idle)


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
    # ``topics()`` asks about all of them without keeping the answer.
    count = (await topic_metadata(consumer, [topic])).counts.get(topic, 0)
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
    written), and with a ``verifier`` only the signed ones."""

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

    async def catch_up(self) -> AssignmentView:
        """Read everything written up to now (our own acknowledged writes included)."""
        async with self._lock:
            if self._consumer is None:
                self._consumer, self._tps = await assigned_reader(
                    client_options(self._cfg),
                    self._cfg.assignments.name,
                    f"{self._cfg.kafka.client_id}-recovery",
                )
                messages = await read_to_end(self._consumer, self._tps)
            else:
                messages = await catch_up(self._consumer, self._tps)
            for msg in messages:
                entry = log_entry(msg, self._on_invalid, self._verifier)
                if entry is not None and entry.group in self._groups:
                    self.view.add(entry)
            return self.view

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()


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
        try:
            await self._producer.start()
            track_when_idle(self._producer, self._cfg.assignments.name)
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

    async def publish_fence(self, group: str, epoch: int, replica: str) -> None:
        """A fence marker for ``group`` on every partition of the assignments topic."""
        topic = self._cfg.assignments.name
        value = Fence(
            group=group, controller_epoch=epoch, replica=replica, issued_at=time.time()
        ).encode()
        key = fence_key(group)
        headers = [] if self._signer is None else [self._signer.header("assignments", key, value)]
        scope = self._producer.transaction() if self._transactional else contextlib.nullcontext()
        async with scope:
            partitions = sorted(await self._producer.partitions_for(topic))
            futures = [
                await self._producer.send(topic, value, key=key, partition=p, headers=headers)
                for p in partitions
            ]
            await asyncio.gather(*futures)

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


class Encoded(NamedTuple):
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


def encode_plan(
    group: str,
    epoch: int,
    generation: int,
    records: Iterable[Outgoing],
    topics_of: Callable[[str], frozenset[str] | None],
    *,
    issued_at: float,
    wall_clock: Callable[[float], float],
    signer: Signer | None = None,
) -> list[Encoded]:
    """A plan's records as they go on the assignments topic, signed with ``signer`` when
    given. ``wall_clock`` turns the state clock of ``absent_since`` into Unix time.

    Built without validation (``model_construct``): everything in them comes from
    validated input, and validating a thousand records of our own on every mass change
    would triple the encoding time. Every reader validates what it decodes."""
    # Headers date tombstones too (their value must stay null for compaction).
    headers = [(GENERATION_HEADER, str(generation).encode()), (EPOCH_HEADER, str(epoch).encode())]
    out = []
    for rec in records:
        value = None
        if rec.partitions is not None:
            value = Assignment.model_construct(
                group=group,
                member=rec.member,
                generation=generation,
                controller_epoch=epoch,
                # TopicPartitions are (topic, partition) tuples: serialized as they are.
                partitions=sorted(rec.partitions) if rec.listed is None else rec.listed,
                revoking=sorted(rec.revoking),
                topics=sorted(topics_of(rec.member) or ()),
                issued_at=issued_at,
                absent_since=None if rec.absent_since is None else wall_clock(rec.absent_since),
                instance=rec.instance,
            ).encode()
        key = assignment_key(group, rec.member)
        if signer is None:
            out.append(Encoded(key, value, headers))
        else:
            signed = [*headers, signer.header("assignments", key, value, headers)]
            out.append(Encoded(key, value, signed))
    return out


class OffsetReader:
    """Committed offsets of the fleet's group, end/beginning offsets, partition counts.

    Its clients run on a loop of their own (``side_loop``): their answers name every
    partition of the group, and aiokafka decodes them where it reads them."""

    def __init__(self, cfg: Config, commit_group: str) -> None:
        self._cfg = cfg
        self._group = commit_group
        self._side = SideLoop(f"ballast-offsets-{commit_group}")
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._admin_offsets = True

    async def start(self) -> None:
        self._side.start()
        try:
            await self._side.run(self._start())
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if not self._side.running:
            return
        try:
            await self._side.run(self._stop())
        finally:
            await self._side.stop()

    async def topic_metadata(self, topics: Iterable[str]) -> TopicMetadata:
        return await self._side.run(topic_metadata(self._started()[1], topics))

    async def offsets(
        self, partitions_per_topic: Mapping[str, int], with_start: bool
    ) -> dict[TopicPartition, PartitionOffsets]:
        """Committed, end and (when asked) beginning offsets of every partition."""
        return await self._side.run(self._offsets(partitions_per_topic, with_start))

    # ------------------------------------------------------------------ on the side loop

    async def _start(self) -> None:
        cfg = self._cfg
        self._consumer = AIOKafkaConsumer(
            **client_options(cfg),
            client_id=f"{cfg.kafka.client_id}-lag",
            group_id=self._group,  # never subscribes: it only reads the group's commits
            enable_auto_commit=False,
        )
        self._admin = AIOKafkaAdminClient(
            **client_options(cfg), client_id=f"{cfg.kafka.client_id}-admin"
        )
        await self._consumer.start()
        await self._admin.start()
        # Only a topic that exists: a refresh may create what it names, and a reader
        # started outside the daemon (which creates the topic first) must not.
        mine = cfg.assignments.name
        if mine in (await topic_metadata(self._admin, [mine])).counts:
            for client in (self._consumer, self._admin):  # neither assigns nor sends
                track_when_idle(client, mine)

    async def _stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()

    def _started(self) -> tuple[AIOKafkaConsumer, AIOKafkaAdminClient]:
        if self._consumer is None or self._admin is None:
            raise RuntimeError("OffsetReader used before start()")
        return self._consumer, self._admin

    async def _committed(self, ppt: Mapping[str, int]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets: one OffsetFetch through the admin client, read
        from its bytes; what it cannot answer goes through the consumer's coordinator
        (every partition in one request: one per partition took 15 s for 100 000), and
        everything does once a broker rejected the admin request (Tansu did)."""
        consumer, admin = self._started()
        found: dict[TopicPartition, int | None] = {}
        again: list[TopicPartition] | None = None  # None: every partition
        if self._admin_offsets:
            try:
                got = await committed_offsets(admin, self._group, ppt)
            except (KafkaError, OSError, TimeoutError, RawDecodeError) as exc:
                log.info("offset_fetch_fallback", group=self._group, error=repr(exc))
                self._admin_offsets = False
            else:
                if not got.error:
                    found = {tp: (o if o >= 0 else None) for tp, o in got.found.items()}
                    again = got.failed
        asked = [KafkaTP(t, p) for t, p in (_every(ppt) if again is None else again)]
        if asked:
            for tp, offset in (await committed_through_coordinator(consumer, asked)).items():
                found[TopicPartition(tp.topic, tp.partition)] = offset
        return found

    async def _listed(self, ppt: Mapping[str, int], timestamp: int) -> dict[TopicPartition, int]:
        """End (or start) offsets, one ListOffsets per leader read from its bytes; what
        that cannot answer goes through aiokafka, which retries and refreshes leaders."""
        consumer = self._started()[0]
        try:
            got = await list_offsets(consumer, ppt, timestamp)
        except (KafkaError, OSError, TimeoutError, RawDecodeError) as exc:
            log.info("list_offsets_fallback", group=self._group, error=repr(exc))
            got = Offsets({}, list(_every(ppt)))
        if got.failed:
            asked = [KafkaTP(tp.topic, tp.partition) for tp in got.failed]
            slow = consumer.end_offsets if timestamp == LATEST else consumer.beginning_offsets
            for tp, offset in (await slow(asked)).items():
                got.found[TopicPartition(tp.topic, tp.partition)] = offset
        return got.found

    async def _offsets(
        self, partitions_per_topic: Mapping[str, int], with_start: bool
    ) -> dict[TopicPartition, PartitionOffsets]:
        consumer = self._started()[0]
        ppt = {t: n for t, n in sorted(partitions_per_topic.items()) if n > 0}
        if not ppt:
            return {}
        await track_topics(consumer, ppt)
        committed = await self._committed(ppt)
        ends = await self._listed(ppt, LATEST)
        begins = await self._listed(ppt, EARLIEST) if with_start else {}
        return _joined(list(_every(ppt)), committed, ends, begins)


#: Entries joined per C call: each call holds the GIL (on the reader's thread) until done.
_JOIN_CHUNK = 8192


def _joined(
    every: list[TopicPartition],
    committed: Mapping[TopicPartition, int | None],
    ends: Mapping[TopicPartition, int],
    begins: Mapping[TopicPartition, int],
) -> dict[TopicPartition, PartitionOffsets]:
    """One ``PartitionOffsets`` per partition, built in C (through the named tuple's
    Python constructor 100 000 cost 0.13 s a poll here), a chunk at a time so the
    controller's thread gets the interpreter in between."""
    out: dict[TopicPartition, PartitionOffsets] = {}
    done, end, start, new = committed.get, ends.get, begins.get, tuple.__new__
    for at in range(0, len(every), _JOIN_CHUNK):
        tps = every[at : at + _JOIN_CHUNK]
        read = zip(map(done, tps), map(end, tps, repeat(0)), map(start, tps), strict=True)
        out.update(zip(tps, map(new, repeat(PartitionOffsets), read), strict=True))
    return out


def _every(ppt: Mapping[str, int]) -> Iterator[TopicPartition]:
    new = tuple.__new__
    return (new(TopicPartition, (t, p)) for t, n in ppt.items() for p in range(n))


class PartitionOffsets(NamedTuple):
    committed: int | None
    log_end: int
    log_start: int | None

    def lag(self, reset: str) -> int:
        """Offsets behind; without a commit, as ``auto.offset.reset`` would start."""
        done = self.committed
        if done is None:
            done = self.log_end if reset == "latest" else (self.log_start or 0)
        return max(0, self.log_end - done)


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
