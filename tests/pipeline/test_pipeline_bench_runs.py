"""The pipeline benchmark runs as docs/pipeline.md prints it, on its default broker
(Apache Kafka: it creates no topic on first use, so a bench that left the lag job's
topics to chance failed there with "Topic lag not found"), smoke-sized. A subprocess,
as a reader would run it: the bench owns its Spark session and its broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.brokers import needs_kafka

pytestmark = [pytest.mark.integration, needs_kafka]

BENCH = Path(__file__).parents[2] / "benchmarks" / "pipeline_bench.py"


def test_the_stream_benchmark_reads_every_sample_on_apache_kafka() -> None:
    argv = [sys.executable, str(BENCH), "stream", "--samples", "3000", "--partitions", "300"]
    argv += ["--per-trigger", "1000", "--shuffle", "2"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == 3000  # every sample read, in batches of at most 1 000
    assert result["batches"] >= 3
    assert result["samples_per_second"] is not None
