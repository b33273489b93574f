"""The assignor benchmark runs, and on a small group Ballast is never worse than its peer
on movement or balance (no timing here: timings live in benchmarks/, never in tests)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import pytest

from tests.brokers import BROKER

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import assignors_bench as bench
import assignors_scale
import controller_scale
import fleet_ops
import lag_poll
import metadata_decode
import pipeline_loop
import slow_member


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


@pytest.mark.parametrize("mixed", [False, True])
def test_scale_rows_with_zones_report_cross_rack(mixed: bool) -> None:
    """The racked scenarios run every path with racks; with two replicas over three
    zones and members in all three, every partition can be local, and each path that
    reports the count says so."""
    s = assignors_scale.Scenario("tiny, 3 zones", 30, 300, 3, mixed, (), zones=3)
    rows = assignors_scale.ballast(s, repeat=2)
    reported = [r for r in rows if "cross_rack" in r]
    assert {r["impl"] for r in reported} == {"assign sticky", "assign lagsticky", "engine"}
    if not mixed:
        assert all(r["cross_rack"] == 0 for r in reported)
    plain = assignors_scale.ballast(
        assignors_scale.Scenario("tiny", 30, 300, 3, mixed, ()), repeat=2
    )
    assert not any("cross_rack" in r for r in plain)


def test_scale_rows_time_a_recovery_that_keeps_the_whole_assignment() -> None:
    """The takeover rows rebuild the engine from its own settled assignment: nothing
    moves, and the first leave and join after it are timed once per rebuild."""
    s = assignors_scale.Scenario("tiny", 30, 300, 3, False, ())
    rows = {r["impl"]: r for r in assignors_scale.ballast(s, repeat=2) if r["op"] == "recovery"}
    assert set(rows) == {
        "engine from current, lag",
        "engine, first leave after it",
        "engine, first join after it",
    }
    assert rows["engine from current, lag"]["moved"] == 0
    assert all(r["runs"] == 3 for r in rows.values())


def test_lag_quality_rows_are_ratios_to_the_optimum() -> None:
    rows = bench.lag_quality(2)
    for row in rows:
        assert row["lagsticky"] >= 1.0
        assert row["lagsticky"] <= row["roundrobin"]


def test_the_controller_scale_driver_settles_a_small_fleet_and_stays_exclusive() -> None:
    """The in-process driver really runs the controller's logic: the cold start ends
    with every partition granted and acknowledged, and after churn no partition is
    applied by two simulated members."""
    args = argparse.Namespace(
        members=20,
        partitions=400,
        topics=4,
        events=30,
        spacing=0.5,
        lag_interval=5.0,
        lag_chunks=2,
        seed=3,
        json=True,
    )
    run = controller_scale.Bench(args)
    start = run.cold_start()
    assert run.complete()
    assert start["cold_start_ticks"] > 0
    scaled = run.scale_in_and_out()
    assert run.complete()
    assert scaled["scale_in_records"] > 0
    # Each receiver paired with a donor or two: a revoke per donor, a first and a last
    # record per receiver, not one per donor it waits on.
    assert 0 < scaled["scale_out_records"] <= 3 * args.members
    phases = run.phases = controller_scale.Phases(run.state)
    run.churn()
    assert run.t.ticks
    assert run.t.records > 0
    assert run.t.lag_readings > 0
    # Where the slowest ticks go: the engine's step inside the tick, parts inside it.
    split = phases.slowest()
    assert split["GroupState.tick"] <= split["ticks_ms"]
    assert 0 < split["IncrementalAssignor._settle"] <= split["IncrementalAssignor.apply"]
    assert split["IncrementalAssignor.apply"] <= split["GroupState.tick"]
    assert "Reconciler.plan" in split
    held: dict[object, str] = {}
    for m in run.fleet.values():
        for tp in m.applied:
            assert tp not in held, f"{tp} applied by {held[tp]} and {m.name}"
            held[tp] = m.name


def test_the_closed_loop_benchmark_sees_the_controller_match_the_broker() -> None:
    """``pipeline_loop.py`` at a tiny size: poller -> Spark job -> controller, and the
    controller's lag view equals the broker's reading for every partition at some check.

    The run ends at that check. Its bound, from the settings: the lag job's start (a Spark
    JVM and its Kafka source until its first lag record: matched 50 s into the loop alone
    on this machine kind, the whole test 101-125 s beside another test worker; 150 s), a batch that reads the first samples and
    the next that writes from two of them (two triggers), the controller's poll that
    reads the records (one poll interval), and one check period."""
    trigger, poll, spark_start = 2.0, 2.0, 150.0
    bound = spark_start + 2 * trigger + poll + pipeline_loop.CHECK_EVERY
    args = pipeline_loop.arguments().parse_args(
        ["--members", "4", "--partitions", "120", "--topics", "2", "--seconds", str(bound),
         "--poll-interval", str(poll), "--trigger", str(trigger), "--broker", BROKER,
         "--until-matched"]
    )  # fmt: skip
    result = asyncio.run(pipeline_loop.run(args))
    view = result["view_matches_direct_reading"]
    assert isinstance(view, dict)
    assert view["first_all_s"] is not None, view
    records, lag = result["lag_records"], result["total_lag"]
    assert isinstance(records, int)
    assert isinstance(lag, int)
    assert records > 0
    assert lag > 0


def test_the_slow_member_benchmark_measures_each_controller() -> None:
    """``slow_member.py`` at a tiny size: count balance never moves for lag; the eager
    lag policy does, and the slow member's backlog is measured under both."""
    args = slow_member.arguments().parse_args(
        ["--members", "3", "--partitions", "12", "--rate", "120", "--seconds", "30",
         "--sample", "3", "--poll", "2", "--variants", "sticky", "lagsticky-eager",
         "--broker", BROKER]
    )  # fmt: skip
    result = asyncio.run(slow_member.run(args))
    sticky, eager = result["sticky"], result["lagsticky-eager"]
    assert sticky["partitions_moved_for_lag"] == 0
    assert eager["partitions_moved_for_lag"] > 0
    assert sticky["largest_member_lag"]["end"] > 0


def test_scale_rows_with_capacities_are_balanced_by_capacity() -> None:
    """The capacity scenarios run every path with capacities 1, 2 and 4, and the fresh
    results are within half a partition of each member's share."""
    s = assignors_scale.Scenario("tiny, capacities", 30, 300, 3, False, (), capacities=(1, 2, 4))
    rows = assignors_scale.ballast(s, repeat=2)
    reported = [r for r in rows if "share_error" in r]
    assert {r["impl"] for r in reported} == {"assign sticky", "assign lagsticky"}
    assert all(r["balanced"] and r["share_error"] <= 0.5 for r in reported)


def test_the_metadata_benchmark_reads_its_response_as_aiokafka_does(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["metadata_decode.py", "--partitions", "1000", "--runs", "1"])
    metadata_decode.main()  # asserts that both read the same counts
    assert '"partitions": 1000' in capsys.readouterr().out


async def test_the_lag_poll_benchmark_polls_every_way() -> None:
    out = await lag_poll.run(
        partitions=200, polls=2, broker=BROKER
    )  # asserts that all read the same
    assert out["partitions"] == 200
    for where in ("side_loop_aiokafka", "side_loop", "caller_loop"):
        assert out[where]["poll_cpu_s"] is not None
        assert out[where]["longest_stall_ms"] >= 0


def test_fleet_ops_reads_moves_gaps_and_double_holdings_from_the_events() -> None:
    """``fleet_ops.op_stats`` replays holdings in time order, whatever order the agents'
    lines arrived in."""
    a, b = frozenset({0, 1}), frozenset({2, 3})
    events = [
        (1.0, "m1", a),
        (1.0, "m2", b),
        # the operation, from t=10: m1 stops, m2 takes partition 1 at 10.5 and 0 at 11;
        # m3 joins and takes 2 while m2 still holds it (a double holding), m2 lets it go
        (11.0, "m2", frozenset({0, 1, 2, 3})),  # arrives out of order on purpose
        (10.0, "m1", frozenset()),
        (10.5, "m2", frozenset({1, 2, 3})),
        (12.0, "m3", frozenset({2})),
        (12.2, "m2", frozenset({0, 1, 3})),
        (30.0, "m1", a),  # after the operation: not counted
    ]
    stats = fleet_ops.op_stats(events, 10.0, 20.0, minimum=2)
    assert stats["moved"] == 3  # 1 and 0 to m2, 2 to m3
    assert stats["min_moved"] == 2
    assert stats["unavailable_partitions"] == 2
    assert stats["unavailable_max_s"] == 1.0  # partition 0: 10.0 to 11.0
    assert stats["unavailable_p50_s"] == 0.5  # partition 1: 10.0 to 10.5 (nearest rank)
    assert stats["read_twice"] == 1
    assert stats["settled_s"] == 10.0
    never = fleet_ops.op_stats([(1.0, "m1", a), (5.0, "m1", frozenset())], 5.0, 8.0, 0)
    assert (never["unavailable_max_s"], never["unavailable_partitions"]) == (3.0, 2)
