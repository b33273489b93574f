"""The lag job's streaming logic on small deterministic inputs (Spark local mode).

Samples enter as Kafka-shaped rows from JSON files (a file per micro-batch), so these
tests need no broker; tests/pipeline/test_pipeline_e2e.py runs the same job on Kafka.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from controller.config import PipelineSettings
from controller.wire.records import LagRecord
from pipeline.lagjob import RECORD_FIELDS, lag_records

RAW = "key string, value string, topic string, partition int, offset long"


class Feed:
    """Kafka-shaped rows written to files a streaming file source picks up."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.offsets = itertools.count()
        self.files = itertools.count()

    def sample(
        self, partition: int, committed: int | None, log_end: int, t: float
    ) -> dict[str, Any]:
        body = {
            "group": "g",
            "topic": "t",
            "partition": partition,
            "committed": committed,
            "log_end": log_end,
            "sampled_at": t,
        }
        return self.raw(f"g/t/{partition}", json.dumps(body))

    def raw(self, key: str, value: str) -> dict[str, Any]:
        return {
            "key": key,
            "value": value,
            "topic": "samples",
            "partition": 0,
            "offset": next(self.offsets),
        }

    def write(self, *rows: dict[str, Any]) -> None:
        tmp = self.root / f".{next(self.files)}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(self.root / f"{tmp.stem.lstrip('.')}.json")


class Run:
    def __init__(self, spark: SparkSession, feed: Feed, settings: PipelineSettings) -> None:
        raw = (
            spark.readStream.schema(RAW)
            .json(str(feed.root))
            .selectExpr(
                "cast(key as binary) key",
                "cast(value as binary) value",
                "topic",
                "partition",
                "offset",
            )
        )
        self.out: list[tuple[str, dict[str, Any] | None]] = []
        self.seen = 0
        self.query: StreamingQuery = (
            lag_records(raw, settings, "latest")
            .writeStream.outputMode("append")
            .foreachBatch(self._collect)
            .start()
        )

    def _collect(self, df: Any, _batch: int) -> None:
        for row in df.collect():
            self.out.append((row.key, None if row.value is None else json.loads(row.value)))

    def step(self) -> list[tuple[str, dict[str, Any] | None]]:
        """Everything written since the last step (the query runs on its own between)."""
        self.query.processAllAvailable()
        new, self.seen = self.out[self.seen :], len(self.out)
        return new

    def observed(self, name: str, field: str) -> int:
        return sum(
            p.observedMetrics[name][field] or 0
            for p in self.query.recentProgress
            if name in p.observedMetrics
        )


@pytest.fixture
def feed(tmp_path: Path) -> Feed:
    return Feed(tmp_path)


def record(  # noqa: PLR0917
    partition: int,
    lag: int,
    time_lag: float | None,
    produce: float | None,
    consume: float | None,
    at: float,
) -> dict[str, Any]:
    return {
        "version": 1,
        "group": "g",
        "topic": "t",
        "partition": partition,
        "lag": lag,
        "time_lag": time_lag,
        "produce_rate": produce,
        "consume_rate": consume,
        "observed_at": at,
    }


def test_rates_and_time_lag_over_event_time(spark: SparkSession, feed: Feed) -> None:
    run = Run(spark, feed, PipelineSettings(lateness=15, rate_window=20, age_out=600))
    try:
        feed.write(feed.sample(0, 1000, 1000, 100.0), feed.sample(0, 1080, 1200, 120.0))
        # 1080 lies 40% of the way from 1000 (t=100) to 1200 (t=120): produced at 108
        assert run.step() == [("g/t/0", record(0, 120, 12.0, 10.0, 4.0, 120.0))]
        # arrival order is not event order: t=110 arrives after t=120
        feed.write(feed.sample(0, 1050, 1100, 110.0), feed.sample(0, 1100, 1300, 130.0))
        # offset 1100 was the log end at t=110 -> 20 s behind; rates over t=110..130
        assert run.step() == [("g/t/0", record(0, 200, 20.0, 10.0, 2.5, 130.0))]
    finally:
        run.query.stop()


def test_duplicates_late_samples_and_bad_input_are_counted_not_used(
    spark: SparkSession, feed: Feed
) -> None:
    run = Run(spark, feed, PipelineSettings(lateness=10, age_out=600))
    try:
        feed.write(feed.sample(1, 0, 50, 200.0), feed.sample(1, 10, 70, 210.0))
        # offset 10 is 40 before the oldest point at 2 offsets/s: produced at t=180
        assert run.step() == [("g/t/1", record(1, 60, 30.0, 2.0, 1.0, 210.0))]
        feed.write(
            feed.sample(1, 999, 999, 210.0),  # replayed event time: first seen wins
            feed.sample(1, 0, 40, 150.0),  # behind the watermark (210 - 10)
            feed.raw("g/t/1", "{not json"),
            feed.raw(
                "g/t/2",
                json.dumps(
                    {
                        "group": "g",
                        "topic": "t",
                        "partition": 1,
                        "committed": 0,
                        "log_end": 1,
                        "sampled_at": 205.0,
                    }
                ),
            ),
            feed.raw(
                "g/t/3",
                json.dumps(
                    {
                        "group": "g",
                        "topic": "t",
                        "partition": 3,
                        "committed": 9,
                        "log_end": 1,
                        "sampled_at": 205.0,
                    }
                ),
            ),
        )
        assert run.step() == []  # nothing new was accepted: nothing written
        assert run.observed("samples", "rows") == 7
        # no event time (read in the JVM for the watermark), or invalid once decoded
        assert run.observed("samples", "invalid") == 1
        assert run.observed("lag_records", "invalid") == 2
        late = run.observed("lag_records", "late") + sum(
            s.numRowsDroppedByWatermark for p in run.query.recentProgress for s in p.stateOperators
        )
        assert late == 1
        assert run.observed("lag_records", "duplicates") == 1
        errors = sorted(
            p.observedMetrics[name]["first_invalid"]
            for p in run.query.recentProgress
            for name in ("samples", "lag_records")
            if name in p.observedMetrics and p.observedMetrics[name]["first_invalid"]
        )
        assert errors == [
            "samples[0]@4: no positive numeric sampled_at (not JSON, or the field is missing)",
            "samples[0]@5: key 'g/t/2' disagrees with the body",
        ]
    finally:
        run.query.stop()


def test_a_partition_that_stops_reporting_ages_out(spark: SparkSession, feed: Feed) -> None:
    run = Run(spark, feed, PipelineSettings(lateness=5, age_out=60))
    try:
        feed.write(feed.sample(0, 5, 5, 1000.0), feed.sample(1, 5, 5, 1000.0))
        assert sorted(k for k, _ in run.step()) == ["g/t/0", "g/t/1"]
        assert run.observed("lag_records", "tracked") == 2  # partitions held, not buckets
        feed.write(feed.sample(1, 6, 6, 1100.0))  # watermark 1095 > 1000 + 60
        assert sorted(run.step(), key=str) == [
            ("g/t/0", None),
            ("g/t/1", record(1, 0, 0.0, None, None, 1100.0)),  # 100 s apart: outside rate_window
        ]
        assert run.observed("lag_records", "tombstones") == 1
    finally:
        run.query.stop()


def test_bucketed_and_per_partition_state_write_the_same_records(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Three buckets for eight partitions against one state key per partition, fed the
    same batches: new points, replays, late and out-of-order samples, a recreated topic
    (log end going backwards), bad input and partitions that fall silent and age out."""
    feeds = {b: Feed(tmp_path / str(b)) for b in (3, 0)}
    runs = {}
    for buckets, feed in feeds.items():
        feed.root.mkdir()
        settings = PipelineSettings(lateness=5, age_out=40, rate_window=20, state_buckets=buckets)
        runs[buckets] = Run(spark, feed, settings)
    batches: list[list[tuple[Any, ...]]] = [
        [(p, 100 * p, 100 * p + 50, 1000.0) for p in range(8)],
        [(p, 100 * p + 20, 100 * p + 90, 1010.0) for p in range(8)]
        + [(2, 0, 0, 1000.0), (3, 1, 1, 1005.0), (4, 0, 1, 1001.0)],
        [(p, 100 * p + 30, 100 * p + 95, 1020.0) for p in range(0, 8, 2)]
        + [(1, 5, 5, 1001.0), (6, 0, 3, 1025.0), ("bad", "{not json")],
        [(p, 100 * p + 60, 100 * p + 120, 1060.0) for p in range(4)],
        [(0, 70, 130, 1100.0), (5, 505, 555, 1099.0)],
    ]
    try:
        for batch in batches:
            for feed in feeds.values():
                feed.write(
                    *(
                        feed.raw(f"g/t/{row[0]}", row[1]) if len(row) == 2 else feed.sample(*row)
                        for row in batch
                    )
                )
            outputs = [sorted(run.step(), key=str) for run in runs.values()]
            assert outputs[0] == outputs[1]
        assert sum(v is None for _, v in runs[3].out) >= 4  # silent partitions aged out
        for name, field in [("lag_records", f) for f in ("late", "duplicates", "invalid")]:
            assert runs[3].observed(name, field) == runs[0].observed(name, field)
    finally:
        for run in runs.values():
            run.query.stop()


def test_the_jvm_writes_every_lag_record_field() -> None:
    """The job returns ``LagRecord``'s fields as columns and Spark writes the JSON: a field
    added to the model and not to the job would be missing from every record."""
    assert set(RECORD_FIELDS) | {"version"} == set(LagRecord.model_fields)
