"""Ballast's strategies as aiokafka assignors (the control group uses ``sticky``)."""

from __future__ import annotations

import json

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from assignors import STRATEGIES, TopicPartition, assign
from controller.adapters.group_protocol import group_assignor
from controller.runtime import faultpoints


class Cluster(ClusterMetadata):  # type: ignore[misc]
    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__()
        self._counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self._counts[topic])) if topic in self._counts else None


def meta(
    topics: list[str],
    generation: int,
    owned: list[tuple[str, int]],
    lag: list[tuple[str, int, int]] | None = None,
    **extra: object,
) -> ConsumerProtocolMemberMetadata:
    body: dict[str, object] = {"v": 1, "generation": generation, "owned": owned, **extra}
    if lag is not None:
        body["lag"] = lag
    return ConsumerProtocolMemberMetadata(0, topics, json.dumps(body).encode())


def owners(result: dict[str, object]) -> dict[str, list[TopicPartition]]:
    return {
        m: sorted(TopicPartition(t, p) for t, ps in a.assignment for p in ps)  # type: ignore[attr-defined]
        for m, a in result.items()
    }


def held(result: dict[str, object], member: str) -> set[int]:
    return {p for _, parts in result[member].assignment for p in parts}  # type: ignore[attr-defined]


def test_sticky_keeps_owned_and_equals_the_pure_function() -> None:
    sticky = group_assignor("sticky")
    members = {
        "r1": meta(["ctl"], 4, [("ctl", p) for p in range(12)]),
        "r2": meta(["ctl"], -1, []),
    }
    result = sticky.assign(Cluster({"ctl": 12}), members)
    expected = assign(
        "sticky",
        {"ctl": 12},
        {"r1": ["ctl"], "r2": ["ctl"]},
        current={"r1": [TopicPartition("ctl", p) for p in range(12)]},
    )
    assert held(result, "r1") == {tp.partition for tp in expected["r1"]}
    assert len(held(result, "r1")) == 6
    assert held(result, "r1") < set(range(12))
    # The leader stamps the next generation; a member advertises it with what it owns.
    sticky.on_assignment(result["r1"])
    assert sticky.generation == 5
    advertised = json.loads(sticky.metadata(["ctl"]).user_data)
    assert advertised["generation"] == 5
    assert len(advertised["owned"]) == 6


def test_a_stale_claim_loses_to_a_newer_generation() -> None:
    """KIP-341: a replica expelled while paused comes back claiming its old shards."""
    sticky = group_assignor("sticky")
    members = {
        "a-woken": meta(["ctl"], 3, [("ctl", p) for p in range(6)]),
        "b": meta(["ctl"], 7, [("ctl", p) for p in range(12)]),
    }
    result = sticky.assign(Cluster({"ctl": 12}), members)
    assert held(result, "b") | held(result, "a-woken") == set(range(12))
    # b keeps 6 of what it led; a gets only the shards balance requires, not "its" ones back
    assert len(held(result, "b")) == 6


def test_malformed_user_data_owns_nothing_and_is_counted() -> None:
    sticky = group_assignor("sticky")
    members = {
        "bad": ConsumerProtocolMemberMetadata(0, ["ctl"], b"\xff not json"),
        "good": meta(["ctl"], 1, [("ctl", 0)]),
    }
    result = sticky.assign(Cluster({"ctl": 2}), members)
    assert held(result, "good") == {0}
    assert held(result, "bad") == {1}
    assert sticky.malformed == 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_equals_the_pure_function_on_the_same_inputs(strategy: str) -> None:
    """Mixed subscriptions, ownership from an earlier generation, reported lag."""
    assignor = group_assignor(strategy)
    counts = {"a": 7, "b": 5}
    members = {
        "m1": meta(
            ["a", "b"], 3, [("a", p) for p in range(7)], [("a", p, 10 * p) for p in range(7)]
        ),
        "m2": meta(["a"], 3, [("b", p) for p in range(5)], [("b", p, 3) for p in range(5)]),
        "m3": meta(["b"], -1, []),
    }
    result = assignor.assign(Cluster(counts), members)
    last = assignor.last
    assert last is not None
    assert last.counts == counts
    assert last.subscriptions == {"m1": ["a", "b"], "m2": ["a"], "m3": ["b"]}
    assert last.current == {
        "m1": [TopicPartition("a", p) for p in range(7)],
        "m2": [TopicPartition("b", p) for p in range(5)],
    }
    expected_lag = None
    if strategy in ("lag", "lagsticky"):
        expected_lag = {TopicPartition("a", p): 10 * p for p in range(7)}
        expected_lag |= {TopicPartition("b", p): 3 for p in range(5)}
    assert last.lag == expected_lag
    pure = assign(strategy, counts, last.subscriptions, current=last.current, lag=expected_lag)
    assert owners(result) == pure == last.result


@pytest.mark.parametrize("strategy", ["lag", "lagsticky"])
def test_lag_aware_strategies_split_the_hot_partitions(strategy: str) -> None:
    owned = [("t", p) for p in range(6)]
    lag = [("t", p, 5000 if p < 2 else 0) for p in range(6)]
    members = {"hot": meta(["t"], 1, owned, lag), "new": meta(["t"], -1, [])}
    result = owners(group_assignor(strategy).assign(Cluster({"t": 6}), members))
    hot = [m for m, parts in result.items() for tp in parts if tp.partition < 2]
    assert sorted(hot) == ["hot", "new"]


def test_a_member_reports_lag_of_what_it_owns_only_and_survives_a_failing_source() -> None:
    readings = {TopicPartition("t", 0): 40, TopicPartition("t", 1): 7, TopicPartition("u", 9): 1}
    assignor = group_assignor("lagsticky", lag=lambda: readings)
    assignor.owned = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert json.loads(assignor.metadata(["t"]).user_data)["lag"] == [["t", 0, 40], ["t", 1, 7]]

    def broken() -> dict[TopicPartition, int]:
        raise RuntimeError("offsets not ready")

    failing = group_assignor("lagsticky", lag=broken)
    failing.owned = [TopicPartition("t", 0)]
    assert "lag" not in json.loads(failing.metadata(["t"]).user_data)
    # A lag-blind strategy never calls the source.
    assert "lag" not in json.loads(group_assignor("sticky", lag=broken).metadata(["t"]).user_data)


def test_the_leader_remembers_the_lag_of_a_departed_owner() -> None:
    assignor = group_assignor("lagsticky")
    first = {
        "a": meta(["t"], 1, [("t", 0), ("t", 1)], [("t", 0, 900), ("t", 1, 800)]),
        "b": meta(["t"], 1, [("t", 2), ("t", 3)], [("t", 2, 0), ("t", 3, 0)]),
    }
    assignor.assign(Cluster({"t": 4}), first)
    # a left; b and c rebalance without anyone owning t-0 and t-1.
    second = {"b": meta(["t"], 2, [("t", 2), ("t", 3)], []), "c": meta(["t"], -1, [])}
    result = owners(assignor.assign(Cluster({"t": 4}), second))
    assert assignor.last is not None
    assert assignor.last.lag is not None
    assert assignor.last.lag[TopicPartition("t", 0)] == 900
    hot = {m for m, parts in result.items() for tp in parts if tp.partition < 2}
    assert hot == {"b", "c"}


def test_without_any_lag_a_lag_aware_strategy_balances_counts_and_says_so() -> None:
    assignor = group_assignor("lagsticky")
    members = {"a": meta(["t"], -1, []), "b": meta(["t"], -1, [])}
    result = owners(assignor.assign(Cluster({"t": 4}), members))
    assert sorted(len(v) for v in result.values()) == [2, 2]
    assert assignor.lag_unavailable == 1
    assert assignor.last is not None
    assert assignor.last.lag is None


def test_malformed_lag_owns_nothing_and_unknown_keys_are_ignored() -> None:
    assignor = group_assignor("lagsticky")
    members = {
        "old": meta(["t"], 2, [("t", 0)], [("t", 0, "lots")]),  # type: ignore[list-item]
        "newer": meta(["t"], 2, [("t", 1)], [("t", 1, 4)], racks=["z1"], v2_field=True),
    }
    result = owners(assignor.assign(Cluster({"t": 2}), members))
    assert assignor.malformed == 1
    assert TopicPartition("t", 1) in result["newer"]


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="valid strategies"):
        group_assignor("best")


def test_fault_points_are_validated() -> None:
    assert faultpoints.parse("acquire.after_read, publish.after_confirm@3") == {
        "acquire.after_read": 1,
        "publish.after_confirm": 3,
    }
    with pytest.raises(ValueError, match=r"unknown fault point .acquire\.afterread."):
        faultpoints.parse("acquire.afterread")
    with pytest.raises(ValueError, match="positive integer"):
        faultpoints.parse("acquire.after_read@0")
