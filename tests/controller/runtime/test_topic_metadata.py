"""Partition counts and replica racks from one Metadata response: a cluster's
``broker.rack`` values become each partition's replica racks, as Kafka's clients read them
for KIP-881."""

from __future__ import annotations

import threading

import pytest
from aiokafka.protocol.metadata import MetadataResponse_v1

from assignors import TopicPartition
from controller.runtime import kafka_io
from controller.runtime.kafka_io import OffsetReader, read_topic_metadata
from controller.tools import embedded
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
    response = MetadataResponse_v1(brokers, 1, topics).to_object()
    meta = read_topic_metadata(response)
    assert meta.counts == {"orders": 3}
    assert meta.racks == {
        TP("orders", 0): frozenset({"az-a", "az-c"}),
        TP("orders", 1): frozenset(),  # broker 2 has no rack, broker 3's cannot be matched
        TP("orders", 2): frozenset({"az-a", "az-c"}),
    }
    assert meta.unusable_racks == ["az b"]


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


async def test_the_metadata_response_is_decoded_off_the_event_loop(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One entry per partition: at 100 000 partitions decoding it in the event loop held
    every group's loop for ~0.9 s. The connection hands it over undecoded, and it is
    decoded in a worker thread."""
    decoded_in: list[threading.Thread] = []
    read = kafka_io._Undecoded.read

    def spy(self: kafka_io._Undecoded) -> kafka_io.TopicMetadata:
        decoded_in.append(threading.current_thread())
        return read(self)

    monkeypatch.setattr(kafka_io._Undecoded, "read", spy)
    reader = OffsetReader(make_config(kafka, mqtt, names[0]), names[0])
    await reader.start()
    try:
        assert (await reader.topic_metadata([topic])).counts == {topic: 12}
    finally:
        await reader.stop()
    assert len(decoded_in) == 1
    assert decoded_in[0] is not threading.main_thread()


@pytest.mark.parametrize("rack", ["", "\x00"])
def test_empty_or_control_character_racks_are_reported_not_used(rack: str) -> None:
    response = MetadataResponse_v1([(1, "h", 1, rack)], 1, [(0, "t", False, [(0, 0, 1, [1], [1])])])
    meta = read_topic_metadata(response.to_object())
    assert meta.racks == {TP("t", 0): frozenset()}
    assert meta.unusable_racks == [rack]
