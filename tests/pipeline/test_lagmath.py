"""Exact expectations for the per-partition lag math (no Spark)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.lagmath import History, Point, estimate, merge, rate, time_lag


def pts(*rows: tuple[float, int, int | None]) -> list[Point]:
    return [Point(t, end, committed, None) for t, end, committed in rows]


def table(*rows: tuple[float, int, int | None]) -> History:
    return History.of(pts(*rows))


# log end grows 100 offsets per 10 s; the consumer falls behind
ROWS = ((0, 1000, 1000), (10, 1100, 1050), (20, 1200, 1080), (30, 1300, 1100))
TABLE = table(*ROWS)


def test_time_lag_interpolates_between_the_neighbouring_points() -> None:
    # offset 1100 was the log end at t=10, newest sample at t=30 -> 20 s behind
    assert time_lag(TABLE, 1100) == 20.0
    # offset 1150 lies halfway between t=10 (1100) and t=20 (1200) -> produced at 15
    assert time_lag(TABLE, 1150) == 15.0
    assert time_lag(TABLE, 1300) == 0.0
    assert time_lag(TABLE, 1400) == 0.0


def test_time_lag_extrapolates_before_the_table_at_its_rate() -> None:
    # 10 offsets/s over the table; 900 is 100 before t=0 -> t=-10 -> 40 s behind
    assert time_lag(TABLE, 900) == 40.0


def test_time_lag_without_production_is_the_table_span() -> None:
    flat = table((0, 500, 100), (10, 500, 100), (25, 500, 100))
    assert time_lag(flat, 100) == 25.0


def test_rates_use_only_the_window() -> None:
    assert rate(TABLE, "log_end", 60) == 10.0
    assert rate(TABLE, "committed", 60) == pytest.approx(100 / 30)
    # window of 10 s keeps t=20 and t=30
    assert rate(TABLE, "committed", 10) == 2.0
    assert rate(table(*ROWS[:1]), "log_end", 60) is None
    # first to last point of the window; a commit that went backwards reads as 0
    assert rate(table((0, 100, 0), (5, 100, 50), (10, 100, 20)), "committed", 60) == 2.0
    assert rate(table((0, 100, 50), (10, 100, 20)), "committed", 60) == 0.0


def test_estimate_of_the_newest_point() -> None:
    e = estimate(TABLE, rate_window=60, reset="latest")
    assert (e.lag, e.time_lag, e.produce_rate, e.observed_at) == (200, 20.0, 10.0, 30)
    assert e.consume_rate == pytest.approx(100 / 30)


def test_uncommitted_partition_follows_auto_offset_reset() -> None:
    uncommitted = History.of([Point(0, 500, None, 200), Point(10, 600, None, 200)])
    latest = estimate(uncommitted, rate_window=60, reset="latest")
    earliest = estimate(uncommitted, rate_window=60, reset="earliest")
    assert (latest.lag, latest.time_lag, latest.consume_rate) == (0, None, None)
    assert (earliest.lag, earliest.produce_rate) == (400, 10.0)


def test_merge_dedupes_orders_and_bounds() -> None:
    history = table((10, 1100, 1050), (20, 1200, 1080))
    late_and_dupe = pts((0, 1000, 1000), (20, 9999, 9999), (30, 1300, 1100))
    merged = merge(history, late_and_dupe, keep_seconds=900, max_points=10)
    assert merged.history == TABLE  # first seen wins at t=20; the late t=0 is placed first
    assert merged.duplicates == 1
    assert merge(TABLE, [], keep_seconds=15, max_points=10).history == table(*ROWS[2:])
    assert merge(TABLE, [], keep_seconds=900, max_points=3).history == table(*ROWS[1:])


def test_merge_restarts_history_when_the_log_end_goes_backwards() -> None:
    recreated = pts((40, 5, 0), (50, 15, 5))
    assert merge(TABLE, recreated, keep_seconds=900, max_points=10).history == History.of(recreated)
    assert time_lag(History.of(recreated), 5) == 10.0


def reference_merge(
    history: list[Point], new: list[Point], keep_seconds: float, max_points: int
) -> list[Point]:
    """The rule of ``merge`` written out over plain lists, without its append fast path."""
    by_time = {p.t: p for p in history}
    for p in new:
        by_time.setdefault(p.t, p)
    points = sorted(by_time.values())
    for i in range(len(points) - 1, 0, -1):
        if points[i].log_end < points[i - 1].log_end:
            points = points[i:]
            break
    if not points:
        return []
    kept = [p for p in points if p.t >= points[-1].t - keep_seconds]
    return kept[-max_points:]


samples = st.lists(
    st.builds(
        Point,
        st.integers(0, 40).map(float),
        st.integers(0, 50),
        st.none() | st.integers(0, 50),
        st.none() | st.integers(0, 5),
    ),
    max_size=8,
)


@settings(max_examples=400, deadline=None)
@given(batches=st.lists(samples, min_size=1, max_size=5), keep=st.integers(0, 30))
def test_merge_matches_its_rule_batch_after_batch(batches: list[list[Point]], keep: int) -> None:
    history, expected = History.of([]), list[Point]()
    for batch in batches:
        merged = merge(history, batch, keep_seconds=keep, max_points=4)
        expected = reference_merge(expected, batch, keep, 4)
        assert merged.history.points() == expected
        history = merged.history
    assert History.from_bytes(history.to_bytes()) == history


def test_a_history_round_trips_through_bytes_with_unknown_offsets() -> None:
    h = History.of([Point(1.5, 10, None, 3), Point(2.25, 12, 11, None)])
    assert History.from_bytes(h.to_bytes()).points() == h.points()
    assert len(h.to_bytes()) == 2 * 32
