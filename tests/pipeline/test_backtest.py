"""The backtest on Spark: every group replayed, outputs written, bad lines reported."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from assignors import STRATEGIES
from pipeline.backtest import backtest
from pipeline.traces import synthesize, write_jsonl


def test_backtest_replays_every_group_and_writes_its_reports(
    spark: SparkSession, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    events = list(synthesize(6, seed=1, max_members=40, steps=3))
    write_jsonl(events, trace)
    with trace.open("a") as f:
        f.write('{"group": "fleet-0001", "t": 1, "kind": "lag"}\n')  # no readings
    out = tmp_path / "out"
    report = backtest(spark, trace, STRATEGIES, out, tasks=4)

    assert report.groups == 6
    assert report.events == len(events) + 1
    assert len(report.errors) == 1
    assert "trace line" in report.errors[0]
    assert "a lag event needs lag" in report.errors[0]
    steps = pq.read_table(out / "steps.parquet").to_pandas()
    # 4 steps (start + 3) per group and strategy
    assert len(steps) == 6 * 4 * len(STRATEGIES)
    assert steps["valid"].all()
    summary = report.summary.set_index("strategy")
    assert set(summary.index) == set(STRATEGIES)
    assert (summary["invalid"] == 0).all()
    # the sticky strategies move far less than the ones that recompute from scratch
    assert summary.loc["sticky", "moved"] < summary.loc["roundrobin", "moved"]
    assert summary.loc["lagsticky", "moved"] < summary.loc["lag", "moved"]
    groups = pq.read_table(out / "groups.parquet").to_pandas()
    assert len(groups) == 6 * len(STRATEGIES)
    for png in ("lag_skew.png", "moved.png", "compute_time.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| lagsticky |" in (out / "summary.md").read_text()
