"""Every example the seed documents give, checked against their own stated results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from assignors import STRATEGIES, TopicPartition, assign
from assignors.quality import is_balanced, movement


def tp(name: str) -> TopicPartition:
    """'t1p0' -> ('t1', 0); 'T1-0' -> ('T1', 0)."""
    if "-" in name:
        topic, part = name.rsplit("-", 1)
    else:
        topic, part = name.rsplit("p", 1)
    return TopicPartition(topic, int(part))


def parts(*names: str) -> list[TopicPartition]:
    return sorted(tp(n) for n in names)


# ---------------------------------------------------------------- KIP-54 (sticky)

ALL4 = ["t0", "t1", "t2", "t3"]


def test_kip54_example1_fresh_equals_roundrobin_and_sticky_keeps_five() -> None:
    ppt = {t: 2 for t in ALL4}
    subs = {"C0": ALL4, "C1": ALL4, "C2": ALL4}
    expected = {
        "C0": parts("t0p0", "t1p1", "t3p0"),
        "C1": parts("t0p1", "t2p0", "t3p1"),
        "C2": parts("t1p0", "t2p1"),
    }
    assert assign("roundrobin", ppt, subs) == expected
    first = assign("sticky", ppt, subs)
    assert first == expected

    after = assign("sticky", ppt, {"C0": ALL4, "C2": ALL4}, current=first)
    assert after == {
        "C0": parts("t0p0", "t1p1", "t3p0", "t2p0"),
        "C2": parts("t1p0", "t2p1", "t0p1", "t3p1"),
    }
    # "preserving 5 of the previous assignments (unlike the round robin assignor which
    # preserves only 3)"
    kept = sum(len(set(first[m]) & set(after[m])) for m in after)
    assert kept == 5
    rr = assign("roundrobin", ppt, {"C0": ALL4, "C2": ALL4})
    assert rr == {
        "C0": parts("t0p0", "t1p0", "t2p0", "t3p0"),
        "C2": parts("t0p1", "t1p1", "t2p1", "t3p1"),
    }
    assert sum(len(set(first[m]) & set(rr[m])) for m in rr) == 3


def test_kip54_example2_heterogeneous() -> None:
    ppt = {"t0": 1, "t1": 2, "t2": 3}
    subs = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    assert assign("roundrobin", ppt, subs) == {
        "C0": parts("t0p0"),
        "C1": parts("t1p0"),
        "C2": parts("t1p1", "t2p0", "t2p1", "t2p2"),
    }
    first = assign("sticky", ppt, subs)
    assert first == {
        "C0": parts("t0p0"),
        "C1": parts("t1p0", "t1p1"),
        "C2": parts("t2p0", "t2p1", "t2p2"),
    }
    subs2 = {"C1": subs["C1"], "C2": subs["C2"]}
    after = assign("sticky", ppt, subs2, current=first)
    assert after == {"C1": parts("t1p0", "t1p1", "t0p0"), "C2": parts("t2p0", "t2p1", "t2p2")}
    assert assign("roundrobin", ppt, subs2) == {
        "C1": parts("t0p0", "t1p1"),
        "C2": parts("t1p0", "t2p0", "t2p1", "t2p2"),
    }


def test_kip54_example3_new_member_takes_one_partition() -> None:
    ppt = {"t0": 2, "t1": 2}
    both = ["t0", "t1"]
    two = {"C0": both, "C1": both}
    expected = {"C0": parts("t0p0", "t1p0"), "C1": parts("t0p1", "t1p1")}
    for strategy in ("range", "roundrobin", "sticky"):
        assert assign(strategy, ppt, two) == expected
    three = {**two, "C2": both}
    assert assign("range", ppt, three) == {**expected, "C2": []}
    assert assign("roundrobin", ppt, three) == {
        "C0": parts("t0p0", "t1p1"),
        "C1": parts("t0p1"),
        "C2": parts("t1p0"),
    }
    sticky = assign("sticky", ppt, three, current=expected)
    # "something like" C0: t0p0, t1p0; C1: t0p1; C2: t1p1 -- preserving 3.
    assert sticky == {"C0": parts("t0p0", "t1p0"), "C1": parts("t0p1"), "C2": parts("t1p1")}
    assert movement(expected, sticky) == 1


# ---------------------------------------------------------------- KIP-49 (fair)

KIP49_PPT = {"T1": 2, "T2": 1, "T3": 2, "T4": 1, "T5": 2}
KIP49_SUBS = {
    "C1": ["T1", "T2", "T3", "T4", "T5"],
    "C2": ["T1", "T3", "T5"],
    "C3": ["T1", "T3", "T5"],
    "C4": ["T1", "T2", "T3", "T4", "T5"],
}


def test_kip49_range() -> None:
    assert assign("range", KIP49_PPT, KIP49_SUBS) == {
        "C1": parts("T1-0", "T2-0", "T3-0", "T4-0", "T5-0"),
        "C2": parts("T1-1", "T3-1", "T5-1"),
        "C3": [],
        "C4": [],
    }


def test_kip49_roundrobin() -> None:
    assert assign("roundrobin", KIP49_PPT, KIP49_SUBS) == {
        "C1": parts("T1-0", "T3-0", "T5-0"),
        "C2": parts("T1-1", "T3-1", "T5-1"),
        "C3": [],
        "C4": parts("T2-0", "T4-0"),
    }


def test_kip49_fair() -> None:
    assert assign("fair", KIP49_PPT, KIP49_SUBS) == {
        "C1": parts("T2-0", "T3-0"),
        "C2": parts("T1-0", "T3-1"),
        "C3": parts("T1-1", "T5-0"),
        "C4": parts("T4-0", "T5-1"),
    }


@pytest.mark.parametrize("strategy", ["sticky", "lagsticky"])
def test_kip49_example_is_balanced_by_sticky_strategies(strategy: str) -> None:
    result = assign(strategy, KIP49_PPT, KIP49_SUBS)
    assert sorted(len(v) for v in result.values()) == [2, 2, 2, 2]


# ---------------------------------------------------------------- walkthrough (range)


def test_walkthrough_range_five_partitions_three_consumers() -> None:
    subs = {"consumer_0": ["topic_a"], "consumer_1": ["topic_a"], "consumer_2": ["topic_a"]}
    result = assign("range", {"topic_a": 5}, subs)
    # 5 / 3 = 1 each, 5 % 3 = 2 extra to the first two consumers, contiguous ranges.
    assert result == {
        "consumer_0": [TopicPartition("topic_a", 0), TopicPartition("topic_a", 1)],
        "consumer_1": [TopicPartition("topic_a", 2), TopicPartition("topic_a", 3)],
        "consumer_2": [TopicPartition("topic_a", 4)],
    }


def test_walkthrough_roundrobin_skips_non_subscribers() -> None:
    subs = {"a": ["x"], "b": ["x", "y"], "c": ["y"]}
    result = assign("roundrobin", {"x": 3, "y": 3}, subs)
    # x0->a x1->b x2->a(c skipped) ; y0->b y1->c y2->b(a skipped)
    assert result == {
        "a": [TopicPartition("x", 0), TopicPartition("x", 2)],
        "b": [TopicPartition("x", 1), TopicPartition("y", 0), TopicPartition("y", 2)],
        "c": [TopicPartition("y", 1)],
    }


# ---------------------------------------------------------------- KAFKA-5337 (lag)


def test_kafka5337_decreasing_lag_to_fewest_partitions_then_least_lag() -> None:
    lag = {TopicPartition("t", p): v for p, v in enumerate([100, 500, 300, 50, 400, 0])}
    result = assign("lag", {"t": 6}, {"c1": ["t"], "c2": ["t"]}, lag=lag)
    # order by lag: p1(500) p4(400) p2(300) p0(100) p3(50) p5(0)
    # p1->c1 (tie, id), p4->c2, p2->c2 (tie on count, c2 has less lag 400<500),
    # p0->c1 (fewer partitions), p3->c1 (count tie 2/2, lag 600 vs 700), p5->c2
    assert result == {
        "c1": parts("t-0", "t-1", "t-3"),
        "c2": parts("t-2", "t-4", "t-5"),
    }


def test_kafka5337_counts_stay_even_when_lag_is_heavily_skewed() -> None:
    lag = {TopicPartition("t", 0): 10**9}
    result = assign("lag", {"t": 4}, {"a": ["t"], "b": ["t"]}, lag=lag)
    assert [len(v) for v in result.values()] == [2, 2]


def test_kafka5337_all_zero_lag_is_count_balanced_and_per_topic() -> None:
    result = assign("lag", {"t": 3, "u": 3}, {"a": ["t", "u"], "b": ["t", "u"]})
    # Per topic, a (id tie-break) gets the extra partition of each topic.
    assert result == {"a": parts("t-0", "t-2", "u-0", "u-2"), "b": parts("t-1", "u-1")}


def test_unknown_strategy_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="lagsticky") as err:
        assign("magic", {"t": 1}, {"a": ["t"]})
    for name in STRATEGIES:
        assert name in str(err.value)


def test_missing_topic_simply_has_no_partitions() -> None:
    for strategy in STRATEGIES:
        assert assign(strategy, {}, {"a": ["nope"]}) == {"a": []}


@pytest.mark.parametrize("strategy", ["sticky", "lagsticky"])
def test_current_with_departed_members_vanished_partitions_and_conflicts(strategy: str) -> None:
    current = {
        "gone": [("t", 0)],
        "a": [("t", 1), ("t", 99), ("x", 0), ("t", 2)],
        "b": [("t", 1), ("t", 3)],
    }
    result = assign(strategy, {"t": 4}, {"a": ["t"], "b": ["t"]}, current=current)
    assert sorted(p for v in result.values() for p in v) == parts("t-0", "t-1", "t-2", "t-3")
    assert is_balanced(result, {"a": ["t"], "b": ["t"]})
    assert [len(v) for v in result.values()] == [2, 2]
    # Stale claims are dropped; a claim that is no (topic, partition) pair is a bug, named.
    for bad in ("garbage", ("t", "p"), ("t", np.int64(1))):
        spoiled: Any = {**current, "b": [("t", 3), bad]}
        with pytest.raises(TypeError, match=r"current\['b'\]"):
            assign(strategy, {"t": 4}, {"a": ["t"], "b": ["t"]}, current=spoiled)
