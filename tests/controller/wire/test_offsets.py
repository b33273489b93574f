"""ListOffsets and OffsetFetch answers read from their bytes, against aiokafka's own
decoder on every version the reader accepts; the requests written as aiokafka writes
them; partitions grouped by leader as one at a time would group them."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition as KafkaTP
from aiokafka.protocol import commit, offset
from hypothesis import given, settings
from hypothesis import strategies as st

from assignors import TopicPartition
from controller.adapters.offsets import by_leader_of
from controller.wire.offsets import (
    Offsets,
    encode_list_offsets,
    encode_offset_fetch,
    read_list_offsets,
    read_offset_fetch,
)
from controller.wire.raw_answers import RawDecodeError

TP = TopicPartition

_topics = st.lists(st.sampled_from(["t", "orders", "ü-x"]), max_size=3, unique=True)
_partitions = st.lists(st.integers(0, 2**31 - 1), max_size=8, unique=True)
_errors = st.sampled_from([0, 0, 0, 6, 3])  # NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION
_offsets = st.one_of(st.integers(-1, 2**63 - 1), st.integers(-(2**63), -2))


@st.composite
def _listed(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(1, 3))
    topics = [
        (name, [(p, draw(_errors), draw(_offsets), draw(_offsets)) for p in draw(_partitions)])
        for name in draw(_topics)
    ]
    head: tuple[Any, ...] = (draw(st.integers(0, 100)),) if version >= 2 else ()
    return version, getattr(offset, f"OffsetResponse_v{version}")(*head, topics).encode()


@st.composite
def _fetched(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(1, 3))
    metadata = st.one_of(st.none(), st.text(max_size=5))
    topics = [
        (name, [(p, draw(_offsets), draw(metadata), draw(_errors)) for p in draw(_partitions)])
        for name in draw(_topics)
    ]
    body: tuple[Any, ...] = (topics,)
    if version >= 2:
        body += (draw(st.sampled_from([0, 0, 14, 16])),)  # COORDINATOR_LOAD, NOT_COORDINATOR
    if version >= 3:
        body = (0, *body)
    return version, getattr(commit, f"OffsetFetchResponse_v{version}")(*body).encode()


def _by_aiokafka(kind: str, version: int, body: bytes) -> Offsets:
    """The same answer through aiokafka's decoder: offsets of the partitions without an
    error, the others failed; so are offsets no broker gives without an error (below 0
    for ListOffsets, below -1, "no commit", for OffsetFetch): they are asked again."""
    lowest = 0 if kind == "list" else -1
    response = getattr(offset if kind == "list" else commit, kind_name(kind, version))
    decoded = response.decode(body).to_object()
    found: dict[TopicPartition, int] = {}
    failed: list[TopicPartition] = []
    for topic in decoded["topics"]:
        for p in topic["partitions"]:
            tp = TP(topic["topic"], p["partition"])
            if p["error_code"] or p["offset"] < lowest:
                failed.append(tp)
            else:
                found[tp] = p["offset"]
    return Offsets(found, failed, decoded.get("error_code", 0) if kind == "fetch" else 0)


def kind_name(kind: str, version: int) -> str:
    return f"OffsetResponse_v{version}" if kind == "list" else f"OffsetFetchResponse_v{version}"


@settings(max_examples=300, deadline=None)
@given(response=_listed())
def test_list_offsets_read_as_aiokafka_reads_them(response: tuple[int, bytes]) -> None:
    version, body = response
    assert read_list_offsets(version, body) == _by_aiokafka("list", version, body)


@settings(max_examples=300, deadline=None)
@given(response=_fetched())
def test_committed_offsets_read_as_aiokafka_reads_them(response: tuple[int, bytes]) -> None:
    version, body = response
    assert read_offset_fetch(version, body) == _by_aiokafka("fetch", version, body)


@settings(max_examples=200, deadline=None)
@given(listed=_listed(), fetched=_fetched(), cut=st.integers(1, 30))
def test_a_truncated_or_overlong_answer_is_an_error_not_a_wrong_reading(
    listed: tuple[int, bytes], fetched: tuple[int, bytes], cut: int
) -> None:
    for read, (version, body) in ((read_list_offsets, listed), (read_offset_fetch, fetched)):
        with pytest.raises(RawDecodeError):
            read(version, body[: max(0, len(body) - cut)])
        with pytest.raises(RawDecodeError):
            read(version, body + b"\x00")


def test_versions_it_does_not_read_are_refused() -> None:
    """ListOffsets v0 answers a list of offsets per partition (Kafka before 0.10.1):
    the caller asks aiokafka instead."""
    body = offset.OffsetResponse_v0([("t", [(0, 0, [5])])]).encode()
    with pytest.raises(RawDecodeError, match="version 0"):
        read_list_offsets(0, body)
    with pytest.raises(RawDecodeError, match="version 4"):
        read_offset_fetch(4, b"")


@settings(max_examples=200, deadline=None)
@given(
    version=st.integers(1, 3),
    asked=st.lists(
        st.tuples(
            st.sampled_from(["t", "orders", "ü-x"]),
            st.lists(st.tuples(st.integers(0, 2**31 - 1), st.sampled_from([-1, -2]))),
        ),
        max_size=3,
    ),
)
def test_a_list_offsets_request_is_written_as_aiokafka_writes_it(
    version: int, asked: list[tuple[str, list[tuple[int, int]]]]
) -> None:
    request = getattr(offset, f"OffsetRequest_v{version}")
    fields: tuple[Any, ...] = (-1, 0, asked) if version >= 2 else (-1, asked)
    assert encode_list_offsets(version, asked) == request(*fields).encode()


@settings(max_examples=200, deadline=None)
@given(
    version=st.integers(1, 3),
    group=st.sampled_from(["g", "fleet-ü"]),
    asked=st.lists(st.tuples(st.sampled_from(["t", "orders", "ü-x"]), _partitions), max_size=3),
)
def test_an_offset_fetch_request_is_written_as_aiokafka_writes_it(
    version: int, group: str, asked: list[tuple[str, list[int]]]
) -> None:
    request = getattr(commit, f"OffsetFetchRequest_v{version}")
    assert encode_offset_fetch(group, asked) == request(group, asked).encode()


@settings(max_examples=200, deadline=None)
@given(
    counts=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 40), max_size=3),
    leaders=st.lists(st.sampled_from([None, -1, 0, 1, 7]), min_size=1, max_size=5),
)
def test_partitions_are_grouped_by_leader_as_one_at_a_time_would(
    counts: dict[str, int], leaders: list[int | None]
) -> None:
    def leader_of(tp: KafkaTP) -> int | None:
        assert type(tp) is KafkaTP  # what aiokafka's cluster metadata is asked with
        at: int = (ord(tp.topic) * 31 + tp.partition * 7) % len(leaders)
        return leaders[at]

    want: dict[int, dict[str, list[tuple[int, int]]]] = {}
    unled: list[TopicPartition] = []
    for topic, count in counts.items():
        for p in range(count):
            leader = leader_of(KafkaTP(topic, p))
            if leader is None or leader < 0:
                unled.append(TP(topic, p))
            else:
                want.setdefault(leader, {}).setdefault(topic, []).append((p, -1))
    assert by_leader_of(counts, leader_of, -1) == (want, unled)
