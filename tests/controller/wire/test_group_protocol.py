"""The group protocol's pure part: what a leader makes of its members' claims, with no
client library in sight (the aiokafka plug-in: tests/controller/adapters)."""

from __future__ import annotations

import json

import pytest

from assignors import TopicPartition, assign
from controller.wire.group_protocol import (
    NO_CLAIMS,
    assignment_generation,
    assignment_user_data,
    by_topic,
    lead,
    protocol_name,
    read_claims,
    subscription_user_data,
)

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def claims(generation: int, owned: list[TopicPartition], lag: dict[TopicPartition, int]) -> bytes:
    return subscription_user_data(generation, owned, lag)


def test_a_member_says_what_it_owns_and_the_lag_of_that_only() -> None:
    said = json.loads(claims(4, [T1, T0], {T0: 7, T2: 9, T1: -3}))
    assert said == {
        "v": 1,
        "generation": 4,
        "owned": [["t", 0], ["t", 1]],
        "lag": [["t", 0, 7], ["t", 1, 0]],
    }
    assert read_claims(claims(4, [T1, T0], {T0: 7})) == (4, [T0, T1], {T0: 7})


def test_newest_generation_wins_claims_past_the_topic_do_not_count_and_lag_is_remembered() -> None:
    counts = {"t": 3}
    subs = {"a": ["t"], "b": ["t"]}
    said = {
        "a": read_claims(claims(2, [T0, T1, TopicPartition("t", 9)], {T0: 50})),
        "b": read_claims(claims(3, [T1], {T1: 5})),
    }
    known: dict[TopicPartition, int] = {T2: 700}
    led = lead("lagsticky", counts, subs, said, known)
    assert led.current == {"a": [T0], "b": [T1]}
    assert led.lag == {T0: 50, T1: 5, T2: 700}
    assert known == led.lag
    assert led.generation == 4
    assert led.result == assign("lagsticky", counts, subs, current=led.current, lag=led.lag)


def test_a_member_without_claims_and_a_count_strategy_get_no_lag() -> None:
    led = lead("sticky", {"t": 3}, {"a": ["t"]}, {"a": NO_CLAIMS}, {T0: 1})
    assert led.lag is None
    assert led.generation == 0
    assert sorted(led.result["a"]) == [T0, T1, T2]


def test_the_leaders_answer_and_its_reading() -> None:
    assert assignment_generation(assignment_user_data(12)) == 12
    assert assignment_generation(b"\xff not json") == -1
    assert by_topic([TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("b", 0)]) == [
        ("a", [2]),
        ("b", [1, 0]),
    ]


def test_malformed_claims_raise_value_error_and_names_are_checked() -> None:
    with pytest.raises(ValueError, match="user data"):
        read_claims(b'{"generation": "x"}')
    assert read_claims(b"") == NO_CLAIMS
    assert protocol_name("lag") == "ballast-lag"
    with pytest.raises(ValueError, match="unknown strategy"):
        protocol_name("nope")
