"""``ballast pipeline lag|backtest|synth``: registered with ``ballast`` through the
``ballast.commands`` entry point, so the controller's CLI never imports the pipeline.
Light, as ``ballast --help`` loads it: PySpark and the assignors are imported only when a
job runs (the pipeline extra)."""

from __future__ import annotations

import argparse
from pathlib import Path

from controller.errors import InputError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``pipeline`` subcommand to ``ballast``'s subparsers."""
    p = sub.add_parser("pipeline", help="the Spark lag job and fleet backtest (pipeline extra)")
    jobs = p.add_subparsers(dest="job", required=True)
    j = jobs.add_parser("lag", help="streaming job: offset samples -> lag records")
    j.add_argument(
        "--config", type=Path, default=Path("config/ballast.yaml"), help="YAML config file"
    )
    j.add_argument("--checkpoint", help="overrides pipeline.checkpoint")
    j.set_defaults(func=_run)
    j = jobs.add_parser("backtest", help="replay fleet traces through the strategies")
    j.add_argument("--trace", type=Path, required=True, help="JSONL trace (run --record, synth)")
    j.add_argument("--strategies", help="comma-separated (default: every strategy)")
    j.add_argument(
        "--out", type=Path, default=Path("backtest-out"), help="directory for tables and charts"
    )
    j.add_argument("--master", default="local[2]", help="Spark master URL")
    j.add_argument("--tasks", type=int, default=16, help="Spark tasks the groups spread over")
    j.set_defaults(func=_run)
    j = jobs.add_parser("synth", help="write a synthetic fleet trace")
    j.add_argument("--groups", type=int, default=500, help="consumer groups in the trace")
    j.add_argument("--max-members", type=int, default=1000, help="members of the largest group")
    j.add_argument("--steps", type=int, default=12, help="minutes of churn after the start")
    j.add_argument("--seed", type=int, default=7, help="random seed (same seed, same trace)")
    j.add_argument("--out", type=Path, required=True, help="JSONL trace to write")
    j.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        from pipeline import cli  # noqa: PLC0415 (optional extra: PySpark)
    except ImportError as exc:
        raise InputError(
            f"pipeline: install the pipeline extra (pip install 'ballast[pipeline]'): {exc}"
        ) from exc
    return cli.run(args)
