"""One local Spark session for the whole pipeline suite (starting one takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="the pipeline extra is not installed")

from pyspark.sql import SparkSession  # noqa: E402

from pipeline.session import session  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    s = session("local[2]", shuffle_partitions=2)
    yield s
    for q in s.streams.active:
        q.stop()
    s.stop()
