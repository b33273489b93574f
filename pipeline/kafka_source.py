"""Kafka as a Spark streaming source and sink on the Python Data Source API.

Spark's native connector (``format("kafka")``, the spark-sql-kafka package) is what a real
cluster uses; where its jars cannot be had, ``format("ballast_kafka")`` stands in with the
same option names and row schema, so switching is one option (``pipeline.kafka_format``).

Offsets are planned on the driver and read on the executors, one task per partition range,
so a micro-batch is deterministic and a restarted query resumes from its checkpoint.
The end of a partition is its *high watermark as a Fetch reports it*: ListOffsets(latest)
is asked first, then a fetch from there picks up anything it missed (some brokers answer
ListOffsets with the last batch's base offset + 1, which would strand the rest of that
batch until more data arrived).

Delivery is at least once, like the native sink: a retried task writes its rows again.
The client is aiokafka (its record parsing is compiled: 15x kafka-python's), run on one
event loop per Python worker process, which Spark reuses across tasks.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import inspect
import json
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from controller.adapters.metadata_scope import track_when_idle
from controller.adapters.packed_send import PackedSender

NAME = "ballast_kafka"
#: The native connector's row schema (without the optional headers column).
ROW_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
_ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
#: topic -> partition (as a string: offsets are JSON) -> offset
Offsets = dict[str, dict[str, int]]
T = TypeVar("T")


_CONSUMER_SETTINGS = frozenset(inspect.signature(AIOKafkaConsumer).parameters) - {"loop"}
_PRODUCER_SETTINGS = frozenset(inspect.signature(AIOKafkaProducer).parameters) - {"loop"}
#: ``kafka.<name>`` options: aiokafka's settings, dots for underscores (``kafka.ssl.cafile``,
#: ``certfile``, ``keyfile`` and ``password`` build the TLS context).
_TLS_FILES = ("cafile", "certfile", "keyfile", "password")
_CLIENT_SETTINGS = (_CONSUMER_SETTINGS | _PRODUCER_SETTINGS | {f"ssl_{f}" for f in _TLS_FILES}) - {
    "ssl_context"
}
#: How long the driver waits for fetch replies when planning a batch; a partition that
#: does not answer in time (e.g. its last offset is a transaction marker) keeps its
#: ListOffsets end for this batch.
_PROBE_SECONDS = 5.0
#: Options Spark itself sets on every source or sink.
_SPARK_OWN = frozenset({"path", "checkpointlocation", "queryname"})


class KafkaOptionError(ValueError):
    """An option the source or sink cannot use; the message names it."""


@dataclass(frozen=True)
class KafkaOptions:
    """The native connector's option names, checked once when the query is defined."""

    client: tuple[tuple[str, Any], ...]
    topics: tuple[str, ...]
    starting: str
    max_per_trigger: int | None
    poll_timeout: float
    sink_topic: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, reading: bool) -> KafkaOptions:
        # Spark hands options over case-insensitively (lower-cased), as the native connector
        # reads them.
        opts = {k.lower(): v for k, v in options.items() if k.lower() not in _SPARK_OWN}
        client: dict[str, Any] = {}
        for key in [k for k in opts if k.startswith("kafka.")]:
            name = key[len("kafka.") :].replace(".", "_")
            if name not in _CLIENT_SETTINGS:
                raise KafkaOptionError(f"option {key}: not a Kafka client setting")
            value = opts.pop(key)
            client[name] = int(value) if value.isdigit() else value
        if "bootstrap_servers" not in client:
            raise KafkaOptionError("option kafka.bootstrap.servers is required")
        topics = tuple(t.strip() for t in opts.pop("subscribe", "").split(",") if t.strip())
        if reading and not topics:
            raise KafkaOptionError("option subscribe (comma-separated topics) is required")
        try:
            limit = opts.pop("maxoffsetspertrigger", None)
            max_per_trigger = int(limit) if limit is not None else None
            poll_timeout = int(opts.pop("kafkaconsumer.polltimeoutms", "120000")) / 1000
        except ValueError as exc:
            raise KafkaOptionError(f"option maxOffsetsPerTrigger/pollTimeoutMs: {exc}") from exc
        if max_per_trigger is not None and max_per_trigger < 1:
            raise KafkaOptionError("option maxOffsetsPerTrigger must be at least 1")
        starting = opts.pop("startingoffsets", "latest")
        sink_topic = opts.pop("topic", None)
        opts.pop("failondataloss", None)  # gaps (compaction, retention) are always skipped
        if opts:
            raise KafkaOptionError(f"unknown option(s): {', '.join(sorted(opts))}")
        return cls(
            tuple(sorted(client.items())),
            topics,
            starting,
            max_per_trigger,
            poll_timeout,
            sink_topic,
        )

    def _config(self, accepted: frozenset[str]) -> dict[str, Any]:
        given = dict(self.client)
        ssl = {f: given.pop(f"ssl_{f}", None) for f in _TLS_FILES}
        out = {k: v for k, v in given.items() if k in accepted}
        if any(ssl.values()) or out.get("security_protocol") in ("SSL", "SASL_SSL"):
            out["ssl_context"] = create_ssl_context(**ssl)
        return out

    def consumer_config(self) -> dict[str, Any]:
        return self._config(_CONSUMER_SETTINGS)

    def producer_config(self) -> dict[str, Any]:
        return {"acks": "all", "linger_ms": 5} | self._config(_PRODUCER_SETTINGS)


class OffsetRange(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


# Spark reuses Python worker processes across tasks: one event loop per process, and one
# client per configuration on it.
_loop: asyncio.AbstractEventLoop | None = None
_consumers: dict[tuple[tuple[str, Any], ...], AIOKafkaConsumer] = {}
_producers: dict[tuple[tuple[str, Any], ...], AIOKafkaProducer] = {}
_admins: dict[tuple[tuple[str, Any], ...], AIOKafkaAdminClient] = {}


def _run(coro: Coroutine[Any, Any, T]) -> T:
    global _loop  # noqa: PLW0603 (per-process, by design)
    if _loop is None:
        _loop = asyncio.new_event_loop()
        atexit.register(_close_clients, _loop)
    return _loop.run_until_complete(coro)


def _close_clients(loop: asyncio.AbstractEventLoop) -> None:
    """At the process's exit (a driver, a test run; Spark may end its workers without
    running this): close the cached clients, so their connections end cleanly instead of
    being dropped when aiokafka warns about them at collection."""

    async def close() -> None:
        closing = [
            *(c.stop() for c in _consumers.values()),
            *(p.stop() for p in _producers.values()),
            *(a.close() for a in _admins.values()),
        ]
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):  # a broker already gone must not hold the exit
                await asyncio.gather(*closing, return_exceptions=True)

    if not loop.is_closed():
        loop.run_until_complete(close())
        loop.close()
    _consumers.clear()
    _producers.clear()
    _admins.clear()


async def _consumer(opts: KafkaOptions, fetch_max_wait_ms: int = 100) -> AIOKafkaConsumer:
    key = (*opts.client, ("fetch_max_wait_ms", fetch_max_wait_ms))
    if key not in _consumers:
        consumer = AIOKafkaConsumer(
            **(
                {
                    "enable_auto_commit": False,
                    "group_id": None,
                    "fetch_max_wait_ms": fetch_max_wait_ms,
                    "max_partition_fetch_bytes": 4 << 20,
                }
                | opts.consumer_config()
            )
        )
        await consumer.start()
        _consumers[key] = consumer
    return _consumers[key]


async def _admin(opts: KafkaOptions) -> AIOKafkaAdminClient:
    if opts.client not in _admins:
        keep = frozenset(inspect.signature(AIOKafkaAdminClient).parameters)
        admin = AIOKafkaAdminClient(
            **{k: v for k, v in opts.consumer_config().items() if k in keep}
        )
        await admin.start()
        if opts.topics:  # it names them at once (describe_topics): they exist by now
            track_when_idle(admin, opts.topics[0])
        _admins[opts.client] = admin
    return _admins[opts.client]


async def _producer(opts: KafkaOptions) -> AIOKafkaProducer:
    if opts.client not in _producers:
        producer = AIOKafkaProducer(**opts.producer_config())
        await producer.start()
        _producers[opts.client] = producer
    return _producers[opts.client]


def _cap(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """At most ``max_rows`` offsets past ``start``, shared in proportion to what each
    partition has waiting (as the native connector does)."""
    waiting = {
        (t, p): end - start.get(t, {}).get(p, 0)
        for t, ends in latest.items()
        for p, end in ends.items()
    }
    total = sum(waiting.values())
    if total <= max_rows:
        return latest
    out: Offsets = {t: dict(ends) for t, ends in start.items()}
    granted = 0
    for (t, p), n in sorted(waiting.items()):
        take = n * max_rows // total
        out.setdefault(t, {})[p] = start.get(t, {}).get(p, 0) + take
        granted += take
    if granted == 0:  # always make progress
        t, p = next((k for k, n in sorted(waiting.items()) if n > 0))
        out[t][p] += 1
    return out


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: KafkaOptions) -> None:
        self._opts = options
        self._target: Offsets | None = None
        self._latest: Offsets | None = None

    async def _partitions(self, c: AIOKafkaConsumer) -> list[TopicPartition]:
        """Partitions of the subscribed topics as the brokers know them now (a topic
        created after the query started, or grown, shows up here)."""
        admin = await _admin(self._opts)
        out = []
        for meta in await admin.describe_topics(list(self._opts.topics)):
            if meta.get("error_code", 0) == 0:
                parts = sorted(p["partition"] for p in meta["partitions"])
                out += [TopicPartition(meta["topic"], p) for p in parts]
        return out

    def _high_watermarks(self) -> Offsets:
        return _run(self._probe())

    async def _probe(self) -> Offsets:
        """Fetch high watermarks: ListOffsets first, then a fetch of each non-empty
        partition's last listed offset, whose reply carries the true high watermark."""
        c = await _consumer(self._opts, fetch_max_wait_ms=10)
        tps = await self._partitions(c)
        if not tps:
            return {}
        listed: dict[TopicPartition, int] = await c.end_offsets(tps)
        pending = [tp for tp in tps if listed[tp] > 0]
        reported: dict[TopicPartition, int] = {}
        c.assign(pending)
        for tp in pending:
            c.seek(tp, listed[tp] - 1)
        deadline = time.monotonic() + _PROBE_SECONDS
        while pending and time.monotonic() < deadline:
            got = await c.getmany(*pending, timeout_ms=100)
            for tp in got:
                reported[tp] = c.highwater(tp) or 0
            pending = [tp for tp in pending if tp not in reported]
        c.assign([])
        track_when_idle(c, tps[0].topic)
        out: Offsets = {}
        for tp in tps:
            out.setdefault(tp.topic, {})[str(tp.partition)] = max(listed[tp], reported.get(tp, 0))
        return out

    async def _earliest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        c = await _consumer(self._opts, fetch_max_wait_ms=10)
        return dict(await c.beginning_offsets(list(tps)))

    def initialOffset(self) -> Offsets:
        starting = self._opts.starting
        if starting == "latest":
            return self._high_watermarks()
        if starting == "earliest":

            async def earliest() -> dict[TopicPartition, int]:
                c = await _consumer(self._opts, fetch_max_wait_ms=10)
                return await self._earliest(await self._partitions(c))

            out: Offsets = {}
            for tp, off in _run(earliest()).items():
                out.setdefault(tp.topic, {})[str(tp.partition)] = off
            return out
        try:
            given = json.loads(starting)
            return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in given.items()}
        except (ValueError, AttributeError, TypeError) as exc:
            raise KafkaOptionError(
                f"option startingOffsets: {starting!r} is not earliest, latest or "
                '{"topic": {"partition": offset}}'
            ) from exc

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self._target if self._target is not None else self._high_watermarks()
        self._latest = latest
        # partitions added since ``start`` are read from their beginning
        new = [
            TopicPartition(t, int(p))
            for t, ends in latest.items()
            for p in ends
            if p not in start.get(t, {})
        ]
        start = {t: dict(v) for t, v in start.items()}
        for tp, off in _run(self._earliest(new)).items():
            start.setdefault(tp.topic, {})[str(tp.partition)] = off
        if isinstance(limit, ReadMaxRows):
            return _cap(start, latest, limit.max_rows)
        return latest

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self._opts.max_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def reportLatestOffset(self) -> Offsets | None:
        return self._latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._high_watermarks()

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        ranges: list[InputPartition] = []
        for topic, ends in sorted(end.items()):
            for p, stop in sorted(ends.items(), key=lambda kv: int(kv[0])):
                begin = start.get(topic, {}).get(p, 0)
                if stop > begin:
                    ranges.append(OffsetRange(topic, int(p), begin, stop))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return iter(_run(read_range(self._opts, partition)))

    def commit(self, end: Offsets) -> None:
        """Offsets live in Spark's checkpoint, not in a consumer group."""


async def read_range(opts: KafkaOptions, r: OffsetRange) -> list[pa.RecordBatch]:
    """Records ``[start, end)`` of one partition as Arrow batches; offsets missing from the
    range (compaction, retention) are skipped."""
    c = await _consumer(opts)
    tp = TopicPartition(r.topic, r.partition)
    c.assign([tp])
    c.seek(tp, r.start)
    out = []
    deadline = time.monotonic() + opts.poll_timeout
    try:
        while await c.position(tp) < r.end:
            cols: dict[str, list[Any]] = {f: [] for f in _ARROW_SCHEMA.names}
            got = await c.getmany(tp, timeout_ms=500, max_records=50_000)
            for rec in got.get(tp, []):
                if rec.offset >= r.end:
                    break
                cols["key"].append(rec.key)
                cols["value"].append(rec.value)
                cols["offset"].append(rec.offset)
                cols["timestamp"].append(rec.timestamp * 1000)  # ms -> us
                cols["timestampType"].append(rec.timestamp_type)
            if cols["offset"]:
                n = len(cols["offset"])
                cols["topic"] = [r.topic] * n
                cols["partition"] = [r.partition] * n
                out.append(pa.RecordBatch.from_pydict(cols, schema=_ARROW_SCHEMA))
                deadline = time.monotonic() + opts.poll_timeout
            elif time.monotonic() > deadline:
                raise TimeoutError(
                    f"{r.topic}-{r.partition}: no records at {await c.position(tp)} (range "
                    f"ends at {r.end}) within kafkaConsumer.pollTimeoutMs"
                )
    finally:
        c.assign([])
        track_when_idle(c, r.topic)
    return out


class KafkaCommit(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"key/value must be string or binary, not {type(value).__name__}")


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Rows arrive as Arrow batches: reading columns is several times cheaper than the
    Row objects of the plain writer, which the lag job's output (one row per partition
    per batch) would pay for on every row."""

    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        names = set(schema.fieldNames())
        if "value" not in names:
            raise KafkaOptionError("the rows to write need a value column")
        if options.sink_topic is None and "topic" not in names:
            raise KafkaOptionError("set option topic or give the rows a topic column")
        self._opts = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommit:
        return _run(self._write(iterator))

    async def _write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommit:
        """Packed per topic partition (``PackedSender``): a key lands where the native
        sink would put it, at about a quarter of the cost of a ``send`` each."""
        out = PackedSender(await _producer(self._opts))
        for batch in iterator:
            columns = batch.to_pydict()
            topics = columns.get("topic") or [None] * batch.num_rows
            keys = columns.get("key") or [None] * batch.num_rows
            for topic, key, value in zip(topics, keys, columns["value"], strict=True):
                sink = topic or self._opts.sink_topic
                assert sink is not None  # the constructor checked there is one
                await out.add(sink, _bytes(key), _bytes(value))
        await out.flush()
        return KafkaCommit(out.records)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows are delivered by ``write``; nothing to finish."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At least once: a retried batch writes again, as the native sink does."""


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return ROW_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(KafkaOptions.parse(self.options, reading=True))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(KafkaOptions.parse(self.options, reading=False), schema)
