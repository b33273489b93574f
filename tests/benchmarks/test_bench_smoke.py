"""The assignor benchmark runs, and on a small group Ballast is never worse than its peer
on movement or balance (no timing here: timings live in benchmarks/, never in tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import assignors_bench as bench


@pytest.mark.parametrize("mixed", [False, True])
def test_small_config_against_kafka_python(mixed: bool) -> None:
    rows = bench.run_config(members=12, per_member=5, topics=3, mixed=mixed, repeat=3)
    by = {(r.event, r.impl): r for r in rows}
    for event in ("leave", "join"):
        ours, peer = by[(event, "ballast engine")], by[(event, "kafka-python sticky")]
        assert ours.balanced
        assert ours.spread <= peer.spread
        if not mixed:
            assert ours.moved == ours.min_moved
            assert ours.moved <= peer.moved


def test_lag_quality_rows_are_ratios_to_the_optimum() -> None:
    rows = bench.lag_quality(2)
    for row in rows:
        assert row["lagsticky"] >= 1.0
        assert row["lagsticky"] <= row["roundrobin"]
