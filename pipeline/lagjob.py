"""The streaming lag job: offset samples in, per-partition lag records out.

samples topic -> decode and validate (the same ``OffsetSample`` model the controller
writes with) -> event-time watermark -> per (group, topic, partition) state of recent
points -> ``LagRecord`` (or a tombstone once a partition stops reporting) -> compacted lag
topic, which the controller reads with ``lag.source: topic``.

Run with ``ballast pipeline lag --config ballast.yaml`` or ``spark-submit -m``-style:
``spark-submit pipeline/lagjob.py --config ballast.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from aiokafka.admin import AIOKafkaAdminClient
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from assignors import collector_paused
from controller.adapters.connection import client_options
from controller.adapters.topics import ensure_pipeline_topics
from controller.config import Config, PipelineSettings, load_config
from controller.wire.records import (
    SCHEMA_VERSION,
    DecodeError,
    OffsetSample,
    decode,
)

from . import lagmath, s3a
from .connection import kafka_options
from .kafka_source import NAME as PYTHON_KAFKA
from .progress import ProgressReporter
from .session import session

#: ``LagRecord``'s fields as Spark types: the state step returns them as columns and the
#: JVM writes the JSON (``_record_json``), a fifth of a sample's Python time saved.
RECORD_FIELDS = {
    "group": "string",
    "topic": "string",
    "partition": "int",
    "lag": "long",
    "time_lag": "double",
    "produce_rate": "double",
    "consume_rate": "double",
    "observed_at": "double",
}
OUTPUT_SCHEMA = ", ".join(
    [
        "key string",
        *(f"{name} {kind}" for name, kind in RECORD_FIELDS.items()),
        "late long",
        "duplicates long",
        "invalid long",
        "first_invalid string",
        "tracked long",
    ]
)
#: ``state_buckets: 0``, one partition per state key: its points as JSON
#: ``[[t, log_end, committed, log_start], ...]`` (array columns in the state schema fail
#: to deserialize in the Python worker, PySpark 4.3).
KEY_STATE_SCHEMA = "points string"
#: Many partitions per state key: their record keys (newline-separated), each one's point
#: count (int32) and their histories back to back (``lagmath.History.to_bytes``).
BUCKET_STATE_SCHEMA = "keys string, sizes binary, histories binary"
#: The watermark needs event time before the stateful step, so it is read in the JVM;
#: a value without a usable one is rejected there with this reason.
NO_EVENT_TIME = "no positive numeric sampled_at (not JSON, or the field is missing)"

Reset = Literal["latest", "earliest"]
Histories = dict[str, lagmath.History]
_TOMBSTONE = (None,) * len(RECORD_FIELDS)
StateRow = tuple[Any, ...]


def _load_key(row: StateRow, key: str) -> Histories:
    return {key: lagmath.History.of(lagmath.Point(*p) for p in json.loads(row[0]))}


def _save_key(histories: Histories) -> StateRow:
    (history,) = histories.values()
    return (json.dumps(history.points()),)


def _load_bucket(row: StateRow, _bucket: str) -> Histories:
    keys, sizes_raw, data = row
    sizes = array("i")
    sizes.frombytes(sizes_raw)
    view, at, out = memoryview(data), 0, {}
    for key, n in zip(keys.split("\n"), sizes, strict=True):
        out[key] = lagmath.History.from_bytes(view[at : at + n * lagmath.POINT_BYTES])
        at += n * lagmath.POINT_BYTES
    return out


def _save_bucket(histories: Histories) -> StateRow:
    return (
        "\n".join(histories),
        array("i", map(len, histories.values())).tobytes(),
        b"".join(h.to_bytes() for h in histories.values()),
    )


def _decode(
    key: str, value: bytes | None, topic: str, partition: int, offset: int
) -> tuple[OffsetSample | None, str | None]:
    """The sample, or why it is rejected, naming where it was read (formatted only then:
    this runs once per sample)."""
    try:
        s = decode(OffsetSample, value, "")
    except DecodeError as exc:
        return None, f"{topic}[{partition}]@{offset}: {exc.reason}"
    if key != f"{s.group}/{s.topic}/{s.partition}":  # records.partition_key, as text
        return None, f"{topic}[{partition}]@{offset}: key {key!r} disagrees with the body"
    return s, None


def _record(
    sample: OffsetSample, history: lagmath.History, settings: PipelineSettings, reset: Reset
) -> tuple[Any, ...]:
    """The ``RECORD_FIELDS`` of the partition's lag record, in order."""
    est = lagmath.estimate(history, rate_window=settings.rate_window, reset=reset)
    return (
        sample.group,
        sample.topic,
        sample.partition,
        est.lag,
        est.time_lag,
        est.produce_rate,
        est.consume_rate,
        est.observed_at,
    )


def _record_json() -> Column:
    """A ``LagRecord`` as its JSON, written in the JVM (null fields kept, as pydantic's)."""
    fields = [F.lit(SCHEMA_VERSION).alias("version"), *(F.col(f) for f in RECORD_FIELDS)]
    return F.to_json(F.struct(*fields), {"ignoreNullFields": "false"})


def state_updater(
    settings: PipelineSettings, reset: Reset
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """The state function for ``applyInPandasWithState``, grouped by bucket (or by record
    key with ``state_buckets: 0``): it decodes and validates each sample and merges it
    into its partition's history. Out come a lag record's fields per partition that took
    a new point, a tombstone (null fields) per partition silent for ``age_out``, and one
    row without a key that only counts (late, duplicates, invalid, partitions held)."""
    load, save = (_load_bucket, _save_bucket) if settings.state_buckets else (_load_key, _save_key)
    empty = lagmath.History.of([])

    def expires_ms(history: lagmath.History) -> int:
        return int((history.t[-1] + settings.age_out) * 1000)

    def update(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        # A bucket's call allocates a few objects per sample and frees none of them in
        # cycles; the cyclic collector's passes over them cost ~20 % of the call.
        with collector_paused():
            out = _update(key, batches, state)
        yield out

    def _update(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> pd.DataFrame:
        histories = load(state.get, str(key[0])) if state.exists else {}
        watermark_ms = state.getCurrentWatermarkMs()
        watermark = watermark_ms / 1000
        late = 0
        errors: list[str] = []
        fresh: dict[str, list[lagmath.Point]] = {}
        newest: dict[str, OffsetSample] = {}
        for df in batches:  # none when the call is a timeout
            columns = (df[c].tolist() for c in ("key", "value", "topic", "partition", "offset"))
            for record_key, value, topic, part, offset in zip(*columns, strict=True):
                decoded, error = _decode(record_key, value, topic, part, offset)
                if decoded is None:
                    errors.append(error or "")
                elif decoded.sampled_at < watermark:
                    late += 1
                else:
                    newest[record_key] = d = decoded
                    fresh.setdefault(record_key, []).append(
                        lagmath.Point(d.sampled_at, d.log_end, d.committed, d.log_start)
                    )
        keys: list[str | None] = []
        records: list[tuple[Any, ...]] = []
        duplicates = 0
        for record_key, points in fresh.items():
            merged = lagmath.merge(
                histories.get(record_key, empty),
                points,
                keep_seconds=settings.history,
                max_points=settings.max_points,
            )
            duplicates += merged.duplicates
            histories[record_key] = merged.history
            if len(points) > merged.duplicates:
                keys.append(record_key)
                records.append(_record(newest[record_key], merged.history, settings, reset))
        next_expiry = None
        for record_key, history in list(histories.items()):
            expiry = expires_ms(history)
            # Spark's rule for a state key's event-time timeout, applied per partition
            if expiry < watermark_ms:
                del histories[record_key]
                keys.append(record_key)
                records.append(_TOMBSTONE)
            elif next_expiry is None or expiry < next_expiry:
                next_expiry = expiry
        if next_expiry is not None:
            state.update(save(histories))
            state.setTimeoutTimestamp(next_expiry)
        elif state.exists:
            state.remove()
        # the last row only counts (no key: never written)
        fields = list(zip(*records, _TOMBSTONE, strict=True))
        return pd.DataFrame(
            {
                "key": [*keys, None],
                **{name: fields[i] for i, name in enumerate(RECORD_FIELDS)},
                "late": [0] * len(keys) + [late],
                "duplicates": [0] * len(keys) + [duplicates],
                "invalid": [0] * len(keys) + [len(errors)],
                "first_invalid": [None] * len(keys) + [min(errors, default=None)],
                "tracked": [0] * len(keys) + [len(histories)],
            }
        )

    return update


def _count_if(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0))


def lag_records(raw: DataFrame, settings: PipelineSettings, reset: Reset) -> DataFrame:
    """Kafka-shaped rows (key, value, topic, partition, offset) -> rows (key, value) for
    the lag topic. Two observations report per micro-batch: ``samples`` (rows, and those
    without event time) and ``lag_records`` (records, tombstones, late, duplicates,
    invalid and the first invalid one, and the partitions held by the buckets it touched)."""
    rows = (
        raw.select(
            F.col("key").cast("string").alias("key"),
            "value",
            "topic",
            "partition",
            "offset",
            F.get_json_object(F.col("value").cast("string"), "$.sampled_at")
            .cast("double")
            .alias("sampled_at"),
        )
        .withColumn(
            "event_time",
            F.when(F.col("sampled_at") > 0, F.timestamp_seconds("sampled_at")),
        )
        .observe(
            "samples",
            F.count(F.lit(1)).alias("rows"),
            _count_if(F.col("event_time").isNull()).alias("invalid"),
            F.min(
                F.when(
                    F.col("event_time").isNull(),
                    F.concat_ws(
                        "",
                        "topic",
                        F.lit("["),
                        "partition",
                        F.lit("]@"),
                        "offset",
                        F.lit(f": {NO_EVENT_TIME}"),
                    ),
                )
            ).alias("first_invalid"),
        )
    )
    timed = (
        rows.where(F.col("event_time").isNotNull() & F.col("key").isNotNull())
        .withWatermark("event_time", f"{int(settings.lateness * 1000)} milliseconds")
        # what the state step reads; Spark wants the watermark's column kept
        .select("key", "value", "topic", "partition", "offset", "event_time")
    )
    if settings.state_buckets:
        bucket = F.pmod(F.xxhash64("key"), F.lit(settings.state_buckets))
        grouped = timed.withColumn("bucket", bucket).groupBy("bucket")
    else:
        grouped = timed.groupBy("key")
    out = grouped.applyInPandasWithState(
        state_updater(settings, reset),
        outputStructType=OUTPUT_SCHEMA,
        stateStructType=BUCKET_STATE_SCHEMA if settings.state_buckets else KEY_STATE_SCHEMA,
        outputMode="append",
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
    ).observe(
        "lag_records",
        _count_if(F.col("key").isNotNull() & F.col("group").isNotNull()).alias("records"),
        _count_if(F.col("key").isNotNull() & F.col("group").isNull()).alias("tombstones"),
        F.sum("late").alias("late"),
        F.sum("duplicates").alias("duplicates"),
        F.sum("invalid").alias("invalid"),
        F.min("first_invalid").alias("first_invalid"),
        F.sum("tracked").alias("tracked"),
    )
    return out.where(F.col("key").isNotNull()).select(
        "key", F.when(F.col("group").isNotNull(), _record_json()).alias("value")
    )


def start(spark: SparkSession, cfg: Config, checkpoint: str | None = None) -> StreamingQuery:
    """Define and start the query; the caller owns the session and awaits the query."""
    p = cfg.pipeline
    fmt = PYTHON_KAFKA if p.kafka_format == "ballast_kafka" else "kafka"
    if cfg.lag.samples_topic is None:
        raise ValueError("lag.samples_topic: the lag job needs the samples topic to read")
    reader = (
        spark.readStream.format(fmt)
        .options(**kafka_options(cfg))
        .option("subscribe", cfg.lag.samples_topic)
        .option("startingOffsets", p.starting_offsets)
    )
    if p.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(p.max_offsets_per_trigger))
    rows = lag_records(reader.load(), p, cfg.lag.auto_offset_reset)
    return (
        rows.writeStream.format(fmt)
        .options(**kafka_options(cfg))
        .option("topic", cfg.lag.topic)
        .option("checkpointLocation", checkpoint or p.checkpoint)
        .outputMode("append")
        .trigger(processingTime=f"{int(p.trigger_interval * 1000)} milliseconds")
        .queryName("ballast-lag")
        .start()
    )


async def create_topics(cfg: Config) -> None:
    """The samples and lag topics, created where missing: Kafka clusters seldom create a
    topic on first use, and the job may start before the controller does."""
    admin = AIOKafkaAdminClient(**client_options(cfg), client_id=f"{cfg.kafka.client_id}-lag-job")
    await admin.start()
    try:
        await ensure_pipeline_topics(admin, cfg)
    finally:
        await admin.close()


def run(cfg: Config, checkpoint: str | None = None) -> int:
    """Run until interrupted: the entry point of ``ballast pipeline lag``."""
    asyncio.run(create_topics(cfg))
    where = checkpoint or cfg.pipeline.checkpoint
    extra = s3a.spark_conf(cfg.pipeline) if s3a.wanted(where) else {}
    spark = session(cfg.pipeline.master, cfg.pipeline.shuffle_partitions, extra)
    reporter = ProgressReporter.install(spark, cfg.pipeline.metrics_port)
    query = start(spark, cfg, checkpoint)
    reporter.log.info(
        "pipeline_started", query=query.name, checkpoint=checkpoint or cfg.pipeline.checkpoint
    )
    code = 0
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        reporter.log.info("pipeline_stopping")
        code = 130  # as every ballast command interrupted by Ctrl-C
    finally:
        query.stop()
        reporter.close(spark)
        spark.stop()
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--checkpoint", help="overrides pipeline.checkpoint")
    args = parser.parse_args(argv)
    return run(load_config(args.config), args.checkpoint)


if __name__ == "__main__":
    sys.exit(main())
