"""What Ballast's topics are created with, and which settings of an existing topic it
warns about."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.wire.topic_settings import (
    DELETE_RETENTION_MS,
    SEGMENT_MS,
    created_configs,
    min_insync_replicas,
    replication_factor,
    unsafe_settings,
)


def test_unset_replication_is_three_or_every_broker_of_a_smaller_cluster() -> None:
    assert [replication_factor(None, b, "x") for b in (1, 2, 3, 9)] == [1, 2, 3, 3]
    assert replication_factor(2, 5, "x") == 2


def test_more_replicas_than_brokers_is_refused_naming_the_setting() -> None:
    with pytest.raises(
        ValueError, match=r"assignments.replication_factor is 3 but the cluster has 1 broker:"
    ):
        replication_factor(3, 1, "assignments.replication_factor")


@given(st.integers(1, 32))
def test_min_insync_survives_one_broker_and_acks_on_two_where_it_can(replicas: int) -> None:
    insync = min_insync_replicas(replicas)
    assert 1 <= insync <= 2
    assert replicas == 1 or insync <= replicas - 1  # one broker down: writes go on
    assert replicas < 3 or insync == 2  # three or more: an ack is on two replicas


def test_compacted_topics_state_compaction_settings() -> None:
    assert created_configs(3, compacted=True) == {
        "min.insync.replicas": "2",
        "cleanup.policy": "compact",
        "segment.ms": str(SEGMENT_MS),
        "delete.retention.ms": str(DELETE_RETENTION_MS),
    }
    assert created_configs(1, compacted=False) == {"min.insync.replicas": "1"}


def test_a_created_topic_is_never_unsafe() -> None:
    for brokers in range(1, 6):
        replicas = replication_factor(None, brokers, "x")
        configs = {k: v for k, v in created_configs(replicas, compacted=True).items()}
        assert unsafe_settings("t", configs, replicas, brokers, compacted=True) == []


def test_each_unsafe_setting_is_named() -> None:
    configs = {
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "true",
        "segment.ms": "604800000",
        "delete.retention.ms": "1000",
    }
    found = unsafe_settings("ballast.assignments", configs, 3, 3, compacted=True)
    assert [u.setting for u in found] == [
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "segment.ms",
        "delete.retention.ms",
    ]
    assert all(u.topic == "ballast.assignments" for u in found)
    short = unsafe_settings("t", {}, 1, 3, compacted=False)
    assert [(u.setting, u.value) for u in short] == [("replication factor", "1")]
    assert "below 3" in short[0].advice()
    # a stream is not judged by compaction settings; unreadable values are not judged
    assert unsafe_settings("t", {"segment.ms": "604800000"}, 3, 3, compacted=False) == []
    for junk in ("x1", "--1", "²", "1" * 40, ""):
        assert unsafe_settings("t", {"min.insync.replicas": junk}, 3, 3, compacted=True) == []
