"""Ballast's strategies as aiokafka assignors (the control group uses ``sticky``)."""

from __future__ import annotations

import json

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from assignors import TopicPartition, assign
from controller.runtime import faultpoints
from controller.wire.group_protocol import group_assignor


class Cluster(ClusterMetadata):  # type: ignore[misc]
    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__()
        self._counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self._counts[topic])) if topic in self._counts else None


def meta(
    topics: list[str], generation: int, owned: list[tuple[str, int]]
) -> ConsumerProtocolMemberMetadata:
    data = json.dumps({"v": 1, "generation": generation, "owned": owned}).encode()
    return ConsumerProtocolMemberMetadata(0, topics, data)


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
