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
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from controller.runtime.config import Config, PipelineSettings, load_config
from controller.wire.records import (
    DecodeError,
    LagRecord,
    OffsetSample,
    decode,
    partition_key,
)

from . import lagmath
from .connection import kafka_options
from .kafka_source import NAME as PYTHON_KAFKA
from .progress import ProgressReporter
from .session import session

OUTPUT_SCHEMA = (
    "key string, value string, emit boolean, late long, duplicates long, invalid long, "
    "first_invalid string"
)
#: Points as JSON ``[[t, log_end, committed, log_start], ...]``: array columns in the state
#: schema fail to deserialize in the Python worker (PySpark 4.3).
STATE_SCHEMA = "points string"
#: The watermark needs event time before the stateful step, so it is read in the JVM;
#: a value without a usable one is rejected there with this reason.
NO_EVENT_TIME = "no positive numeric sampled_at (not JSON, or the field is missing)"


def _decode(
    key: bytes | None, value: bytes | None, where: str
) -> tuple[OffsetSample | None, str | None]:
    try:
        s = decode(OffsetSample, value, where)
    except DecodeError as exc:
        return None, str(exc)
    if key != partition_key(s.group, s.topic, s.partition):
        shown = key.decode(errors="replace") if key else None
        return None, f"{where}: key {shown!r} disagrees with the body"
    return s, None


def partition_updater(
    settings: PipelineSettings, reset: Literal["latest", "earliest"]
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """The per-partition state function for ``applyInPandasWithState``, grouped by the
    record key: it decodes and validates each sample (one Python pass for the batch)."""

    def update(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        record_key = str(key[0])
        if state.hasTimedOut:
            state.remove()
            yield _out(record_key, None, emit=True)
            return
        history: list[lagmath.Point] = []
        if state.exists:
            history = [lagmath.Point(*p) for p in json.loads(state.get[0])]
        watermark = state.getCurrentWatermarkMs() / 1000
        late = 0
        errors: list[str] = []
        fresh: list[lagmath.Point] = []
        sample: OffsetSample | None = None
        raw_key = record_key.encode()
        for df in batches:
            for value, topic, part, offset in zip(
                df["value"], df["topic"], df["partition"], df["offset"], strict=True
            ):
                decoded, error = _decode(raw_key, value, f"{topic}[{part}]@{offset}")
                if decoded is None:
                    errors.append(error or "")
                elif decoded.sampled_at < watermark:
                    late += 1
                else:
                    sample = decoded
                    fresh.append(
                        lagmath.Point(
                            decoded.sampled_at,
                            decoded.log_end,
                            decoded.committed,
                            decoded.log_start,
                        )
                    )
        merged = lagmath.merge(
            history, fresh, keep_seconds=settings.history, max_points=settings.max_points
        )
        accepted = len(fresh) - merged.duplicates
        invalid, first_invalid = len(errors), min(errors, default=None)
        if not merged.points:
            yield _out(
                record_key,
                None,
                emit=False,
                late=late,
                invalid=invalid,
                first_invalid=first_invalid,
            )
            return
        points = merged.points
        state.update((json.dumps(points),))
        state.setTimeoutTimestamp(int((points[-1].t + settings.age_out) * 1000))
        value = None
        if accepted and sample is not None:
            est = lagmath.estimate(points, rate_window=settings.rate_window, reset=reset)
            value = LagRecord(
                group=sample.group,
                topic=sample.topic,
                partition=sample.partition,
                lag=est.lag,
                time_lag=est.time_lag,
                produce_rate=est.produce_rate,
                consume_rate=est.consume_rate,
                observed_at=est.observed_at,
            ).model_dump_json()
        yield _out(
            record_key,
            value,
            emit=value is not None,
            late=late,
            duplicates=merged.duplicates,
            invalid=invalid,
            first_invalid=first_invalid,
        )

    return update


def _out(
    key: str,
    value: str | None,
    *,
    emit: bool,
    late: int = 0,
    duplicates: int = 0,
    invalid: int = 0,
    first_invalid: str | None = None,
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "key": [key],
            "value": [value],
            "emit": [emit],
            "late": [late],
            "duplicates": [duplicates],
            "invalid": [invalid],
            "first_invalid": [first_invalid],
        }
    )


def _count_if(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0))


def lag_records(
    raw: DataFrame, settings: PipelineSettings, reset: Literal["latest", "earliest"]
) -> DataFrame:
    """Kafka-shaped rows (key, value, topic, partition, offset) -> rows (key, value) for
    the lag topic. Two observations report per micro-batch: ``samples`` (rows, and those
    without event time) and ``lag_records`` (records, tombstones, late, duplicates,
    invalid and the first invalid one)."""
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
    timed = rows.where(F.col("event_time").isNotNull() & F.col("key").isNotNull()).withWatermark(
        "event_time", f"{int(settings.lateness * 1000)} milliseconds"
    )
    out = (
        timed.groupBy("key")
        .applyInPandasWithState(
            partition_updater(settings, reset),
            outputStructType=OUTPUT_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="append",
            timeoutConf=GroupStateTimeout.EventTimeTimeout,
        )
        .observe(
            "lag_records",
            _count_if(F.col("emit") & F.col("value").isNotNull()).alias("records"),
            _count_if(F.col("emit") & F.col("value").isNull()).alias("tombstones"),
            F.sum("late").alias("late"),
            F.sum("duplicates").alias("duplicates"),
            F.sum("invalid").alias("invalid"),
            F.min("first_invalid").alias("first_invalid"),
        )
    )
    return out.where("emit").select("key", "value")


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


def run(cfg: Config, checkpoint: str | None = None) -> int:
    """Run until interrupted: the entry point of ``ballast pipeline lag``."""
    spark = session(cfg.pipeline.master, cfg.pipeline.shuffle_partitions)
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
