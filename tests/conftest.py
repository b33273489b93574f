"""Fixtures shared by every suite: one local Spark session for the whole run (starting
one takes seconds), and the embedded brokers (``tests/brokers.py``). Each starts only
when a test asks for it; suites that need Spark import nothing from it until they ask.

The two tiers: a test that asks for a broker or Spark, or lives where tests start them
themselves (``tests/benchmarks``, ``tests/pipeline``), is marked ``integration`` here, so
``-m "not integration"`` (``scripts/test-fast``) is the pure tier without anyone having
to remember the marker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.brokers import broker_dir, kafka, mqtt, names, topic

pytest_plugins = ["tests.hang_guard"]

__all__ = ["broker_dir", "kafka", "mqtt", "names", "topic"]  # fixtures for every suite

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: Fixtures that start a real broker or Spark.
_REAL_FIXTURES = frozenset(
    {"broker_dir", "kafka", "mqtt", "spark", "secured", "zoned", "mosquitto"}
)
#: Folders (under tests/) whose tests start brokers, Spark or benchmarks themselves.
_REAL_FOLDERS = frozenset({"benchmarks", "pipeline"})
_ROOT = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(_ROOT).parts
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & _REAL_FIXTURES or where[0] in _REAL_FOLDERS:
            item.add_marker(pytest.mark.integration)


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
