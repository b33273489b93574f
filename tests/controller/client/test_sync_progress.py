"""The synchronous bindings report how far they have processed, as the aiokafka binding
does: each held partition's lag in presence (``report_lag``) and offset samples for the
Spark lag job (``offset_samples_topic``). The conformance harness plays the controller."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer

from controller.client.confluent import BallastConsumer
from controller.client.identity import PresenceOptions
from controller.client.kafka_python import BallastKafkaConsumer
from controller.tools import embedded
from controller.tools.conformance.harness import Harness, Setup
from controller.wire.records import OffsetSample, decode

pytestmark = [pytest.mark.integration, pytest.mark.compat]

PER_PARTITION = 10


def _handed_out(member: BallastConsumer | BallastKafkaConsumer) -> list[tuple[int, int]]:
    """One record, as ``(partition, offset)``, or nothing."""
    if isinstance(member, BallastConsumer):
        return [(m.partition() or 0, m.offset() or 0) for m in member.consume(1, 0.2)]
    return [(r.partition, r.offset) for rs in member.poll(200, 1).values() for r in rs]


@pytest.mark.parametrize("binding", ["confluent", "kafka-python"])
async def test_lag_in_presence_and_offset_samples(
    binding: str, kafka: embedded.BrokerProcess, names: tuple[str, str], tmp_path: Path
) -> None:
    group = names[0]
    assignments, heartbeats, samples = f"{group}.a", f"{group}.hb", f"{group}.samples"
    await embedded.create_topics(
        kafka.address, {assignments: 1, heartbeats: 1, samples: 1, f"{group}-data": 4}
    )
    setup = Setup(kafka.address, None, "kafka", assignments, heartbeats, 1, 1, tmp_path)
    h = Harness(setup, [], group)
    await h.open()
    kind = BallastConsumer if binding == "confluent" else BallastKafkaConsumer
    member = kind(
        group,
        h.member,
        [h.topic],
        bootstrap_servers=kafka.address,
        presence=PresenceOptions(via="kafka", heartbeat_topic=heartbeats, heartbeat_interval=0.2),
        assignments_topic=assignments,
        auto_offset_reset="earliest",
        report_lag=True,
        offset_samples_topic=samples,
        sample_interval=0.2,
    )
    done: dict[int, int] = {}
    stop = threading.Event()

    def poll_until_both_partitions_have_one() -> None:
        while not stop.is_set() and len(done) < 2:
            for p, offset in _handed_out(member):
                done[p] = offset + 1

    try:
        await asyncio.to_thread(member.start)
        await h.produce(PER_PARTITION)
        assert await h.until(lambda: any(s.presence for s in h.seen))
        first = next(s.presence for s in h.seen if s.presence)
        await h.grant([0, 1], generation=1, epoch=1, instance=first.instance)
        await asyncio.to_thread(poll_until_both_partitions_have_one)
        expected = sorted((h.topic, p, PER_PARTITION - n) for p, n in done.items())

        def reported() -> bool:
            last = h.last()
            return (
                last is not None
                and last.presence is not None
                and (sorted(last.presence.lag or []) == expected)
            )

        assert await h.until(reported, 30, dead_ends=False), (expected, h.seen[-3:])
        want = {(p, n, PER_PARTITION) for p, n in done.items()}
        got = await _latest_samples(kafka.address, samples, want)
        assert {(s.partition, s.committed, s.log_end) for s in got} == want
        assert {(s.group, s.topic, s.source) for s in got} == {(group, h.topic, "client")}
    finally:
        stop.set()
        await asyncio.to_thread(member.close)
        await h.close()


async def _latest_samples(
    bootstrap: str, topic: str, expected: set[tuple[int, int, int]]
) -> set[OffsetSample]:
    """The latest sample of each partition once they read ``expected`` as
    ``(partition, committed, log_end)`` (bounded: what was latest then, otherwise)."""
    reader = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await reader.start()
    latest: dict[int, OffsetSample] = {}
    try:
        for _ in range(100):
            for records in (await reader.getmany(timeout_ms=100)).values():
                for r in records:
                    sample = decode(OffsetSample, r.value, topic)
                    latest[sample.partition] = sample
            if {(s.partition, s.committed, s.log_end) for s in latest.values()} == expected:
                break
        return set(latest.values())
    finally:
        await reader.stop()
