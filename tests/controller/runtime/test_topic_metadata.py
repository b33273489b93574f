"""Partition counts and replica racks from one Metadata response: a cluster's
``broker.rack`` values become each partition's replica racks, as Kafka's clients read them
for KIP-881."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol import metadata as protocol
from aiokafka.protocol.metadata import MetadataResponse_v1
from hypothesis import given, settings
from hypothesis import strategies as st

from assignors import TopicPartition, valid_rack
from controller.adapters import metadata as adapter_metadata
from controller.adapters.undecoded import Undecoded
from controller.runtime.offsets_reader import OffsetReader
from controller.tools import embedded
from controller.wire.metadata import MetadataDecodeError, TopicMetadata, read_metadata
from tests.brokers import make_config

TP = TopicPartition


def test_replica_racks_come_from_the_brokers_that_hold_each_partition() -> None:
    brokers = [
        (1, "h", 9092, "az-a"),
        (2, "h", 9093, None),
        (3, "h", 9094, "az b"),
        (4, "h", 1, "az-c"),
    ]
    topics = [
        # error, topic, internal, [(error, partition, leader, replicas, isr)]
        (
            0,
            "orders",
            False,
            [(0, 0, 1, [1, 4], [1]), (0, 1, 2, [2, 3], [2]), (0, 2, 4, [4, 1, 2], [4])],
        ),
        (3, "missing", False, []),  # UNKNOWN_TOPIC_OR_PARTITION
    ]
    meta = read_metadata(1, MetadataResponse_v1(brokers, 1, topics).encode())
    assert meta.counts == {"orders": 3}
    assert meta.racks == {
        TP("orders", 0): frozenset({"az-a", "az-c"}),
        TP("orders", 1): frozenset(),  # broker 2 has no rack, broker 3's cannot be matched
        TP("orders", 2): frozenset({"az-a", "az-c"}),
    }
    assert meta.unusable_racks == ["az b"]


@pytest.mark.compat
async def test_a_live_cluster_gives_counts_and_no_racks_without_broker_rack(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
) -> None:
    cfg = make_config(kafka, mqtt, names[0])
    reader = OffsetReader(cfg, names[0])
    await reader.start()
    try:
        meta = await reader.topic_metadata([topic, f"{topic}-absent"])
        assert meta.counts == {topic: 12}
        assert meta.racks == {TP(topic, p): frozenset() for p in range(12)}
        assert meta.unusable_racks == []
        # Naming a topic in the request did not create it.
        again = await reader.topic_metadata([f"{topic}-absent"])
        assert again.counts == {}
        assert (await reader.topic_metadata([])).counts == {}
    finally:
        await reader.stop()


@pytest.mark.compat
async def test_the_readers_answers_are_read_off_the_controllers_event_loop(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Metadata, OffsetFetch and ListOffsets answers name every partition, and aiokafka
    decodes them where it reads them: at 100 000 partitions a Metadata answer held every
    group's loop for ~0.9 s, a lag poll's for up to 1.1 s. The reader's clients run on
    a loop of their own thread (``side_loop``), so no answer is read on the caller's
    thread; a Metadata answer is handed over undecoded and decoded in a worker thread;
    the reader's thread ends with it."""
    side = f"ballast-offsets-{names[0]}"
    read_on: set[str] = set()
    decoded_in: list[str] = []
    handle, read = AIOKafkaConnection._handle_frame, adapter_metadata._read_paused

    def reading(self: AIOKafkaConnection, resp: bytes) -> Any:
        read_on.add(threading.current_thread().name)
        return handle(self, resp)

    def decoding(response: Undecoded) -> TopicMetadata:
        decoded_in.append(threading.current_thread().name)
        return read(response)

    monkeypatch.setattr(AIOKafkaConnection, "_handle_frame", reading)
    monkeypatch.setattr(adapter_metadata, "_read_paused", decoding)
    reader = OffsetReader(make_config(kafka, mqtt, names[0]), names[0])
    await reader.start()
    try:
        counts: dict[str, int] = {}
        for _ in range(50):  # a topic just created can be missing from a broker's first answer
            counts = dict((await reader.topic_metadata([topic])).counts)
            if counts:
                break
            await asyncio.sleep(0.2)
        assert counts == {topic: 12}
        offsets = await reader.offsets({topic: 12}, with_start=True)
        assert sorted(offsets) == [TP(topic, p) for p in range(12)]
        assert {(o.committed, o.log_end, o.log_start) for o in offsets.values()} == {(None, 0, 0)}
    finally:
        await reader.stop()
    assert read_on == {side}
    assert decoded_in  # the reader's start-up lookup and the test's
    assert not set(decoded_in) & {side, threading.main_thread().name}
    assert side not in {t.name for t in threading.enumerate()}


@pytest.mark.parametrize("rack", ["", "\x00"])
def test_empty_or_control_character_racks_are_reported_not_used(rack: str) -> None:
    response = MetadataResponse_v1([(1, "h", 1, rack)], 1, [(0, "t", False, [(0, 0, 1, [1], [1])])])
    meta = read_metadata(1, response.encode())
    assert meta.racks == {TP("t", 0): frozenset()}
    assert meta.unusable_racks == [rack]


def _by_aiokafka(version: int, body: bytes) -> TopicMetadata:
    """What the controller read before it decoded the bytes itself: aiokafka's decoder,
    then every partition's replica racks from the brokers' ``rack``."""
    response = getattr(protocol, f"MetadataResponse_v{version}").decode(body).to_object()
    rack_of: dict[int, str] = {}
    unusable: set[str] = set()
    for broker in response["brokers"]:
        rack = broker.get("rack")
        if rack is not None and valid_rack(rack):
            rack_of[broker["node_id"]] = rack
        elif rack is not None:
            unusable.add(rack)
    counts: dict[str, int] = {}
    replicas: dict[str, int] = {}
    racks: dict[TopicPartition, frozenset[str]] = {}
    for meta in response["topics"]:
        if meta["error_code"] == 0:
            counts[meta["topic"]] = len(meta["partitions"])
            first = (meta["partitions"][0]["replicas"] or []) if meta["partitions"] else []
            replicas[meta["topic"]] = len(first)
            for p in meta["partitions"]:
                named = frozenset(rack_of[n] for n in p["replicas"] if n in rack_of)
                racks[TP(meta["topic"], p["partition"])] = named
    return TopicMetadata(counts, racks, sorted(unusable), len(response["brokers"]), replicas)


_nodes = st.integers(0, 6)
_racks = st.one_of(st.none(), st.sampled_from(["az-a", "az-b", "a z", "", "zone-ü"]))
_ints = st.lists(_nodes, max_size=4)


@st.composite
def _responses(draw: st.DrawFn) -> tuple[int, bytes]:
    """A Metadata response of any version aiokafka asks for, encoded by aiokafka."""
    version = draw(st.integers(0, 5))
    brokers = []
    for node in draw(st.lists(_nodes, max_size=5, unique=True)):
        broker: tuple[Any, ...] = (node, "host", 9092)
        brokers.append((*broker, draw(_racks)) if version >= 1 else broker)
    topics = []
    for name in draw(st.lists(st.sampled_from(["t", "orders", "ü-x"]), max_size=3, unique=True)):
        partitions = []
        for index in draw(st.lists(st.integers(0, 40), max_size=6, unique=True)):
            part: tuple[Any, ...] = (0, index, 1, draw(_ints), draw(_ints))
            partitions.append((*part, draw(_ints)) if version >= 5 else part)
        error = draw(st.sampled_from([0, 0, 3]))
        topics.append(
            (error, name, False, partitions) if version >= 1 else (error, name, partitions)
        )
    head: tuple[Any, ...] = (brokers,)
    if version >= 2:
        head += (draw(st.one_of(st.none(), st.just("cluster"))),)
    if version >= 1:
        head += (1,)
    if version >= 3:
        head = (0, *head)
    response = getattr(protocol, f"MetadataResponse_v{version}")(*head, topics)
    return version, response.encode()


@settings(max_examples=300, deadline=None)
@given(response=_responses())
def test_the_bytes_read_as_aiokafkas_decoder_reads_them(response: tuple[int, bytes]) -> None:
    version, body = response
    assert read_metadata(version, body) == _by_aiokafka(version, body)


@settings(max_examples=200, deadline=None)
@given(response=_responses(), cut=st.integers(1, 40))
def test_a_truncated_response_is_an_error_not_a_wrong_reading(
    response: tuple[int, bytes], cut: int
) -> None:
    version, body = response
    with pytest.raises(MetadataDecodeError):
        read_metadata(version, body[: max(0, len(body) - cut)])
    with pytest.raises(MetadataDecodeError):
        read_metadata(version, body + b"\x00")


@pytest.mark.compat
async def test_the_test_tool_makes_a_topic_larger_than_one_request_on_either_broker(
    kafka: embedded.BrokerProcess, names: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Apache Kafka gets the topic a request's worth at a time and grows it; Tansu, which
    has no CreatePartitions, gets it whole (the benchmarks' 100 000-partition topics)."""
    monkeypatch.setattr(embedded, "PARTITIONS_PER_REQUEST", 3)
    topic = f"big-{names[0]}"
    await embedded.create_topics(kafka.address, {topic: 7})
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    try:
        deadline = asyncio.get_running_loop().time() + 30  # grown partitions show up late
        while (await adapter_metadata.topic_metadata(admin, [topic])).counts.get(topic) != 7:
            assert asyncio.get_running_loop().time() < deadline, "never 7 partitions"
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
