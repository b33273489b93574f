"""Member capacity: balance in proportion to declared weights (Sainte-Laguë), with
KIP-54's stickiness and minimum movement, through ``assign`` and the engine."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Mapping
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors import (
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    SubscriptionChanged,
    TopicPartition,
    assign,
)
from assignors.capacity import deal_by_capacity, give, quotas, take
from assignors.quality import evaluate, imbalances, movement, problems

from .strategies_hyp import MEMBERS, TOPICS, groups, lags, messy_current

TP = TopicPartition
WEIGHTS = [None, 0.5, 1, 1.5, 2, 3, 8]


def _weights(caps: Mapping[str, float | None], members: Iterable[str]) -> dict[str, float]:
    return {m: caps.get(m) or 1.0 for m in members}


# ---------------------------------------------------------------- the apportionment rule


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        # Sainte-Laguë's textbook cases (votes as weights, seats as partitions).
        (7, [53_000, 24_000, 23_000], [3, 2, 2]),
        (8, [100_000, 80_000, 30_000, 20_000], [3, 3, 1, 1]),
        # Equal weights: KIP-54's counts, the larger ones first.
        (10, [1, 1, 1], [4, 3, 3]),
        (10, [2, 2, 2], [4, 3, 3]),
        (17, [2, 1, 1], [9, 4, 4]),
        (0, [1, 2], [0, 0]),
        (3, [1, 1000], [0, 3]),
    ],
)
def test_quotas_are_sainte_lague(total: int, weights: list[float], expected: list[int]) -> None:
    assert quotas(total, weights) == expected


@settings(max_examples=200, deadline=None)
@given(
    total=st.integers(0, 500),
    weights=st.lists(
        st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0]), min_size=1, max_size=12
    ),
)
def test_quotas_satisfy_the_rule(total: int, weights: list[float]) -> None:
    out = quotas(total, weights)
    assert sum(out) == total
    assert max(map(give, out, weights)) <= min(map(take, out, weights))


def test_the_rule_is_kip54_without_capacities() -> None:
    for a, b in itertools.product(range(6), repeat=2):
        assert (give(a, 1) > take(b, 1)) == (a >= b + 2)
        # The same for any equal capacities.
        assert (give(a, 2.5) > take(b, 2.5)) == (a >= b + 2)


def test_deal_by_capacity_gives_each_its_count_and_evens_lag_per_capacity() -> None:
    rng = random.Random(7)
    members = ["a", "b", "c"]
    caps = {"a": 1.0, "b": 2.0, "c": 3.0}
    parts = list(range(600))
    lag = {p: rng.randint(100, 200) for p in parts}
    out = deal_by_capacity(members, caps, parts, lag)
    assert [len(out[m]) for m in members] == [100, 200, 300]
    assert sorted(itertools.chain.from_iterable(out.values())) == parts
    per_unit = [sum(lag[p] for p in out[m]) / caps[m] for m in members]
    assert max(per_unit) / min(per_unit) < 1.02
    plain = deal_by_capacity(members, caps, parts)
    assert plain == {"a": parts[:100], "b": parts[100:300], "c": parts[300:]}


# ---------------------------------------------------------------- the stateless API


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_assign_is_valid_and_balanced_by_capacity(data: st.DataObject) -> None:
    ppt, subs = data.draw(groups())
    caps = {m: data.draw(st.sampled_from(WEIGHTS)) for m in subs}
    strategy = data.draw(st.sampled_from(["sticky", "lagsticky"]))
    current = data.draw(st.one_of(st.none(), messy_current(ppt, list(subs))))
    lag = data.draw(lags(ppt)) if strategy == "lagsticky" else None
    out = assign(strategy, ppt, subs, current=current, lag=lag, member_capacities=caps)
    assert problems(out, ppt, subs) == []
    assert imbalances(out, subs, _weights(caps, subs)) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_equal_capacities_change_nothing(data: st.DataObject) -> None:
    ppt, subs = data.draw(groups())
    strategy = data.draw(st.sampled_from(["sticky", "lagsticky"]))
    current = data.draw(st.one_of(st.none(), messy_current(ppt, list(subs))))
    lag = data.draw(lags(ppt)) if strategy == "lagsticky" else None
    same = data.draw(st.sampled_from([None, 1, 2.5]))
    plain = assign(strategy, ppt, subs, current=current, lag=lag)
    weighted = assign(
        strategy, ppt, subs, current=current, lag=lag, member_capacities=dict.fromkeys(subs, same)
    )
    assert weighted == plain


def _least_movement(current: dict[str, list[TP]], weights: dict[str, float], total: int) -> int:
    """Brute force over every count vector the rule calls balanced (identical
    subscriptions): the fewest partitions any of them takes from a member."""
    members = sorted(weights)
    w = [weights[m] for m in members]
    best = math.inf
    for counts in itertools.product(range(total + 1), repeat=len(members)):
        if sum(counts) != total or max(map(give, counts, w)) > min(map(take, counts, w)):
            continue
        cost = sum(
            max(0, len(current.get(m, ())) - c) for m, c in zip(members, counts, strict=True)
        )
        best = min(best, cost)
    return int(best)


def _least_movement_by_divisors(held: dict[str, int], weights: dict[str, float], total: int) -> int:
    """The same minimum for groups too large to enumerate: a balanced vector is
    ``round(lambda * capacity)`` for one lambda, so only lambdas where some member's
    rounding flips (exact fractions) need trying; there, each tied member may take
    either count, and the fullest tied members keep the larger."""
    members = sorted(weights)
    w = {m: Fraction(weights[m]) for m in members}
    flips = sorted({(k + Fraction(1, 2)) / w[m] for m in members for k in range(total + 1)})
    best = math.inf
    for lam in flips:
        lower = {m: math.ceil(lam * w[m] - Fraction(1, 2)) for m in members}
        tied = [m for m in members if lam * w[m] - Fraction(1, 2) == lower[m]]
        extra = total - sum(lower.values())
        if not 0 <= extra <= len(tied):
            continue
        tied.sort(key=lambda m: held.get(m, 0) - lower[m], reverse=True)
        counts = lower | {m: lower[m] + 1 for m in tied[:extra]}
        best = min(best, sum(max(0, held.get(m, 0) - counts[m]) for m in members))
    return int(best)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sticky_moves_the_least_any_balanced_assignment_needs(data: st.DataObject) -> None:
    total = data.draw(st.integers(1, 12))
    members = data.draw(st.lists(st.sampled_from(MEMBERS[:5]), min_size=1, max_size=4, unique=True))
    ppt = {"t": total}
    subs = {m: ["t"] for m in members}
    caps = {m: data.draw(st.sampled_from(WEIGHTS)) for m in members}
    # A current assignment without double claims, possibly leaving partitions unowned.
    current: dict[str, list[TP]] = {}
    for p in range(total):
        holder = data.draw(st.sampled_from([*members, None]))
        if holder is not None:
            current.setdefault(holder, []).append(TP("t", p))
    out = assign("sticky", ppt, subs, current=current, member_capacities=caps)
    weights = _weights(caps, members)
    assert imbalances(out, subs, weights) == []
    least = _least_movement(current, weights, total)
    assert movement(current, out, subs) == least
    held = {m: len(v) for m, v in current.items()}
    assert _least_movement_by_divisors(held, weights, total) == least


# ---------------------------------------------------------------- the engine, event by event


@st.composite
def weighted_runs(draw: st.DrawFn) -> list[object]:
    topics = TOPICS[:3]
    events: list[object] = []
    for _ in range(draw(st.integers(5, 30))):
        kind = draw(st.sampled_from(["join", "join", "leave", "resubscribe", "lag"]))
        member = draw(st.sampled_from(MEMBERS[:8]))
        if kind == "join":
            mine = frozenset(draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)))
            events.append(MemberJoined(member, mine, capacity=draw(st.sampled_from(WEIGHTS))))
        elif kind == "leave":
            events.append(MemberLeft(member))
        elif kind == "resubscribe":
            mine = frozenset(draw(st.lists(st.sampled_from(topics), unique=True)))
            events.append(SubscriptionChanged(member, mine))
        else:
            reading = {
                TP(t, p): draw(st.integers(0, 20_000))
                for t in topics
                for p in draw(st.lists(st.integers(0, 11), max_size=5, unique=True))
            }
            events.append(LagUpdated(reading))
    return events


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=weighted_runs(), lag_aware=st.booleans(), batch=st.integers(1, 4))
def test_every_step_of_the_engine_is_balanced_by_capacity(
    events: list[object], lag_aware: bool, batch: int
) -> None:
    ppt = {"t0": 12, "t1": 5, "t2": 9}
    eng = IncrementalAssignor(ppt, lag_aware=lag_aware)
    for i in range(0, len(events), batch):
        before = eng.assignment()
        change = eng.apply(events[i : i + batch])  # type: ignore[arg-type]
        out = eng.assignment()
        subs = {m: sorted(t) for m, t in eng.members.items()}
        weights = {m: eng.capacity_of(m) or 1.0 for m in subs}
        assert problems(out, ppt, subs) == []
        assert imbalances(out, subs, weights) == []
        # The change record is exact: the members it names, and only those, changed.
        for m in out:
            if m in change.assignments:
                assert change.assignments[m] == out[m]
            elif m in before:
                assert out[m] == before[m]
        assert change.moved == movement(before, out, subs)


def test_a_join_takes_exactly_its_share_and_nothing_else_moves() -> None:
    ppt = {"t": 120}
    eng, _ = IncrementalAssignor.from_snapshot(
        ppt, {m: ["t"] for m in "abc"}, member_capacities={"a": 1, "b": 1, "c": 2}
    )
    assert {m: len(v) for m, v in eng.assignment().items()} == {"a": 30, "b": 30, "c": 60}
    change = eng.apply([MemberJoined("d", frozenset({"t"}), capacity=4)])
    assert {m: len(v) for m, v in eng.assignment().items()} == {"a": 15, "b": 15, "c": 30, "d": 60}
    assert change.moved == 60  # d's share, each taken from a member over its new share
    # Re-weighing a member moves only what its new share asks for.
    change = eng.apply([MemberJoined("d", frozenset({"t"}), capacity=1)])
    assert {m: len(v) for m, v in eng.assignment().items()} == {"a": 24, "b": 24, "c": 48, "d": 24}
    assert change.moved == 36


@pytest.mark.parametrize(("total", "x_capacity"), [(40, 3), (47, 1), (47, 3), (1000, 2)])
def test_many_joins_at_once_are_settled_in_bulk_with_the_least_movement(
    total: int, x_capacity: int
) -> None:
    """A wave of joiners (the bulk path) moves exactly what the shares ask for; at a tie,
    the members already holding more keep the larger count."""
    ppt = {"t": total}
    eng, _ = IncrementalAssignor.from_snapshot(
        ppt, {"x": ["t"], "y": ["t"]}, member_capacities={"x": x_capacity}
    )
    held = {m: len(v) for m, v in eng.assignment().items()}
    joiners = [MemberJoined(f"a{i}", frozenset({"t"}), capacity=1 + i % 3) for i in range(6)]
    change = eng.apply(joiners)
    counts = {m: len(v) for m, v in eng.assignment().items()}
    weights = {m: eng.capacity_of(m) or 1.0 for m in counts}
    assert imbalances(eng.assignment(), {m: ["t"] for m in counts}, weights) == []
    assert change.moved == _least_movement_by_divisors(held, weights, total)


def test_lag_is_evened_per_unit_of_capacity() -> None:
    rng = random.Random(3)
    ppt = {"t": 300}
    subs = {m: ["t"] for m in "abc"}
    caps = {"a": 1.0, "b": 2.0, "c": 3.0}
    lag = {TP("t", p): rng.randint(1_000, 5_000) for p in range(300)}
    out = assign("lagsticky", ppt, subs, lag=lag, member_capacities=caps)
    q = evaluate(out, ppt, subs, lag=lag, member_capacities=caps)
    assert q.balanced
    assert q.share_error <= 0.5
    assert q.lag_skew < 1.05
    # Blind to capacity, the strongest member would carry a third of the lag, not half.
    blind = evaluate(
        assign("lagsticky", ppt, subs, lag=lag), ppt, subs, lag=lag, member_capacities=caps
    )
    assert blind.lag_skew > 1.4


def test_the_engine_lag_policy_moves_toward_capacity_shares() -> None:
    ppt = {"t": 60}
    eng, _ = IncrementalAssignor.from_snapshot(
        ppt, {m: ["t"] for m in "ab"}, member_capacities={"a": 1, "b": 2}
    )
    # All lag on a's partitions: the policy swaps until lag per capacity is even-ish.
    heavy = {tp: 10_000 for tp in eng.partitions_of("a")}
    change = eng.apply([LagUpdated(heavy)])
    assert change.moved_for_lag == eng.policy.max_moves  # the budget caps one step
    for _ in range(5):
        eng.apply([LagUpdated({})])
    lag = eng.member_lag()
    # 200 000 of lag over capacities 1 and 2: a third and two thirds, in whole partitions.
    assert lag == {"a": 70_000, "b": 130_000}
    assert eng.lag_skew() == pytest.approx(1.05)
    assert {m: len(v) for m, v in eng.assignment().items()} == {"a": 20, "b": 40}


def test_a_snapshot_with_the_same_capacities_moves_nothing() -> None:
    """A successor controller rebuilds from what was granted: given the capacities its
    predecessor balanced with, it moves nothing; blind to them, it would move 15."""
    ppt = {"t": 90}
    caps = {"a": 1.0, "b": 2.0, "c": 3.0}
    subs = {m: ["t"] for m in caps}
    live, _ = IncrementalAssignor.from_snapshot(ppt, subs, member_capacities=caps)
    granted = live.assignment()
    recovered, change = IncrementalAssignor.from_snapshot(
        ppt, subs, current=granted, member_capacities=caps
    )
    assert change.moved == 0
    assert recovered.assignment() == granted
    _, blind = IncrementalAssignor.from_snapshot(ppt, subs, current=granted)
    assert blind.moved == 15


# ---------------------------------------------------------------- bad declarations


@pytest.mark.parametrize(
    ("capacity", "error", "message"),
    [
        (0, ValueError, "capacity must be > 0"),
        (-1.5, ValueError, "capacity must be > 0"),
        (float("nan"), ValueError, "capacity must be > 0"),
        (float("inf"), ValueError, "capacity must be > 0"),
        (2_000_000, ValueError, "capacity must be > 0 and <= 1e\\+06, got 2000000"),
        ("2", TypeError, "capacity must be a number"),
        (True, TypeError, "capacity must be a number"),
    ],
)
def test_bad_capacities_are_named_at_the_edge(
    capacity: object, error: type[Exception], message: str
) -> None:
    ppt, subs = {"t": 4}, {"a": ["t"], "b": ["t"]}
    with pytest.raises(error, match=rf"member_capacities\['a'\]: {message}"):
        assign("sticky", ppt, subs, member_capacities={"a": capacity})  # type: ignore[dict-item]
    eng, _ = IncrementalAssignor.from_snapshot(ppt, subs)
    before = eng.assignment()
    with pytest.raises(error, match=rf"MemberJoined\('c'\): {message}"):
        eng.apply([MemberJoined("c", frozenset({"t"}), capacity=capacity)])  # type: ignore[arg-type]
    assert eng.assignment() == before
    assert eng.capacity_of("c") is None


def test_a_capacity_for_a_stranger_is_named() -> None:
    with pytest.raises(ValueError, match="member_capacities: 'z' is not a member"):
        assign("sticky", {"t": 4}, {"a": ["t"]}, member_capacities={"z": 2})


def test_count_only_strategies_validate_and_ignore_capacities() -> None:
    ppt, subs = {"t": 6}, {"a": ["t"], "b": ["t"]}
    for strategy in ("range", "roundrobin", "fair", "lag"):
        assert assign(strategy, ppt, subs, member_capacities={"a": 3}) == assign(
            strategy, ppt, subs
        )
        with pytest.raises(ValueError, match="capacity must be > 0"):
            assign(strategy, ppt, subs, member_capacities={"a": 0})
