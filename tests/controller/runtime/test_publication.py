"""What one step writes: records encoded without validation must still be exactly what
every reader accepts, headers on tombstones included."""

from __future__ import annotations

import json

from assignors import TopicPartition
from controller.core.handoff import Outgoing
from controller.core.plan_records import encode_plan
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER
from controller.wire.records import Assignment, assignment_key, decode


def test_encoded_records_decode_as_the_schema_demands() -> None:
    tp = TopicPartition
    records = [
        Outgoing("b", frozenset({tp("t", 3), tp("a", 1), tp("t", 0)}), frozenset({tp("t", 9)})),
        Outgoing("gone", None),
        Outgoing("c", frozenset(), absent_since=100.0, instance="i-7"),
    ]
    topics = {"b": frozenset({"t", "a"}), "c": frozenset({"t"})}
    out = encode_plan(
        "g", 4, 17, records, topics.get, issued_at=1_700_000_000.0, wall_clock=lambda t: t + 5
    )
    assert [r.key for r in out] == [assignment_key("g", m) for m in ("b", "gone", "c")]
    for r in out:
        assert dict(r.headers) == {GENERATION_HEADER: b"17", EPOCH_HEADER: b"4"}
    b, tombstone, c = out
    assert tombstone.value is None
    assert b.value is not None
    assert c.value is not None
    rb = decode(Assignment, b.value, "test")
    assert rb.partitions == [("a", 1), ("t", 0), ("t", 3)]
    assert rb.revoking == [("t", 9)]
    assert (rb.topics, rb.generation, rb.controller_epoch) == (["a", "t"], 17, 4)
    rc = decode(Assignment, c.value, "test")
    assert (rc.partitions, rc.absent_since, rc.instance) == ([], 105.0, "i-7")


def test_partitions_go_out_sorted_whether_listed_or_not() -> None:
    """``partitions`` is sorted on the wire (docs/protocol.md). A record whose grant the
    reconciler took from the assignor's list is written in that list's order; any other
    is sorted while encoding. Readers sort on decoding, so this reads the raw bytes."""
    tp = TopicPartition
    listed = [tp("a", 1), tp("t", 0), tp("t", 3)]
    records = [
        Outgoing("b", frozenset(listed), listed=listed),
        Outgoing("c", frozenset({tp("t", 3), tp("a", 1), tp("t", 0)})),
    ]
    out = encode_plan("g", 1, 2, records, lambda m: None, issued_at=1.0, wall_clock=float)
    for r in out:
        assert r.value is not None
        assert json.loads(r.value)["partitions"] == [["a", 1], ["t", 0], ["t", 3]]
