"""Lag readings of partitions that do not exist (yet) wait beside the per-partition
arrays: a reading for partition 2**31 - 1 sized them for two billion partitions (16 GiB)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from assignors import (
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    PartitionsChanged,
    TopicPartition,
)

LAST = 2**31 - 1  # the largest partition number Kafka has


def _run_within(mib: int, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose address space is capped: the broken code
    fails there with MemoryError instead of taking the test run's memory."""
    prelude = (
        f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({mib << 20}, {mib << 20}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_one_shot_and_engine_take_a_reading_for_the_last_partition_number_in_little_memory() -> (
    None
):
    done = _run_within(
        1024,
        f"""
        from assignors import IncrementalAssignor, LagUpdated, TopicPartition, assign
        lag = {{TopicPartition("orders", {LAST}): 1, TopicPartition("orders", 1): 7}}
        print(assign("lagsticky", {{"orders": 4}}, {{"a": ["orders"], "b": ["orders"]}}, lag=lag))
        engine, _ = IncrementalAssignor.from_snapshot({{"orders": 4}}, {{"a": ["orders"]}}, lag=lag)
        engine.apply([LagUpdated({{TopicPartition("orders", {LAST} - 1): 3}})])
        print(sorted(engine.lag().values()))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[1, 3, 7]"


def test_a_reading_ahead_of_its_topic_weighs_once_the_topic_grows_into_it() -> None:
    engine, _ = IncrementalAssignor.from_snapshot(
        {"orders": 4}, {"a": ["orders"]}, lag={TopicPartition("orders", 6): 50}
    )
    engine.apply([LagUpdated({TopicPartition("orders", 1000): 9, TopicPartition("new", 3): 4})])
    assert engine.member_lag() == {"a": 0}
    engine.apply([PartitionsChanged("orders", 8), MemberJoined("b", frozenset({"orders"}))])
    holder = next(m for m, tps in engine.assignment().items() if TopicPartition("orders", 6) in tps)
    assert engine.member_lag()[holder] == 50
    # Each reading stays paired with its own partition, also once topics were named out
    # of order ("new" after "orders").
    assert engine.lag() == {
        TopicPartition("orders", 6): 50,
        TopicPartition("orders", 1000): 9,
        TopicPartition("new", 3): 4,
    }
