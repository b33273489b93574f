"""Operator constraints: pins and caps are hard, everything else stays balanced and sticky,
through ``assign`` and the engine event by event."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors import (
    ConstraintsChanged,
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionsChanged,
    SubscriptionChanged,
    TopicPartition,
    UnassignedPartitionsWarning,
    assign,
)
from assignors.capacity import give, take
from assignors.constraints import Constraints, check_constraints, violations
from assignors.quality import evaluate, movement

from .strategies_hyp import MEMBERS, TOPICS
from .test_engine import event_runs, holders_agree

TP = TopicPartition
Held = Mapping[str, list[TP]]


def owners(held: Held) -> dict[TP, str]:
    out: dict[TP, str] = {}
    for m, parts in held.items():
        for tp in parts:
            assert tp not in out, f"{tp} held twice"
            out[tp] = m
    return out


def check(
    held: Held,
    ppt: Mapping[str, int],
    topics_of: Mapping[str, frozenset[str]],
    constraints: Constraints,
    capacities: Mapping[str, float] | None = None,
) -> None:
    """Every invariant of a constrained group, from the assignment alone:

    - valid: each partition once, only to a subscriber;
    - the constraints hold (``violations`` is empty);
    - a partition is left unassigned only when every subscriber is at its cap;
    - balanced around the constraints: no member could give a partition it may give
      (not pinned) to a subscriber with room where the move would lower the imbalance
      (Sainte-Laguë's rule, KIP-54's without capacities).
    """
    w = capacities or {}
    owner = owners(held)
    counts = {m: len(held.get(m, [])) for m in topics_of}
    for tp, m in owner.items():
        assert tp.topic in topics_of[m], (tp, m)
        assert tp.partition < ppt[tp.topic], (tp, m)
    assert violations(owner.get, counts.__getitem__, ppt, topics_of, constraints) == []
    caps = constraints.caps

    def room(m: str) -> bool:
        return m not in caps or counts[m] < caps[m]

    for t, n in ppt.items():
        subs = [m for m in topics_of if t in topics_of[m]]
        for p in range(n):
            if subs and TP(t, p) not in owner:
                assert not any(map(room, subs)), f"{t}:{p} unassigned beside room in {subs}"
    live_pins = {tp for tp, m in constraints.pins.items() if tp.topic in topics_of.get(m, ())}
    for a, parts in held.items():
        movable = {tp.topic for tp in parts if tp not in live_pins}
        g = give(counts[a], w.get(a, 1.0))
        for b in topics_of:
            if b != a and room(b) and movable & topics_of[b]:
                assert g <= take(counts[b], w.get(b, 1.0)), f"{a} ({counts[a]}) -> {b}"


# ---------------------------------------------------------------- assign


def test_pins_and_a_cap_through_assign() -> None:
    ppt = {"t": 12}
    subs = {m: ["t"] for m in "abcd"}
    pins = {TP("t", 0): "d", TP("t", 1): "d"}
    out = assign("sticky", ppt, subs, pins=pins, max_partitions={"a": 1})
    assert {TP("t", 0), TP("t", 1)} <= set(out["d"])
    assert len(out["a"]) == 1
    assert sorted(map(len, out.values())) == [1, 3, 4, 4]
    check(out, ppt, {m: frozenset(t) for m, t in subs.items()}, check_constraints(pins, {"a": 1}))


def test_caps_below_the_partitions_leave_the_rest_unassigned() -> None:
    ppt = {"t": 10}
    subs = {"a": ["t"], "b": ["t"]}
    with pytest.warns(UnassignedPartitionsWarning, match="5 partitions left unassigned"):
        out = assign("lagsticky", ppt, subs, max_partitions={"a": 2, "b": 3})
    assert sorted(map(len, out.values())) == [2, 3]
    q = evaluate(out, ppt, subs, max_partitions={"a": 2, "b": 3})
    assert (q.violations, q.unassigned) == (0, 5)
    assert not q.valid  # five partitions have subscribers and no owner


def test_a_pin_to_a_full_member_is_kept_and_the_member_gives_back_one() -> None:
    ppt = {"t": 12}
    subs = {m: ["t"] for m in "abc"}
    current = assign("sticky", ppt, subs)
    target = next(tp for tp in current["b"])
    out = assign("sticky", ppt, subs, current=current, pins={target: "a"})
    assert target in out["a"]
    assert sorted(map(len, out.values())) == [4, 4, 4]
    assert movement(current, out, subs) == 2  # the pin, and one back to balance


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "fair", "lag"])
def test_fixed_rule_strategies_refuse_constraints(strategy: str) -> None:
    with pytest.raises(ValueError, match=f"strategy '{strategy}' cannot honour pins"):
        assign(strategy, {"t": 2}, {"a": ["t"]}, pins={TP("t", 0): "a"})
    with pytest.raises(ValueError, match="cannot honour"):
        assign(strategy, {"t": 2}, {"a": ["t"]}, max_partitions={"a": 1})
    assert assign(strategy, {"t": 2}, {"a": ["t"]}, pins={}, max_partitions={})


@pytest.mark.parametrize(
    ("pins", "caps", "error", "message"),
    [
        ({("t", 0): "z"}, {}, ValueError, r"pins\[t:0\]: 'z' is not a member of subscriptions"),
        ({("u", 0): "a"}, {}, ValueError, r"pins\[u:0\]: the partition does not exist"),
        ({("t", 5): "a"}, {}, ValueError, r"pins\[t:5\]: the partition does not exist"),
        ({("v", 0): "a"}, {}, ValueError, r"pins\[v:0\]: 'a' does not subscribe to 'v'"),
        ({("t", -1): "a"}, {}, ValueError, r"pins: \('t', -1\) is not a Kafka partition"),
        ({"t-0": "a"}, {}, TypeError, "pins: 't-0' is not a"),
        ({("t", 0): 7}, {}, TypeError, r"pins\[t:0\]: expected a member id, got 7"),
        ({}, {"z": 1}, ValueError, "max_partitions: 'z' is not a member"),
        ({}, {"a": -1}, ValueError, r"max_partitions\['a'\]: max partitions must be >= 0"),
        ({}, {"a": 1.5}, TypeError, r"max_partitions\['a'\]: max partitions must be an int"),
        ({}, {"a": True}, TypeError, "must be an int"),
        (
            {("t", 0): "a", ("t", 1): "a"},
            {"a": 1},
            ValueError,
            r"max_partitions\['a'\] is 1 but 2 partitions are pinned to it",
        ),
    ],
)
def test_bad_constraints_are_named_at_the_edge(
    pins: dict[object, object], caps: dict[object, object], error: type, message: str
) -> None:
    ppt = {"t": 2, "v": 1}
    with pytest.raises(error, match=message):
        assign("sticky", ppt, {"a": ["t"], "b": ["t", "v"]}, pins=pins, max_partitions=caps)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the engine


@st.composite
def constraint_changes(draw: st.DrawFn) -> ConstraintsChanged:
    members = MEMBERS[:6]
    caps = {
        m: draw(st.integers(0, 6))
        for m in draw(st.lists(st.sampled_from(members), max_size=3, unique=True))
    }
    pins: dict[TP, str] = {}
    for _ in range(draw(st.integers(0, 4))):
        tp = TP(draw(st.sampled_from(TOPICS[:3])), draw(st.integers(0, 13)))
        m = draw(st.sampled_from(members))
        if sum(v == m for v in pins.values()) < caps.get(m, 99):
            pins[tp] = m
    return ConstraintsChanged(pins, caps)


@st.composite
def constrained_runs(draw: st.DrawFn) -> list[object]:
    """The engine tests' event runs, some joiners twice as strong, with new constraints
    dropped in anywhere."""
    events = [
        MemberJoined(e.member, e.topics, capacity=2)
        if isinstance(e, MemberJoined) and draw(st.booleans())
        else e
        for e in draw(event_runs(uniform=False))
    ]
    for _ in range(draw(st.integers(1, 6))):
        events.insert(draw(st.integers(0, len(events))), draw(constraint_changes()))
    return events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=constrained_runs(), lag_aware=st.booleans(), batch=st.integers(1, 3))
def test_every_step_of_the_engine_honours_the_constraints_and_stays_balanced(
    events: list[object], lag_aware: bool, batch: int
) -> None:
    ppt = {"t0": 12, "t1": 5, "t2": 9}
    eng = IncrementalAssignor(ppt, lag_aware=lag_aware)
    rules = Constraints({}, {})
    for i in range(0, len(events), batch):
        step = events[i : i + batch]
        for e in step:
            if isinstance(e, ConstraintsChanged):
                rules = check_constraints(e.pins, e.max_partitions)
        before = eng.assignment()
        change = eng.apply(step)  # type: ignore[arg-type]
        out = eng.assignment()
        weights = {m: eng.capacity_of(m) or 1.0 for m in out}
        check(out, eng.partitions_per_topic, eng.members, rules, weights)
        assert eng.violations() == []
        holders_agree(eng)
        stranded = set(eng.unassigned())
        assert stranded == {
            TP(t, p)
            for t, n in eng.partitions_per_topic.items()
            for p in range(n)
            if any(t in topics for topics in eng.members.values())
        } - set(owners(out))
        for m in out:
            if m in change.assignments:
                assert change.assignments[m] == out[m]
            elif m in before:
                assert out[m] == before[m]


def test_a_pin_follows_its_member_out_and_back() -> None:
    ppt = {"t": 9}
    subs = {m: ["t"] for m in "abc"}
    eng, _ = IncrementalAssignor.from_snapshot(ppt, subs, pins={TP("t", 1): "a"})
    assert TP("t", 1) in eng.partitions_of("a")
    eng.apply([MemberLeft("a")])
    assert eng.owner_of(TP("t", 1)) in {"b", "c"}  # a pin never strands its partition
    change = eng.apply([MemberJoined("a", frozenset({"t"}))])
    assert eng.owner_of(TP("t", 1)) == "a"
    assert sorted(map(len, eng.assignment().values())) == [3, 3, 3]
    assert change.moved == 3  # a's share, the pinned partition among it
    eng.apply([SubscriptionChanged("a", frozenset({"u"}))])
    assert eng.owner_of(TP("t", 1)) in {"b", "c"}


def test_a_cap_moves_exactly_the_excess_and_lifting_it_refills() -> None:
    ppt = {"t": 30}
    subs = {m: ["t"] for m in "abc"}
    eng, _ = IncrementalAssignor.from_snapshot(ppt, subs)
    before = eng.assignment()
    change = eng.apply([ConstraintsChanged({}, {"a": 4})])
    after = eng.assignment()
    assert [len(after[m]) for m in "abc"] == [4, 13, 13]
    assert change.moved == movement(before, after, subs) == 6
    assert set(after["a"]) <= set(before["a"])
    change = eng.apply([ConstraintsChanged({}, {"a": 0, "b": 0, "c": 5})])
    assert [len(v) for v in eng.assignment().values()] == [0, 0, 5]
    assert len(eng.unassigned()) == 25
    eng.apply([ConstraintsChanged({}, {})])
    assert [len(v) for v in eng.assignment().values()] == [10, 10, 10]
    assert eng.unassigned() == []


def test_lag_moves_never_take_a_pinned_partition() -> None:
    ppt = {"t": 6}
    subs = {m: ["t"] for m in "ab"}
    heavy = {TP("t", 0): 90_000, TP("t", 1): 80_000}
    eng, _ = IncrementalAssignor.from_snapshot(
        ppt, subs, lag=heavy, pins={TP("t", 0): "a", TP("t", 1): "a"}
    )
    eng.apply([LagUpdated({TP("t", 0): 95_000, TP("t", 1): 85_000})])
    assert {TP("t", 0), TP("t", 1)} <= set(eng.partitions_of("a"))
    assert len(eng.partitions_of("a")) == 3


def test_a_snapshot_that_honours_its_constraints_moves_nothing() -> None:
    ppt = {"t": 20, "u": 7}
    subs = {m: ["t", "u"] for m in "abcd"}
    pins = {TP("t", 3): "a", TP("u", 0): "d"}
    caps = {"b": 2}
    first = assign("sticky", ppt, subs, pins=pins, max_partitions=caps)
    _, change = IncrementalAssignor.from_snapshot(
        ppt, subs, current=first, pins=pins, max_partitions=caps
    )
    assert (change.moved, change.assignments) == (0, {})


def test_room_made_by_a_lag_move_goes_to_a_stranded_partition() -> None:
    """Found by the property above: a capped member gave a partition away in the lag
    search, after the step had looked for room, and a stranded partition stayed unread
    beside that room until the next membership event."""
    eng = IncrementalAssignor({"t0": 12, "t1": 5, "t2": 9}, lag_aware=True)
    eng.apply([ConstraintsChanged({}, {"m05": 2})])
    eng.apply([LagUpdated({TP("t0", 0): 260, TP("t0", 1): 0, TP("t2", 0): 741})])
    eng.apply([MemberJoined("m05", frozenset({"t0", "t1", "t2"}))])
    eng.apply([PartitionsChanged("t0", 2)])
    assert len(eng.partitions_of("m05")) == 2
    eng.apply([MemberJoined("m02", frozenset({"t0"}))])
    assert len(eng.partitions_of("m05")) == 2  # it gave t0:0 to m02 and took a stranded one
    assert len(eng.unassigned()) == 5 + 9 - 1 - 1


def test_pins_are_checked_against_their_own_partitions_once_topics_came_out_of_order() -> None:
    """A topic named after another that sorts later ("a" after "b"): the engine's pins
    were paired with partitions in sorted order, not theirs, and honoured pins were
    reported broken."""
    eng, _ = IncrementalAssignor.from_snapshot({"b": 2}, {"m1": ["b"], "m2": ["b"]})
    both = frozenset({"a", "b"})
    eng.apply(
        [
            PartitionsChanged("a", 2),
            SubscriptionChanged("m1", both),
            SubscriptionChanged("m2", both),
        ]
    )
    pins = {
        TopicPartition("b", 0): "m1",
        TopicPartition("a", 1): "m2",
        TopicPartition("b", 1): "m2",
        TopicPartition("a", 0): "m1",
    }
    eng.apply([ConstraintsChanged(pins, {})])
    held = {tp: m for m, tps in eng.assignment().items() for tp in tps}
    assert all(held[tp] == m for tp, m in pins.items())
    assert eng.violations() == []
