"""The member-count recommendation, driven with a mock clock and made-up polls: rates,
the busy rule, capacity, bounds, the scale-down delay, bounded state."""

from __future__ import annotations

import re

import pytest

from assignors import TopicPartition
from controller.core.autoscale import (
    STARTING,
    AutoscaleRule,
    Recommender,
    Sizing,
    remove_first,
)
from controller.wire.offsets import PartitionOffsets

RULE = AutoscaleRule(
    min_members=1, max_members=100, headroom=0.2, drain_time=60.0, rate_window=30.0,
    scale_down_delay=120.0,
)  # fmt: skip


class Fleet:
    """Partitions ``p0..`` held round-robin by members; each member processes up to
    ``speed`` records/s per unit of capacity; ``rate`` records/s arrive evenly."""

    def __init__(self, partitions: int, members: dict[str, float], speed: float) -> None:
        self.tps = [TopicPartition("t", p) for p in range(partitions)]
        self.members = members
        self.owners = {tp: sorted(members)[i % len(members)] for i, tp in enumerate(self.tps)}
        self.speed = speed
        self.end = dict.fromkeys(self.tps, 0.0)
        self.done = dict.fromkeys(self.tps, 0.0)

    def run(self, seconds: float, rate: float) -> None:
        for tp in self.tps:
            self.end[tp] += rate * seconds / len(self.tps)
        for member, capacity in self.members.items():
            mine = [tp for tp in self.tps if self.owners[tp] == member]
            budget = self.speed * capacity * seconds
            for tp in mine:  # work through its partitions' backlog, evenly
                take = min(self.end[tp] - self.done[tp], budget / len(mine))
                self.done[tp] += take

    def offsets(self) -> dict[TopicPartition, PartitionOffsets]:
        return {
            tp: PartitionOffsets(round(self.done[tp]), round(self.end[tp]), 0) for tp in self.tps
        }


def _observe(r: Recommender, f: Fleet, now: float) -> Sizing:
    return r.observe(now, f.offsets(), f.owners, f.members, "earliest")


def test_the_first_poll_measures_nothing_yet() -> None:
    r = Recommender(RULE)
    f = Fleet(12, {"a": 1, "b": 1}, 100)
    s = _observe(r, f, 0.0)
    assert (s.desired, s.input_rate, s.member_rate) == (2, None, None)
    assert "measuring" in s.reason


def test_members_that_keep_up_say_their_capacity_is_not_measured() -> None:
    r = Recommender(RULE)
    f = Fleet(12, {"a": 1, "b": 1}, 100)
    for t in range(0, 30, 5):
        f.run(5, 60)  # 60/s arrive, 200/s could be processed
        s = _observe(r, f, float(t))
    assert s.desired == 2
    assert s.member_rate is None
    assert s.input_rate == 60
    assert "keep up or are starting" in s.reason


def test_busy_members_give_their_rate_and_the_count_that_keeps_up_and_drains() -> None:
    r = Recommender(RULE)
    f = Fleet(12, {"a": 1, "b": 1}, 100)
    f.run(60, 400)  # a backlog builds: 400/s in, 200/s out
    s = _observe(r, f, 0.0)
    for t in range(5, 35, 5):
        f.run(5, 400)
        s = _observe(r, f, float(t))
    assert s.member_rate == pytest.approx(100, rel=0.01)
    assert s.input_rate == pytest.approx(400, rel=0.01)
    # (400 * 1.2 + backlog / 60) / 100
    assert s.desired == -(-(480 + s.backlog / 60) // 100)
    assert re.match(r"input 40\d rec/s, 100 rec/s per member, backlog ", s.reason)
    assert s.reason.endswith(f"to drain in 1 min -> {s.desired}")


def test_a_member_starting_on_new_partitions_does_not_count_as_slow() -> None:
    """``c`` joins and is handed a third of the partitions, but spends the interval
    connecting (processes nothing while they wait): that is not what a member can do.
    Counted, it pulled the window's rate down to 89 and the recommendation up."""
    r = Recommender(RULE)
    f = Fleet(12, {"a": 1, "b": 1}, 100)
    f.run(60, 400)
    _observe(r, f, 0.0)
    for t in range(5, 20, 5):
        f.run(5, 400)
        _observe(r, f, float(t))
    f.members["c"] = 1
    f.owners = {tp: "abc"[i % 3] for i, tp in enumerate(f.tps)}
    starting = f.members.pop("c")
    f.run(5, 400)  # c holds its partitions but processes nothing yet
    f.members["c"] = starting
    s = _observe(r, f, 20.0)
    assert s.member_rate == pytest.approx(100, rel=0.01)


def test_a_rise_in_the_input_counts_at_once_a_fall_over_the_window() -> None:
    """The input triples: the next recommendation sizes for it, not for the window's mean
    (half old, half new: a backlog growing while the fleet catches up); it falls back:
    the window still remembers it (and the scale-down delay holds the count anyway)."""
    r = Recommender(RULE)
    f = Fleet(24, {"a": 1, "b": 1}, 100)
    f.run(60, 400)
    for t in range(0, 35, 5):
        f.run(5, 400)
        _observe(r, f, float(t))
    f.run(5, 1200)
    s = _observe(r, f, 35.0)
    assert s.input_rate == pytest.approx(1200, rel=0.01)
    f.run(5, 400)
    s = _observe(r, f, 40.0)
    assert s.input_rate is not None
    assert s.input_rate > 500  # the window's mean, with the rise in it


def test_capacity_weighs_the_rate_per_member() -> None:
    r = Recommender(RULE)
    f = Fleet(12, {"a": 2, "b": 2}, 100)  # each processes 200/s
    f.run(60, 1000)
    _observe(r, f, 0.0)
    for t in range(5, 35, 5):
        f.run(5, 1000)
        s = _observe(r, f, float(t))
    assert s.member_rate == pytest.approx(100, rel=0.01)  # per unit of capacity
    assert s.desired == -(-(1200 + s.backlog / 60) // 200)  # members of capacity 2


def test_bounds_are_max_members_and_the_partition_count() -> None:
    f = Fleet(6, {"a": 1, "b": 1}, 10)
    r = Recommender(RULE)
    f.run(60, 1000)
    _observe(r, f, 0.0)
    for t in (5.0, 10.0):  # the first 5 s on their partitions are not measured
        f.run(5, 1000)
        s = _observe(r, f, t)
    assert s.desired == 6
    assert "bounded to 6 by min 1, max 6" in s.reason
    capped = Recommender(AutoscaleRule(2, 4, 0.2, 60.0, 30.0, 120.0))
    g = Fleet(6, {"a": 1}, 10)
    g.run(60, 1000)
    for t in (0.0, 5.0):
        _observe(capped, g, t)
        g.run(5, 1000)
    assert _observe(capped, g, 10.0).desired == 4


def test_scale_down_waits_for_the_delay_and_scale_up_does_not() -> None:
    r = Recommender(RULE)
    f = Fleet(24, {"a": 1, "b": 1}, 100)
    f.run(60, 400)
    _observe(r, f, 0.0)
    t = 0.0
    for _ in range(6):
        t += 5
        f.run(5, 400)
        high = _observe(r, f, t)
    assert high.desired > 2
    f.members = {f"m{i}": 1 for i in range(high.desired)}
    f.owners = {tp: sorted(f.members)[i % high.desired] for i, tp in enumerate(f.tps)}
    lower = high
    while t < 100:  # the backlog drains, the input drops: lower counts, held by the delay
        t += 5
        f.run(5, 50)
        lower = _observe(r, f, t)
        assert lower.desired == high.desired
    assert "held at" in lower.reason
    while t < 300:
        t += 5
        f.run(5, 50)
        lower = _observe(r, f, t)
    assert lower.desired < high.desired
    f.run(60, 2000)  # a surge: up at once
    assert _observe(r, f, t + 60).desired > lower.desired


def test_state_stays_bounded_whatever_the_polls() -> None:
    r = Recommender(RULE)
    f = Fleet(12, {"a": 1, "b": 1}, 100)
    for t in range(2000):
        f.run(1, 300)
        if t % 7 == 0:  # members come and go: a new name each time
            f.members = {"a": 1, f"m{t}": 1}
            f.owners = {tp: sorted(f.members)[i % 2] for i, tp in enumerate(f.tps)}
        _observe(r, f, float(t))
    assert len(r._window) <= RULE.rate_window + 1
    assert len(r._changed_at) <= 2 * 2 * STARTING  # members changed in the last 5 s
    assert len(r._owners) == len(f.tps)
    assert len(r._raw) <= RULE.scale_down_delay + 1


def test_scale_in_stops_the_members_holding_the_least_lag_per_capacity() -> None:
    """Only a stopped member's partitions move: stopping those that hold the least lag
    moves the least backlog. Capacity weighs it (2 000 on capacity 4 is less per unit
    than 600 on 1); none when no fewer are wanted."""
    lag = {"a": 5_000, "b": 600, "c": 2_000, "d": 0, "e": 600}
    caps = {"c": 4.0}
    assert remove_first(3, lag, caps) == ["d", "c"]
    assert remove_first(2, lag, caps) == ["d", "c", "b"]  # b and e tie: by name
    assert remove_first(5, lag, caps) == []
    assert remove_first(9, lag, caps) == []
