"""Lag, rates and time lag of one partition from its recent offset samples.

Pure functions, no Spark: the streaming job keeps a bounded history of points per
partition in Spark state and calls these on every micro-batch. Time lag follows
kafka-lag-exporter: the log-end offsets over time form a lookup table, and the time at
which the log end was at the committed offset, interpolated between the neighbouring
points, is how far behind the group is.

A history is stored as four columns (``array``), not a list of points: the job loads and
saves every touched partition's history on every batch, and columns move as a few byte
strings, while the lookups below are binary searches. That keeps a sample's cost flat in
the history's length (docs/pipeline.md, "Throughput").
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

#: ``committed`` / ``log_start`` unknown, in the integer columns (offsets are never < 0).
_ABSENT = -1
#: Bytes per point in :meth:`History.to_bytes`: one double and three 64-bit integers.
POINT_BYTES = 32


class Point(NamedTuple):
    """One sample: event time (Unix seconds) and the offsets seen then."""

    t: float
    log_end: int
    committed: int | None
    log_start: int | None


def _known(value: int) -> int | None:
    return None if value == _ABSENT else value


@dataclass(frozen=True, slots=True, eq=True)
class History:
    """A partition's points, oldest first, one per event time, the log end never going
    backwards: only :func:`merge` builds one, so that always holds."""

    t: array[float]
    log_end: array[int]
    committed: array[int]
    log_start: array[int]

    @classmethod
    def of(cls, points: Iterable[Point]) -> History:
        h = cls(array("d"), array("q"), array("q"), array("q"))
        for p in points:
            h._append(p)
        return h

    def _append(self, p: Point) -> None:
        self.t.append(p.t)
        self.log_end.append(p.log_end)
        self.committed.append(_ABSENT if p.committed is None else p.committed)
        self.log_start.append(_ABSENT if p.log_start is None else p.log_start)

    def __len__(self) -> int:
        return len(self.t)

    def point(self, i: int) -> Point:
        return Point(
            self.t[i], self.log_end[i], _known(self.committed[i]), _known(self.log_start[i])
        )

    def points(self) -> list[Point]:
        return [self.point(i) for i in range(len(self))]

    def tail(self, start: int) -> History:
        """The points from index ``start`` on (a copy)."""
        return History(
            self.t[start:], self.log_end[start:], self.committed[start:], self.log_start[start:]
        )

    def to_bytes(self) -> bytes:
        return b"".join(c.tobytes() for c in (self.t, self.log_end, self.committed, self.log_start))

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> History:
        view = memoryview(data)
        n = len(view) // POINT_BYTES
        h = cls(array("d"), array("q"), array("q"), array("q"))
        columns: tuple[array[Any], ...] = (h.t, h.log_end, h.committed, h.log_start)
        for i, column in enumerate(columns):
            column.frombytes(view[i * 8 * n : (i + 1) * 8 * n])
        return h


@dataclass(frozen=True, slots=True)
class Estimate:
    lag: int
    time_lag: float | None
    produce_rate: float | None
    consume_rate: float | None
    observed_at: float


class Merged(NamedTuple):
    history: History
    #: New samples whose event time was already in the history (replays, duplicates).
    duplicates: int


def _appends(history: History, new: Sequence[Point]) -> bool:
    """Whether ``new`` only extends the history: strictly later, log end not falling
    (the common case, one fresh sample per partition per batch)."""
    t, end = (history.t[-1], history.log_end[-1]) if len(history) else (float("-inf"), -1)
    for p in new:
        if p.t <= t or p.log_end < end:
            return False
        t, end = p.t, p.log_end
    return True


def merge(
    history: History, new: Sequence[Point], *, keep_seconds: float, max_points: int
) -> Merged:
    """Add ``new`` to ``history``: one point per event time, the first seen wins, so a
    replayed or duplicated sample changes nothing. A log end that goes backwards (topic
    deleted and recreated) starts the history afresh. Points older than ``keep_seconds``
    before the newest are dropped, then the oldest beyond ``max_points``."""
    if new and _appends(history, new):
        kept = len(history) + len(new)
        start = max(bisect.bisect_left(history.t, new[-1].t - keep_seconds), kept - max_points)
        if start <= len(history) and new[0].t >= new[-1].t - keep_seconds:
            merged = history.tail(start)  # one copy of what stays, then the new points
            for p in new:
                merged._append(p)
            return Merged(merged, 0)
    duplicates = 0
    by_time = {p.t: p for p in history.points()}
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
    return Merged(History.of(points), duplicates)


def rate(history: History, field: Literal["log_end", "committed"], window: float) -> float | None:
    """Offsets per second over the newest ``window`` seconds; None without two points
    in it. Negative (a truncated or reset log) counts as 0."""
    return _rate(history, field, bisect.bisect_left(history.t, history.t[-1] - window))


def _rate(history: History, field: Literal["log_end", "committed"], first: int) -> float | None:
    """:func:`rate` over the points from index ``first`` on."""
    t = history.t
    values = history.log_end if field == "log_end" else history.committed
    last = len(t) - 1
    while first <= last and values[first] == _ABSENT:
        first += 1
    while last > first and values[last] == _ABSENT:
        last -= 1
    if last <= first or t[last] <= t[first]:
        return None
    return max(0.0, (values[last] - values[first]) / (t[last] - t[first]))


def time_lag(history: History, committed: int) -> float:
    """Seconds between the newest sample and the moment the log end stood at
    ``committed``. Before the oldest point it is extrapolated at the table's average
    produce rate; with no production in the table the oldest point is a lower bound."""
    t, ends = history.t, history.log_end
    if committed >= ends[-1]:
        return 0.0
    # the last point whose log end had not yet passed ``committed``
    i = bisect.bisect_right(ends, committed) - 1
    if i < 0:
        span = t[-1] - t[0]
        produced = ends[-1] - ends[0]
        if span <= 0 or produced <= 0:
            return t[-1] - t[0]
        at = t[0] - (ends[0] - committed) * span / produced
    else:
        at = t[i] + (committed - ends[i]) * (t[i + 1] - t[i]) / (ends[i + 1] - ends[i])
    return max(0.0, t[-1] - at)


def estimate(
    history: History, *, rate_window: float, reset: Literal["latest", "earliest"]
) -> Estimate:
    """The lag record for a partition's newest point. Without a commit, lag follows
    ``auto_offset_reset`` as the controller's poller does (latest: 0; earliest: all
    retained) and time lag is unknown."""
    t, committed = history.t[-1], history.committed[-1]
    if committed == _ABSENT:
        start = history.log_start[-1]
        lag = 0 if reset == "latest" else history.log_end[-1] - max(start, 0)
        behind = None
    else:
        lag = history.log_end[-1] - committed
        behind = time_lag(history, committed)
    window = bisect.bisect_left(history.t, t - rate_window)  # both rates: one search
    return Estimate(
        lag=lag,
        time_lag=behind,
        produce_rate=_rate(history, "log_end", window),
        consume_rate=_rate(history, "committed", window),
        observed_at=t,
    )
