"""The fleet-operation benchmarks run end to end at a tiny size, as their commands are
given in docs/performance.md (``group_ops.py`` had silently stopped running once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.brokers import BROKER

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def run(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--broker", BROKER, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,  # the assertion below shows the benchmark's own error
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_fleet_ops_moves_each_operations_minimum_over_a_split_fleet() -> None:
    """Two agents, each hosting its slot of the members and skipping the others' records:
    a rolling deploy moves nothing, a scale-in, a scale-out and a lost zone move exactly
    what they must, and no partition is ever held twice. (``--delay 2``: a loaded machine
    must not split the scale-out's joins into two steps.)"""
    out = run(
        "fleet_ops.py", "--members", "12", "--partitions", "120", "--agents", "2",
        "--ops", "rolling,scale_in,scale_out,zone_loss", "--restart", "0.5",
        "--leave-grace", "3", "--delay", "2",
    )  # fmt: skip
    assert out["rolling_moved"] == 0
    for op in ("scale_in", "scale_out", "zone_loss"):
        assert out[f"{op}_min_moved"] > 0
        assert out[f"{op}_moved"] == out[f"{op}_min_moved"], op
    for op in ("rolling", "scale_in", "scale_out", "zone_loss"):
        assert out[f"{op}_read_twice"] == 0, op
        assert out[f"{op}_unavailable_p99_s"] is not None, op


def test_group_ops_compares_ballast_with_the_group_protocol() -> None:
    out = run(
        "group_ops.py", "--members", "6", "--partitions", "60", "--variants",
        "ballast,sticky", "--leave-grace", "6", "--restart", "0.5", "--delay", "2",
    )  # fmt: skip
    assert out["ballast_rolling_moved"] == 0
    assert out["ballast_scale_in_moved"] == out["ballast_scale_in_min_moved"] > 0
    for op in ("rolling", "scale_in", "scale_out", "zone_loss"):
        assert out[f"ballast_{op}_read_twice"] == 0, op
        assert out[f"sticky_{op}_unavailable_p99_s"] is not None, op
        assert f"ratio_sticky_{op}_unavailable_p99" in out, op
