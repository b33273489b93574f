"""Fixtures shared by every suite: one local Spark session for the whole run (starting
one takes seconds), and the embedded brokers (``tests/brokers.py``). Each starts only
when a test asks for it; suites that need Spark import nothing from it until they ask."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.brokers import broker_dir, kafka, mqtt, names, topic

pytest_plugins = ["tests.hang_guard"]

__all__ = ["broker_dir", "kafka", "mqtt", "names", "topic"]  # fixtures for every suite

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def example_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What config/ballast.yaml needs to load here: its signing key (the example points
    at a pod's Secret mount) generated for the run."""
    from controller.wire.signing import generate  # noqa: PLC0415

    private, _ = generate(tmp_path_factory.mktemp("example-key"))
    return {"BALLAST_SIGNING__PRIVATE_KEY_FILE": str(private)}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    pytest.importorskip("pyspark", reason="the pipeline extra is not installed")
    from pipeline.session import session  # noqa: PLC0415 (Spark only for suites that use it)

    s = session("local[2]", shuffle_partitions=2)
    yield s
    for q in s.streams.active:
        q.stop()
    s.stop()
