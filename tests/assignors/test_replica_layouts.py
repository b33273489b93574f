"""The replica layout table: read in bulk or entry by entry, the same partitions and racks
either way, and the same as the dict it stands for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assignors.ids import TopicIds
from assignors.racks import build_racks, replica_racks, valid_rack
from assignors.replica_layouts import ReplicaLayouts
from assignors.spec import build_spec
from assignors.types import TopicPartition

tp = TopicPartition
SPEC = build_spec({"a": 3, "b": 2, "other": 2}, {"m0": ["a", "b"], "m1": ["b"]})


def both(partition_racks: dict[Any, Any]) -> tuple[ReplicaLayouts | None, ReplicaLayouts]:
    """The bulk reading (``None`` when it hands over) and the entry-by-entry one."""
    bulk = ReplicaLayouts.in_bulk(SPEC, partition_racks, valid_rack)
    pairs = ReplicaLayouts.of_pairs(SPEC, replica_racks(partition_racks, "partition_racks"))
    return bulk, pairs


def test_the_table_is_the_dict_of_existing_partitions() -> None:
    given_racks = {
        tp("a", 0): ["r1", "r2"],
        tp("a", 2): ("r2", "r1"),  # the same layout, another order and container
        tp("b", 1): frozenset({"r3"}),
        tp("other", 1): ["r1"],  # a topic nobody subscribes to is kept (it may be later)
        tp("a", 7): ["r9"],  # no such partition (yet)
        tp("gone", 0): ["r9"],  # no such topic
        tp("b", 0): [],  # given as none known
    }
    bulk, pairs = both(given_racks)
    assert bulk is not None
    expected: dict[TopicPartition, frozenset[str]] = {
        tp("a", 0): frozenset({"r1", "r2"}),
        tp("a", 2): frozenset({"r1", "r2"}),
        tp("b", 0): frozenset(),
        tp("b", 1): frozenset({"r3"}),
        tp("other", 1): frozenset({"r1"}),
    }
    assert dict(bulk) == expected
    assert pairs == expected
    # Each layout once; that of a partition that does not exist is held by none.
    assert sorted(map(sorted, bulk.layouts)) == [[], ["r1"], ["r1", "r2"], ["r3"], ["r9"]]
    assert len(bulk) == 5
    assert bulk.get(tp("a", 1)) is None
    assert bulk.present() == set(expected.values())
    assert bulk.none_known(["a"])  # a-1 is absent
    assert not bulk.none_known(["b"])  # b-0 is given, as []
    ids = TopicIds(["a", "b", "gone", "other"])
    pids, named = bulk.by_pid(ids)
    assert dict(zip(ids.tps(pids), named, strict=True)) == expected
    want = [tp("a", 1), tp("a", 2), tp("b", 1), tp("gone", 0), tp("a", 9)]
    codes = bulk.codes_of(ids, np.asarray(ids.pids_of(want), dtype=np.int64))
    assert [bulk.layouts[c] if c >= 0 else None for c in codes.tolist()] == [
        None,
        frozenset({"r1", "r2"}),
        frozenset({"r3"}),
        None,  # a topic the table does not cover
        None,  # past the topic's count
    ]


def test_a_group_with_no_partitions_reads_any_map_as_none_known() -> None:
    spec = build_spec({"t": 0}, {"m0": ["t"]})
    racks = {tp("t", 0): ["r1"], tp("gone", 3): ["r2"]}
    table = ReplicaLayouts.in_bulk(spec, racks, valid_rack)
    assert table is not None
    assert dict(table) == {}
    assert not table.none_known(spec.topics)
    assert build_racks(spec, {"m0": "r1"}, racks) is not None


@pytest.mark.parametrize(
    "bad",
    [
        {("a", 0): ["r1"]},  # a plain pair: the item path reads it
        {tp("a", True): ["r1"]},  # a bool is not a partition number
        {tp("a", 1.0): ["r1"]},  # type: ignore[arg-type]
        {tp("a", 0): "r1"},  # one name is not a collection of racks
        {tp("a", 0): ["r 1"]},  # not a rack name
        {tp("a", 0): [["r1"]]},  # an unhashable rack
        {tp("a", 0): [None]},
        {tp(3, 0): ["r1"]},  # type: ignore[arg-type]
        {tp("a", 2**70): ["r1"]},
    ],
)
def test_anything_but_well_formed_entries_is_left_to_the_entry_by_entry_reading(
    bad: dict[Any, Any],
) -> None:
    assert ReplicaLayouts.in_bulk(SPEC, bad, valid_rack) is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({tp("a", 0): "r1"}, r"partition_racks\[.*\]: expected a collection of rack names"),
        ({tp("a", 0): ["r 1"]}, r"partition_racks\[.*\]: rack 'r 1' contains whitespace"),
        ({tp("a", 0): [["r1"]]}, r"partition_racks\[.*\]: rack must be a str"),
        ({tp(3, 0): ["r1"]}, r"partition_racks: .* is not a \(topic, partition\) pair"),  # type: ignore[arg-type]
        ({tp("a", True): ["r1"]}, r"partition_racks: .* is not a \(topic, partition\) pair"),
    ],
)
def test_build_racks_names_the_bad_entry(bad: dict[Any, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        build_racks(SPEC, {"m0": "r1"}, bad)


racks_ = st.sampled_from(["r1", "r2", "r3"])
keys = st.builds(tp, st.sampled_from(["a", "b", "other", "gone"]), st.integers(-2, 4))
values = st.one_of(
    st.lists(racks_, max_size=3),
    st.lists(racks_, max_size=3).map(tuple),
    st.frozensets(racks_, max_size=3),
    st.sets(racks_, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, values, max_size=12))
def test_bulk_and_entry_by_entry_readings_agree(partition_racks: dict[Any, Any]) -> None:
    bulk, pairs = both(partition_racks)
    expected = {
        k: frozenset(v)
        for k, v in partition_racks.items()
        if 0 <= k.partition < SPEC.partitions_per_topic.get(k.topic, 0)
    }
    assert pairs == expected
    if partition_racks:
        assert bulk is not None
        assert dict(bulk) == expected
        assert bulk.present() == set(expected.values())
        for topics in (["a"], ["b"], ["a", "b"]):
            absent = any(
                tp(t, p) not in expected
                for t in topics
                for p in range(SPEC.partitions_per_topic[t])
            )
            assert bulk.none_known(topics) == absent
