"""The Spark source's Kafka clients against Tansu, called as Spark calls them (without
Spark): what a micro-batch costs the cluster's metadata."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.metadata import MetadataRequest

from controller.tools import embedded

pytest.importorskip("pyspark", reason="the pipeline extra is not installed")

from pipeline.kafka_source import KafkaOptions, KafkaStreamReader, OffsetRange, _run, read_range

pytestmark = pytest.mark.integration


async def _three_records(address: str, topic: str) -> None:
    await embedded.create_topics(address, {topic: 2})
    producer = AIOKafkaProducer(bootstrap_servers=address)
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topic, f"{i}".encode(), partition=0)
    finally:
        await producer.stop()


def test_a_batch_never_asks_about_every_topic_of_the_cluster(
    kafka: embedded.BrokerProcess, names: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning a batch and reading a range each end with their consumer assigned
    nothing, which makes aiokafka refresh its metadata about every topic of the cluster
    (``controller/adapters/metadata_scope.py``): per batch and per partition read, seconds
    of decoding in a large cluster. Every Metadata request the source sends is recorded."""
    topic = names[1]
    asyncio.run(_three_records(kafka.address, topic))
    asked: list[list[str] | None] = []
    send = AIOKafkaConnection.send

    def recording_send(self: AIOKafkaConnection, request: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(request, MetadataRequest):
            asked.append(request._topics)
        return send(self, request, *args, **kw)

    monkeypatch.setattr(AIOKafkaConnection, "send", recording_send)
    opts = KafkaOptions.parse(
        # Its own client id: the source caches clients per connection settings.
        {"kafka.bootstrap.servers": kafka.address, "kafka.client.id": topic, "subscribe": topic},
        reading=True,
    )
    ends = KafkaStreamReader(opts)._high_watermarks()
    assert ends == {topic: {"0": 3, "1": 0}}
    batches = _run(read_range(opts, OffsetRange(topic, 0, 0, 3)))
    assert sum(b.num_rows for b in batches) == 3
    _run(asyncio.sleep(0.5))  # the refreshes that assign([]) asked for run here
    assert any(asked), asked  # the recording saw the source's requests
    assert [t for t in asked if t is None] == []


#: A process that reads through the source's cached clients, then exits.
_READS_AND_EXITS = """
import sys, warnings
warnings.simplefilter("always")
from pipeline.kafka_source import KafkaOptions, KafkaStreamReader
bootstrap, topic = sys.argv[1:3]
opts = KafkaOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, reading=True)
print(KafkaStreamReader(opts)._high_watermarks())
"""


def test_the_cached_clients_are_closed_when_the_process_exits(
    kafka: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """The source keeps one client per configuration for the process's life; at its exit
    they are closed (aiokafka reports a client collected unclosed, and its connections
    were dropped rather than ended)."""
    topic = names[1]
    asyncio.run(_three_records(kafka.address, topic))
    done = subprocess.run(
        [sys.executable, "-c", _READS_AND_EXITS, kafka.address, topic],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert f"'{topic}'" in done.stdout  # it read through the clients
    assert "Unclosed" not in done.stderr, done.stderr
