"""A reader of one of Ballast's topics waits for it to appear in the cluster's metadata:
Apache Kafka answers a Metadata request without a topic for a moment after CreateTopics
(``ballast run`` on Kafka 4.4 stopped at start with "No partitions are currently
assigned" when its recovery reader asked too soon)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition as KafkaTP

from controller.errors import UnreachableError
from controller.runtime import assignment_log
from controller.runtime.assignment_log import assigned_reader
from controller.tools import embedded


async def test_a_reader_waits_for_a_topic_that_appears_late(kafka: embedded.BrokerProcess) -> None:
    async def create_later() -> None:
        await asyncio.sleep(1.0)
        await embedded.create_topics(kafka.address, {"appears-late": 3})

    later = asyncio.create_task(create_later())
    consumer, tps = await assigned_reader({"bootstrap_servers": kafka.address}, "appears-late", "t")
    await later
    await consumer.stop()
    assert tps == [KafkaTP("appears-late", p) for p in range(3)]


async def test_a_topic_that_never_appears_is_named(
    kafka: embedded.BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(assignment_log, "TOPIC_WAIT", 0.5)
    with pytest.raises(UnreachableError, match=r"'never-made'.* after 0\.5 s"):
        await assigned_reader({"bootstrap_servers": kafka.address}, "never-made", "t")
