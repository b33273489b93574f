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
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from controller.config import Config, PipelineSettings, load_config
from controller.records import (
    DecodeError,
    LagRecord,
    OffsetSample,
    decode,
    partition_key,
)

from . import lagmath
from .kafka_source import NAME as PYTHON_KAFKA
from .progress import ProgressReporter
from .session import session

DECODED_SCHEMA = (
    "group string, topic string, partition long, committed long, log_end long, "
    "log_start long, sampled_at double, error string"
)
OUTPUT_SCHEMA = "key string, value string, emit boolean, late long, duplicates long"
#: Points as JSON ``[[t, log_end, committed, log_start], ...]``: array columns in the state
#: schema fail to deserialize in the Python worker (PySpark 4.3).
STATE_SCHEMA = "points string"
_SAMPLE_FIELDS = ("group", "topic", "partition", "committed", "log_end", "log_start", "sampled_at")


def decode_samples(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Kafka rows -> sample columns, or an ``error`` naming the record and the problem."""
    for raw in batches:
        cols: dict[str, list[Any]] = {f: [] for f in (*_SAMPLE_FIELDS, "error")}
        for key, value, topic, part, offset in zip(
            raw["key"], raw["value"], raw["topic"], raw["partition"], raw["offset"], strict=True
        ):
            s, error = _decode(key, value, f"{topic}[{part}]@{offset}")
            for f in _SAMPLE_FIELDS:
                cols[f].append(None if s is None else getattr(s, f))
            cols["error"].append(error)
        yield pd.DataFrame(cols)


def _decode(
    key: bytes | None, value: bytes | None, where: str
) -> tuple[OffsetSample | None, str | None]:
    try:
        # fast path (pydantic parses and validates in one pass); ``decode`` explains failures
        s = OffsetSample.model_validate_json(value) if value else decode(OffsetSample, value, where)
    except ValueError:
        try:
            s = decode(OffsetSample, value, where)
        except DecodeError as exc:
            return None, str(exc)
    if key != partition_key(s.group, s.topic, s.partition):
        shown = key.decode(errors="replace") if key else None
        return None, f"{where}: key {shown!r} disagrees with the body"
    return s, None


def _column(values: Any) -> list[int | None]:
    return [
        None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in values
    ]


def partition_updater(
    settings: PipelineSettings, reset: Literal["latest", "earliest"]
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """The per-partition state function for ``applyInPandasWithState``."""

    def update(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        group, topic, partition = str(key[0]), str(key[1]), int(key[2])
        record_key = partition_key(group, topic, partition).decode()
        if state.hasTimedOut:
            state.remove()
            yield _out(record_key, None, emit=True)
            return
        history: list[lagmath.Point] = []
        if state.exists:
            history = [lagmath.Point(*p) for p in json.loads(state.get[0])]
        watermark = state.getCurrentWatermarkMs() / 1000
        late = 0
        fresh: list[lagmath.Point] = []
        for df in batches:
            for t, e, c, s in zip(
                df["sampled_at"],
                _column(df["log_end"]),
                _column(df["committed"]),
                _column(df["log_start"]),
                strict=True,
            ):
                if t < watermark:
                    late += 1
                else:
                    fresh.append(lagmath.Point(float(t), int(e or 0), c, s))
        merged = lagmath.merge(
            history, fresh, keep_seconds=settings.history, max_points=settings.max_points
        )
        accepted = len(fresh) - merged.duplicates
        if not merged.points:
            yield _out(record_key, None, emit=False, late=late)
            return
        points = merged.points
        state.update((json.dumps(points),))
        state.setTimeoutTimestamp(int((points[-1].t + settings.age_out) * 1000))
        value = None
        if accepted:
            est = lagmath.estimate(points, rate_window=settings.rate_window, reset=reset)
            value = LagRecord(
                group=group,
                topic=topic,
                partition=partition,
                lag=est.lag,
                time_lag=est.time_lag,
                produce_rate=est.produce_rate,
                consume_rate=est.consume_rate,
                observed_at=est.observed_at,
            ).model_dump_json()
        yield _out(record_key, value, emit=bool(accepted), late=late, duplicates=merged.duplicates)

    return update


def _out(
    key: str, value: str | None, *, emit: bool, late: int = 0, duplicates: int = 0
) -> pd.DataFrame:
    return pd.DataFrame(
        {"key": [key], "value": [value], "emit": [emit], "late": [late], "duplicates": [duplicates]}
    )


def _count_if(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0))


def lag_records(
    raw: DataFrame, settings: PipelineSettings, reset: Literal["latest", "earliest"]
) -> DataFrame:
    """Kafka-shaped rows (key, value, topic, partition, offset) -> rows (key, value) for
    the lag topic. Two observations report per micro-batch: ``samples`` (rows, invalid,
    the first invalid one) and ``lag_records`` (records, tombstones, late, duplicates)."""
    decoded = (
        raw.select("key", "value", "topic", "partition", "offset")
        .mapInPandas(decode_samples, DECODED_SCHEMA)
        .observe(
            "samples",
            F.count(F.lit(1)).alias("rows"),
            _count_if(F.col("error").isNotNull()).alias("invalid"),
            F.min("error").alias("first_invalid"),
        )
    )
    valid = (
        decoded.where(F.col("error").isNull())
        .drop("error")
        .withColumn("event_time", F.timestamp_seconds("sampled_at"))
        .withWatermark("event_time", f"{int(settings.lateness * 1000)} milliseconds")
    )
    out = (
        valid.groupBy("group", "topic", "partition")
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
        )
    )
    return out.where("emit").select("key", "value")


def kafka_options(cfg: Config) -> dict[str, str]:
    return {"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers}


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
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        reporter.log.info("pipeline_stopping")
    finally:
        query.stop()
        spark.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--checkpoint", help="overrides pipeline.checkpoint")
    args = parser.parse_args(argv)
    return run(load_config(args.config), args.checkpoint)


if __name__ == "__main__":
    sys.exit(main())
