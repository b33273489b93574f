"""The member-count recommendation, driven with a mock clock and made-up polls: rates,
the busy rule, capacity, bounds, the scale-down delay, bounded state."""

from __future__ import annotations

import itertools
import math
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
    # 2 members are too few: up to the count with twice the headroom,
    # (400 * 1.4 + backlog / 60) / 100
    assert s.desired == -(-(560 + s.backlog / 60) // 100)
    assert re.match(r"input 40\d rec/s, 100 rec/s per member, backlog ", s.reason)
    assert s.reason.endswith(
        f"to drain in 1 min (8 to {s.desired} members keep 20 to 40 % spare) -> {s.desired}"
    )


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
    assert s.desired == -(-(1400 + s.backlog / 60) // 200)  # members of capacity 2


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


def _measured(rule: AutoscaleRule, partitions: int, rate: float) -> tuple[Recommender, Fleet]:
    """Two members of 100 rec/s, busy under ``rate``: the member rate is measured."""
    r = Recommender(rule)
    f = Fleet(partitions, {"a": 1, "b": 1}, 100)
    f.run(60, rate)
    for t in range(0, 35, 5):
        f.run(5, rate)
        _observe(r, f, float(t))
    return r, f


def _resize(f: Fleet, n: int) -> None:
    f.members = {f"m{i:02d}": 1 for i in range(n)}
    f.owners = {tp: sorted(f.members)[i % n] for i, tp in enumerate(f.tps)}


NO_BACKLOG = AutoscaleRule(1, 100, 0.2, 1e9, 30.0, 0.0)  # a backlog weighs nothing


def test_the_member_holding_the_most_partitions_keeps_the_headroom() -> None:
    """750 rec/s over 24 partitions, members of 100 rec/s: 9 members process it with 20 %
    to spare on average, but 6 of them hold 3 partitions (94 rec/s: 6 % spare) and drain
    a backlog at 6 rec/s. With 2 partitions each, 12."""
    r, f = _measured(NO_BACKLOG, 24, 750)
    f.run(5, 750)
    s = _observe(r, f, 35.0)
    assert s.input_rate == pytest.approx(750, rel=0.01)
    assert s.desired == 12
    assert "(12 members keep 20 to 40 % spare)" in s.reason


def test_the_backlog_counted_is_the_one_there_when_new_members_start() -> None:
    """While asked-for members start (``start_time``), the two there fall further behind
    at 400 - 200 rec/s; the backlog must still be gone ``drain_time`` from now."""
    started = AutoscaleRule(1, 100, 0.2, 60.0, 30.0, 120.0, start_time=20.0)
    at_once = AutoscaleRule(1, 100, 0.2, 60.0, 30.0, 120.0)
    (r, f), (q, g) = _measured(started, 24, 400), _measured(at_once, 24, 400)
    s, now = _observe(r, f, 35.0), _observe(q, g, 35.0)
    assert s.backlog == now.backlog
    assert s.input_rate is not None
    assert s.member_rate is not None
    behind = s.backlog + (s.input_rate - 2 * s.member_rate) * 20
    assert s.desired == math.ceil((s.input_rate * 1.4 + behind / 40) / s.member_rate)
    assert f"backlog {behind / 1000:.1f} k to drain in 1 min" in s.reason
    assert s.desired > now.desired
    with pytest.raises(ValueError, match="start_time 60 s is not below drain_time"):
        AutoscaleRule(1, 100, 0.2, 60.0, 30.0, 120.0, start_time=60.0)


def test_a_count_between_the_headroom_and_twice_it_is_kept() -> None:
    """The band: 400 rec/s at 100 a member keeps 20 % spare with 5 and 40 % with 6 (24
    partitions: 5 members hold 5 each, 6 hold 4). 5 or 6 members stay; 4 and 9 go to 6."""
    r, f = _measured(NO_BACKLOG, 24, 400)
    t = 35.0
    for n, want in ((5, 5), (6, 6), (4, 6), (9, 6)):
        _resize(f, n)
        f.run(60, 400)  # the backlog drains (or not: 4)
        f.done = dict(f.end)  # and is gone: the band alone
        t += 60
        s = _observe(r, f, t)
        assert (s.current, s.desired) == (n, want), s.reason
        assert "(5 to 6 members keep 20 to 40 % spare)" in s.reason


def test_the_count_steps_down_once_when_the_input_stops_falling() -> None:
    """The input falls from 1 000 to 200 rec/s over 200 s: each lower recommendation
    after the delay was a step down of its own (a stair behind the input, every step a
    rebalance: 24, 12, 8, 6, 5, 4, 3). It is now held until the recommendations of the
    delay agree, then one step to the bottom."""
    r, f = _measured(RULE, 24, 1000)
    _resize(f, 24)
    t, counts = 35.0, []
    for second in range(0, 900, 5):
        rate = 1000 - 800 * min(1.0, max(0.0, (second - 100) / 200))
        f.run(5, rate)
        t += 5
        counts.append(_observe(r, f, t).desired)
    steps = [b for a, b in itertools.pairwise(counts) if b < a]
    assert counts[0] == 24  # 1 000 rec/s: 24 members of 1 partition keep 40 % spare
    assert steps == [3]  # 200 rec/s with 40 % spare: 3 members


def test_recommendations_that_never_agree_hold_the_count_two_delays_at_most() -> None:
    """An input that swings between 700 and 100 rec/s keeps the recommendations of the
    delay apart (12 and 6): held as a fall, but not for ever: one step down two delays
    after the first lower one."""
    r, f = _measured(RULE, 24, 1000)
    _resize(f, 24)
    t, seen = 35.0, []
    for second in range(0, 800, 5):
        f.run(5, 1000 if second < 100 else (700 if second % 10 else 100))
        t += 5
        seen.append((second, _observe(r, f, t)))
    downs = [
        (at, b.desired) for (_, a), (at, b) in itertools.pairwise(seen) if b.desired < a.desired
    ]
    assert seen[0][1].desired == 24
    assert any("while the input falls" in s.reason for _, s in seen)
    assert len(downs) == 1
    at, to = downs[0]
    # lower for a delay from 100 s: held from 220 s, for two delays more
    assert 100 + 3 * RULE.scale_down_delay - 5 <= at <= 100 + 3 * RULE.scale_down_delay + 10
    assert to == 12
