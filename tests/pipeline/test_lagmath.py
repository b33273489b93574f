"""Exact expectations for the per-partition lag math (no Spark)."""

from __future__ import annotations

import pytest

from pipeline.lagmath import Point, estimate, merge, rate, time_lag


def pts(*rows: tuple[float, int, int | None]) -> list[Point]:
    return [Point(t, end, committed, None) for t, end, committed in rows]


# log end grows 100 offsets per 10 s; the consumer falls behind
TABLE = pts((0, 1000, 1000), (10, 1100, 1050), (20, 1200, 1080), (30, 1300, 1100))


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
    flat = pts((0, 500, 100), (10, 500, 100), (25, 500, 100))
    assert time_lag(flat, 100) == 25.0


def test_rates_use_only_the_window() -> None:
    assert rate(TABLE, "log_end", 60) == 10.0
    assert rate(TABLE, "committed", 60) == pytest.approx(100 / 30)
    # window of 10 s keeps t=20 and t=30
    assert rate(TABLE, "committed", 10) == 2.0
    assert rate(TABLE[:1], "log_end", 60) is None
    # first to last point of the window; a commit that went backwards reads as 0
    assert rate(pts((0, 100, 0), (5, 100, 50), (10, 100, 20)), "committed", 60) == 2.0
    assert rate(pts((0, 100, 50), (10, 100, 20)), "committed", 60) == 0.0


def test_estimate_of_the_newest_point() -> None:
    e = estimate(TABLE, rate_window=60, reset="latest")
    assert (e.lag, e.time_lag, e.produce_rate, e.observed_at) == (200, 20.0, 10.0, 30)
    assert e.consume_rate == pytest.approx(100 / 30)


def test_uncommitted_partition_follows_auto_offset_reset() -> None:
    table = [Point(0, 500, None, 200), Point(10, 600, None, 200)]
    latest = estimate(table, rate_window=60, reset="latest")
    earliest = estimate(table, rate_window=60, reset="earliest")
    assert (latest.lag, latest.time_lag, latest.consume_rate) == (0, None, None)
    assert (earliest.lag, earliest.produce_rate) == (400, 10.0)


def test_merge_dedupes_orders_and_bounds() -> None:
    history = pts((10, 1100, 1050), (20, 1200, 1080))
    late_and_dupe = pts((0, 1000, 1000), (20, 9999, 9999), (30, 1300, 1100))
    merged = merge(history, late_and_dupe, keep_seconds=900, max_points=10)
    assert merged.points == TABLE  # first seen wins at t=20; the late t=0 is placed first
    assert merged.duplicates == 1
    assert merge(TABLE, [], keep_seconds=15, max_points=10).points == TABLE[2:]
    assert merge(TABLE, [], keep_seconds=900, max_points=3).points == TABLE[1:]


def test_merge_restarts_history_when_the_log_end_goes_backwards() -> None:
    recreated = pts((40, 5, 0), (50, 15, 5))
    assert merge(TABLE, recreated, keep_seconds=900, max_points=10).points == recreated
    assert time_lag(recreated, 5) == 10.0
