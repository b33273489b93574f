"""Fleet backtest: replay recorded or synthetic traces through the strategies on Spark,
one group per task, and report movement, lag skew, balance and compute time.

Outputs under ``--out``: ``steps.parquet`` (one row per strategy, group and step),
``groups.parquet`` (per strategy and group), ``summary.md`` and three PNG charts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import matplotlib as mpl
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from controller.wire.records import DecodeError, TraceEvent, decode

from .traces import StepResult, as_rows, replay

mpl.use("Agg")
import matplotlib.pyplot as plt

_SPARK_TYPES = {"str": "string", "int": "long", "float": "double", "bool": "boolean"}
#: ``StepResult`` as Spark DDL (one place for the schema), plus a rejected line's error.
STEP_SCHEMA = ", ".join(
    [*(f"{f.name} {_SPARK_TYPES[str(f.type)]}" for f in fields(StepResult)), "error string"]
)
_STEP_COLUMNS = [c.split()[0] for c in STEP_SCHEMA.split(", ")]


def _replay_group(strategies: Sequence[str]) -> Any:
    def run(lines: pd.DataFrame) -> pd.DataFrame:
        events: list[TraceEvent] = []
        errors: list[str] = []
        for seq, value in zip(lines["seq"], lines["value"], strict=True):
            try:
                events.append(decode(TraceEvent, value.encode(), f"trace line {seq + 1}"))
            except DecodeError as exc:
                errors.append(str(exc))
        rows = as_rows(replay(events, strategies)) if events else []
        frame = pd.DataFrame(rows, columns=_STEP_COLUMNS[:-1])
        frame["error"] = None
        if errors:
            bad = pd.DataFrame(
                {"group": [str(lines["group"].iloc[0])] * len(errors), "error": errors}
            )
            frame = pd.concat([frame, bad], ignore_index=True)
        return frame[_STEP_COLUMNS]

    return run


@dataclass(frozen=True)
class Report:
    groups: int
    events: int
    seconds: float
    summary: pd.DataFrame
    errors: list[str]

    @property
    def groups_per_minute(self) -> float:
        return self.groups * 60 / self.seconds if self.seconds else 0.0


def backtest(
    spark: SparkSession, trace: Path, strategies: Sequence[str], out: Path, tasks: int = 16
) -> Report:
    started = time.perf_counter()
    # line numbers for error messages: one file, read in order
    lines = (
        spark.read.text(str(trace))
        .where(F.trim("value") != "")
        .withColumn("seq", F.monotonically_increasing_id())
        .withColumn("group", F.coalesce(F.get_json_object("value", "$.group"), F.lit("?")))
    )
    steps = (
        lines.repartition(tasks, "group")
        .groupBy("group")
        .applyInPandas(_replay_group(strategies), STEP_SCHEMA)
        .cache()
    )
    errors = [r.error for r in steps.where("error IS NOT NULL").select("error").limit(20).collect()]
    good = steps.where("error IS NULL").drop("error")
    out.mkdir(parents=True, exist_ok=True)
    good.write.mode("overwrite").parquet(str(out / "steps.parquet"))
    per_group(good).write.mode("overwrite").parquet(str(out / "groups.parquet"))
    summary = summarize(good).toPandas()
    seconds = time.perf_counter() - started
    report = Report(
        groups=good.select("group").distinct().count(),
        events=lines.count(),
        seconds=seconds,
        summary=summary,
        errors=errors,
    )
    charts(good, out)
    (out / "summary.md").write_text(markdown(report))
    steps.unpersist()
    return report


def per_group(steps: DataFrame) -> DataFrame:
    return steps.groupBy("strategy", "group").agg(
        F.max("members").alias("max_members"),
        F.max("partitions").alias("max_partitions"),
        F.count("*").alias("steps"),
        F.sum("moved").alias("moved"),
        F.avg("lag_skew").alias("mean_lag_skew"),
        F.max("lag_skew").alias("max_lag_skew"),
        F.avg("lag_vs_bound").alias("mean_lag_vs_bound"),
        F.max("count_spread").alias("max_count_spread"),
        F.sum("compute_seconds").alias("compute_seconds"),
        F.min(F.col("valid").cast("int")).cast("boolean").alias("always_valid"),
    )


def summarize(steps: DataFrame) -> DataFrame:
    """Per strategy; steps after the first of each group, where movement can happen.

    Groups are counted in a join of their own: a distinct count beside the percentiles
    makes Spark expand every row per aggregate, and compiling that plan alone took
    longer (4 s) than everything else in the summary."""
    later = steps.where("step > 0")
    groups = steps.select("strategy", "group").distinct().groupBy("strategy").count()
    return (
        steps.groupBy("strategy")
        .agg(
            F.count("*").alias("steps"),
            F.sum(F.when(~F.col("valid"), 1).otherwise(0)).alias("invalid"),
            F.percentile_approx("lag_skew", 0.5).alias("lag_skew_p50"),
            F.percentile_approx("lag_skew", 0.95).alias("lag_skew_p95"),
            F.percentile_approx("lag_vs_bound", 0.5).alias("vs_bound_p50"),
            F.percentile_approx("lag_vs_bound", 0.95).alias("vs_bound_p95"),
            F.max("count_spread").alias("max_count_spread"),
            F.percentile_approx("compute_seconds", 0.5).alias("compute_p50_s"),
            F.percentile_approx("compute_seconds", 0.99).alias("compute_p99_s"),
            F.sum("compute_seconds").alias("compute_total_s"),
        )
        .join(groups.withColumnRenamed("count", "groups"), "strategy")
        .join(
            later.groupBy("strategy").agg(
                F.sum("moved").alias("moved"),
                F.avg(F.col("moved") / F.col("partitions")).alias("moved_fraction_mean"),
            ),
            "strategy",
            "left",
        )
        .orderBy("strategy")
    )


def markdown(report: Report) -> str:
    s = report.summary
    head = (
        "| strategy | groups | steps | invalid | moved (after start) | moved/partitions "
        "| lag skew p50 | p95 | max lag / bound p50 | p95 | max count spread "
        "| compute p50 | p99 | total |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = "".join(
        f"| {r.strategy} | {r.groups} | {r.steps} | {r.invalid} | {int(r.moved or 0)} "
        f"| {r.moved_fraction_mean or 0:.3f} | {r.lag_skew_p50:.2f} | {r.lag_skew_p95:.2f} "
        f"| {r.vs_bound_p50:.3f} | {r.vs_bound_p95:.3f} "
        f"| {r.max_count_spread} | {r.compute_p50_s * 1000:.1f} ms "
        f"| {r.compute_p99_s * 1000:.1f} ms | {r.compute_total_s:.1f} s |\n"
        for r in s.itertuples()
    )
    tail = (
        f"\n{report.groups} groups, {report.events} trace events, "
        f"{report.seconds:.1f} s wall ({report.groups_per_minute:.0f} groups/min).\n"
    )
    if report.errors:
        tail += "\nRejected trace lines (first 20):\n" + "".join(f"- {e}\n" for e in report.errors)
    return head + rows + tail


def charts(steps: DataFrame, out: Path) -> None:
    by_step: pd.DataFrame = (
        steps.groupBy("strategy", "step")
        .agg(F.percentile_approx("lag_vs_bound", 0.5).alias("skew"))
        .orderBy("step")
        .toPandas()
    )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for strategy, rows in by_step.groupby("strategy"):
        ax.plot(rows["step"], rows["skew"], marker="o", label=strategy)
    ax.set(
        xlabel="step (minutes)",
        ylabel="median of max member lag / lower bound",
        title="Lag balance over time (1.0 = optimal)",
    )
    ax.legend()
    fig.savefig(out / "lag_skew.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    moved: pd.DataFrame = (
        steps.where("step > 0").groupBy("strategy").agg(F.sum("moved").alias("moved")).toPandas()
    )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(moved["strategy"], moved["moved"])
    ax.set(ylabel="partitions moved (all groups)", title="Movement after the initial assignment")
    ax.set_yscale("log")
    fig.savefig(out / "moved.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    timing: pd.DataFrame = steps.select("strategy", "partitions", "compute_seconds").toPandas()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for strategy, rows in timing.groupby("strategy"):
        ax.scatter(rows["partitions"], rows["compute_seconds"] * 1000, s=6, label=strategy)
    ax.set(xscale="log", yscale="log", xlabel="partitions", ylabel="compute time (ms)")
    ax.set_title("Time to compute one assignment")
    ax.legend(markerscale=3)
    fig.savefig(out / "compute_time.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
