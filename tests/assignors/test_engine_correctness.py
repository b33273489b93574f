"""Wrong results an independent randomized check found (issue 41), each pinned here, and
the atomicity of ``apply``: a batch that raises leaves the engine exactly as it was."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors import (
    ConstraintsChanged,
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionRacksChanged,
    PartitionsChanged,
    SubscriptionChanged,
    TopicPartition,
    UnassignedPartitionsWarning,
    assign,
)
from assignors.racks import Racks, cross_rack
from assignors.spec import kafka_sorted

from .strategies_hyp import MEMBERS, TOPICS

TP = TopicPartition


def counts(assignment: dict[str, list[TopicPartition]]) -> dict[str, int]:
    return {m: len(parts) for m, parts in assignment.items()}


def test_equal_capacities_other_than_one_are_remembered() -> None:
    eng, _ = IncrementalAssignor.from_snapshot(
        {"t": 6}, {"a": ["t"], "b": ["t"]}, member_capacities={"a": 2, "b": 2}
    )
    assert eng.capacity_of("a") == 2
    eng.apply([MemberJoined("c", frozenset({"t"}), capacity=1)])
    stateless = assign(
        "sticky",
        {"t": 6},
        {"a": ["t"], "b": ["t"], "c": ["t"]},
        member_capacities={"a": 2, "b": 2, "c": 1},
    )
    assert counts(eng.assignment()) == counts(stateless) == {"a": 3, "b": 2, "c": 1}


def test_replica_racks_given_at_build_hold_for_members_that_declare_racks_later() -> None:
    racks = {TP("t", 0): ["r1"], TP("t", 1): ["r1"], TP("t", 2): ["r2"], TP("t", 3): ["r2"]}
    eng, _ = IncrementalAssignor.from_snapshot(
        {"t": 4}, {"a": ["t"], "b": ["t"]}, partition_racks=racks
    )
    eng.apply(
        [MemberJoined("a", frozenset({"t"}), rack="r1"), MemberJoined("b", frozenset({"t"}), "r2")]
    )
    got = eng.assignment()
    assert (
        cross_rack(
            got, Racks({"a": "r1", "b": "r2"}, {tp: frozenset(r) for tp, r in racks.items()})
        )
        == 0
    )
    assert eng.cross_rack() == 0
    assert got == {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 2), TP("t", 3)]}


def test_a_batch_that_raises_changes_nothing() -> None:
    eng, _ = IncrementalAssignor.from_snapshot({"orders": 4}, {"a": ["orders"]})
    with pytest.raises(ValueError, match=r"lag must be >= 0"):
        eng.apply([MemberJoined("b", frozenset({"orders"})), LagUpdated({TP("orders", 0): -1})])
    assert eng.members == {"a": frozenset({"orders"})}
    assert counts(eng.assignment()) == {"a": 4}
    eng.apply([MemberJoined("b", frozenset({"orders"}))])
    assert counts(eng.assignment()) == {"a": 2, "b": 2}


@pytest.mark.parametrize(
    "event",
    [
        MemberJoined("b", "orders"),  # type: ignore[arg-type]
        SubscriptionChanged("a", "orders"),  # type: ignore[arg-type]
        MemberJoined("b", frozenset({None})),  # type: ignore[arg-type]
        SubscriptionChanged("a", frozenset({1})),  # type: ignore[arg-type]
        MemberJoined(7, frozenset({"orders"})),  # type: ignore[arg-type]
    ],
)
def test_a_string_or_a_non_name_where_topics_belong_is_refused(event: Any) -> None:
    eng, _ = IncrementalAssignor.from_snapshot({"orders": 4}, {"a": ["orders"]})
    with pytest.raises(TypeError, match=r"events\[0\]: (MemberJoined|SubscriptionChanged)"):
        eng.apply([event])
    assert counts(eng.assignment()) == {"a": 4}


@pytest.mark.parametrize("strategy", ["sticky", "lagsticky"])
def test_a_partition_missing_from_partition_racks_is_one_with_no_racks(strategy: str) -> None:
    members = {"c0": "a", "c1": "z"}
    subs = {"c0": ["t"], "c1": ["t"]}
    missing = assign(
        strategy, {"t": 2}, subs, member_racks=members, partition_racks={TP("t", 1): ["a"]}
    )
    empty = assign(
        strategy,
        {"t": 2},
        subs,
        member_racks=members,
        partition_racks={TP("t", 1): ["a"], TP("t", 0): []},
    )
    assert missing == empty == {"c0": [TP("t", 1)], "c1": [TP("t", 0)]}


#: ``assign`` and ``from_snapshot`` as a caller without type checking sees them.
loose: Any = assign
loose_snapshot: Any = IncrementalAssignor.from_snapshot


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: loose("sticky", {"t": 2}, {"a": ["t"]}, current=[TP("t", 0)]),
            r"current: expected a mapping",
        ),
        (
            lambda: loose("sticky", {"t": 2}, {"a": ["t"]}, current={"a": [("t", np.int64(0))]}),
            r"current\['a'\]",
        ),
        (lambda: loose("range", {"t": 2}, {"a": [None]}), r"subscriptions\['a'\]: topic name"),
        (lambda: loose("roundrobin", {"t": 2}, {"a": [1]}), r"subscriptions\['a'\]: topic name"),
        (lambda: loose("fair", {"t": 2}, {"a": ["t"], "b": [None]}), r"subscriptions\['b'\]"),
        (lambda: loose("lag", {"t": 2}, {"a": [None]}), r"subscriptions\['a'\]"),
        (lambda: loose("sticky", {"t": 2}, {"a": [None, "t"]}), r"subscriptions\['a'\]"),
        (
            lambda: loose("sticky", [("t", 2)], {"a": ["t"]}),
            r"partitions_per_topic: expected a mapping",
        ),
        (lambda: loose("range", {"t": 2}, [("a", ["t"])]), r"subscriptions: expected a mapping"),
        (lambda: loose("sticky", {"t": 2}, {"a": ["t"]}, lag=[1]), r"lag: expected a mapping"),
        (
            lambda: loose("sticky", {"t": 2}, {"a": ["t"]}, member_racks=["a"]),
            r"member_racks: expected",
        ),
        (
            lambda: loose("sticky", {"t": 2}, {"a": ["t"]}, pins=[TP("t", 0)]),
            r"pins: expected a mapping",
        ),
        (
            lambda: loose_snapshot({"t": 2}, {"a": ["t"]}, current=[]),
            r"current: expected a mapping",
        ),
    ],
)
def test_bad_input_is_named_not_silently_misread(call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()


def test_partitions_the_caps_leave_out_are_said_to_be_left_out() -> None:
    with pytest.warns(UnassignedPartitionsWarning, match=r"2 partitions left unassigned") as said:
        got = assign("sticky", {"t": 4}, {"a": ["t"]}, max_partitions={"a": 2})
    assert counts(got) == {"a": 2}
    left = sorted(set(map(TP, ["t"] * 4, range(4))) - set(got["a"]))
    assert f"first: {left[0].topic}-{left[0].partition}" in str(said[0].message)


def test_member_ids_are_ordered_as_kafka_orders_them_by_utf16_unit() -> None:
    # U+1F600 is the surrogate pair D83D DE00, below U+FF21 in Java's String order.
    assert kafka_sorted(["\uff21", "\U0001f600"]) == ["\U0001f600", "\uff21"]
    assert kafka_sorted(["b", "a", ""]) == ["", "a", "b"]
    subs = {"\U0001f600": ["t"], "\uff21": ["t"]}
    assert assign("range", {"t": 3}, subs)["\U0001f600"] == [TP("t", 0), TP("t", 1)]
    assert assign("roundrobin", {"t": 3}, subs)["\U0001f600"] == [TP("t", 0), TP("t", 2)]


# ---------------------------------------------------------------- atomicity, by property

BAD_EVENTS: list[Any] = [
    LagUpdated({TP("t0", 0): -1}),
    LagUpdated({TP("t0", 0): 1.5}),  # type: ignore[dict-item]
    LagUpdated({("t0", -2): 3}),  # type: ignore[dict-item]
    MemberJoined("m99", "t0"),  # type: ignore[arg-type]
    MemberJoined("m99", frozenset({"t0"}), rack="two words"),
    MemberJoined("m99", frozenset({"t0"}), capacity=0),
    MemberJoined("m99", frozenset({"t0"}), capacity=float("nan")),
    SubscriptionChanged("m00", frozenset({None})),  # type: ignore[arg-type]
    PartitionsChanged("t0", -1),
    PartitionsChanged("t0", True),
    PartitionRacksChanged({TP("t0", 0): "r1"}),
    PartitionRacksChanged({TP("t0", 0): ["r 1"]}),
    ConstraintsChanged(pins={TP("t0", 0): 5}),  # type: ignore[dict-item]
    ConstraintsChanged(max_partitions={"m00": -1}),
    "not an event",
]


@st.composite
def good_events(draw: st.DrawFn) -> list[object]:
    topics = TOPICS[:3]
    out: list[object] = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["join", "leave", "sub", "parts", "lag", "racks", "pins"]))
        member = draw(st.sampled_from(MEMBERS[:6]))
        some = frozenset(draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)))
        if kind == "join":
            rack = draw(st.sampled_from([None, "r1", "r2"]))
            out.append(MemberJoined(member, some, rack, draw(st.sampled_from([None, 1, 2]))))
        elif kind == "leave":
            out.append(MemberLeft(member))
        elif kind == "sub":
            out.append(SubscriptionChanged(member, some))
        elif kind == "parts":
            out.append(PartitionsChanged(draw(st.sampled_from(topics)), draw(st.integers(0, 8))))
        elif kind == "lag":
            parts = draw(st.lists(st.integers(0, 7), max_size=4))
            out.append(
                LagUpdated({TP(t, p): draw(st.integers(0, 9_000)) for t in some for p in parts})
            )
        elif kind == "racks":
            out.append(
                PartitionRacksChanged(
                    {
                        TP(t, p): draw(st.sampled_from([[], ["r1"], ["r2"], ["r1", "r2"]]))
                        for t in some
                        for p in range(3)
                    }
                )
            )
        else:
            out.append(ConstraintsChanged(pins={TP("t0", 0): member}, max_partitions={member: 5}))
    return out


def observed(eng: IncrementalAssignor) -> tuple[object, ...]:
    members = eng.members
    return (
        eng.assignment(),
        members,
        eng.lag(),
        eng.member_lag(),
        eng.partitions_per_topic,
        eng.cross_rack(),
        eng.unassigned(),
        eng.violations(),
        {m: (eng.rack_of(m), eng.capacity_of(m)) for m in members},
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=good_events(),
    around=st.tuples(good_events(), good_events()),
    bad=st.sampled_from(BAD_EVENTS),
    then=good_events(),
    lag_aware=st.booleans(),
)
def test_a_batch_with_one_bad_event_leaves_the_engine_exactly_as_it_was(
    history: list[Any],
    around: tuple[list[Any], list[Any]],
    bad: Any,
    then: list[Any],
    lag_aware: bool,
) -> None:
    def built() -> IncrementalAssignor:
        eng = IncrementalAssignor({t: 4 for t in TOPICS[:3]}, lag_aware=lag_aware)
        eng.apply([MemberJoined("m00", frozenset(TOPICS[:3]))])
        for event in history:
            eng.apply([event])
        return eng

    eng, twin = built(), built()
    state = observed(eng)
    with pytest.raises((TypeError, ValueError), match=r"\S"):
        eng.apply([*around[0], bad, *around[1]])
    assert observed(eng) == state
    # Not only what can be read: the next step of the engine that saw the bad batch is
    # the step of the engine that never did.
    assert eng.apply(then) == twin.apply(then)
    assert observed(eng) == observed(twin)
