"""Lag, rates and time lag of one partition from its recent offset samples.

Pure functions, no Spark: the streaming job keeps a bounded list of points per partition
in Spark state and calls these on every micro-batch. Time lag follows kafka-lag-exporter:
the log-end offsets over time form a lookup table, and the time at which the log end was
at the committed offset, interpolated between the neighbouring points, is how far behind
the group is.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple


class Point(NamedTuple):
    """One sample: event time (Unix seconds) and the offsets seen then."""

    t: float
    log_end: int
    committed: int | None
    log_start: int | None


@dataclass(frozen=True, slots=True)
class Estimate:
    lag: int
    time_lag: float | None
    produce_rate: float | None
    consume_rate: float | None
    observed_at: float


class Merged(NamedTuple):
    points: list[Point]
    #: New samples whose event time was already in the history (replays, duplicates).
    duplicates: int


def merge(
    history: list[Point], new: Iterable[Point], *, keep_seconds: float, max_points: int
) -> Merged:
    """Add ``new`` to ``history`` (sorted by time): one point per event time, the first
    seen wins, so a replayed or duplicated sample changes nothing. A log end that goes
    backwards (topic deleted and recreated) starts the history afresh. Points older than
    ``keep_seconds`` before the newest are dropped, then the oldest beyond ``max_points``."""
    by_time = {p.t: p for p in history}
    duplicates = 0
    for p in new:
        if p.t in by_time:
            duplicates += 1
        else:
            by_time[p.t] = p
    points = sorted(by_time.values())
    for i in range(len(points) - 1, 0, -1):
        if points[i].log_end < points[i - 1].log_end:
            points = points[i:]
            break
    if points:
        horizon = points[-1].t - keep_seconds
        start = bisect.bisect_left(points, horizon, key=lambda p: p.t)
        points = points[max(start, len(points) - max_points) :]
    return Merged(points, duplicates)


def rate(
    points: list[Point], field: Literal["log_end", "committed"], window: float
) -> float | None:
    """Offsets per second over the newest ``window`` seconds; None without two points
    in it. Negative (a truncated or reset log) counts as 0."""
    newest = points[-1].t
    inside = [p for p in points if p.t >= newest - window and getattr(p, field) is not None]
    if len(inside) < 2 or inside[-1].t <= inside[0].t:
        return None
    first: int = getattr(inside[0], field)
    last: int = getattr(inside[-1], field)
    return max(0.0, (last - first) / (inside[-1].t - inside[0].t))


def time_lag(points: list[Point], committed: int) -> float:
    """Seconds between the newest sample and the moment the log end stood at
    ``committed``. Before the oldest point it is extrapolated at the table's average
    produce rate; with no production in the table the oldest point is a lower bound."""
    newest = points[-1]
    if committed >= newest.log_end:
        return 0.0
    ends = [p.log_end for p in points]
    # the last point whose log end had not yet passed ``committed``
    i = bisect.bisect_right(ends, committed) - 1
    if i < 0:
        first = points[0]
        span = newest.t - first.t
        produced = newest.log_end - first.log_end
        if span <= 0 or produced <= 0:
            return newest.t - first.t
        at = first.t - (first.log_end - committed) * span / produced
    else:
        lo, hi = points[i], points[i + 1]
        at = lo.t + (committed - lo.log_end) * (hi.t - lo.t) / (hi.log_end - lo.log_end)
    return max(0.0, newest.t - at)


def estimate(
    points: list[Point], *, rate_window: float, reset: Literal["latest", "earliest"]
) -> Estimate:
    """The lag record for a partition's newest point. Without a commit, lag follows
    ``auto_offset_reset`` as the controller's poller does (latest: 0; earliest: all
    retained) and time lag is unknown."""
    newest = points[-1]
    if newest.committed is None:
        lag = 0 if reset == "latest" else newest.log_end - (newest.log_start or 0)
        behind = None
    else:
        lag = newest.log_end - newest.committed
        behind = time_lag(points, newest.committed)
    return Estimate(
        lag=lag,
        time_lag=behind,
        produce_rate=rate(points, "log_end", rate_window),
        consume_rate=rate(points, "committed", rate_window),
        observed_at=newest.t,
    )
