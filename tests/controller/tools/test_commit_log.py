"""The conformance kit's account of when the broker stored a commit: records of
``__consumer_offsets`` as Kafka writes them parse to the commit they hold, any other bytes
to None (never an exception), and on a real broker a commit made after a moment is told
apart from one made before it."""

from __future__ import annotations

import asyncio
import random
import struct
import time

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from controller.tools import embedded
from controller.tools.conformance.commit_log import Commit, CommitLog, offsets_partition, parse


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return (
        struct.pack(">h", version) + _string(group) + _string(topic) + struct.pack(">i", partition)
    )


def _value(version: int, offset: int, stored_ms: int, metadata: str = "m") -> bytes:
    head = struct.pack(">hq", version, offset)
    if version >= 3:
        head += struct.pack(">i", 7)  # leader epoch
    if version == 4:  # flexible: unsigned varint length + 1, then tagged fields
        meta = bytes([len(metadata) + 1]) + metadata.encode()
        return head + meta + struct.pack(">q", stored_ms) + b"\x00"
    tail = struct.pack(">q", stored_ms)
    if version == 1:
        tail += struct.pack(">q", stored_ms + 86_400_000)  # expiry
    return head + _string(metadata) + tail


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_every_value_version_gives_the_offset_and_the_stored_time(version: int) -> None:
    commit = parse(_key("g", "orders", 3), _value(version, 42, 1_700_000_000_123))
    assert commit == Commit("g", "orders", 3, 42, 1_700_000_000.123)


def test_records_that_are_not_offset_commits_are_none() -> None:
    assert parse(_key("g", "t", 0), None) is None  # a deleted commit
    assert parse(None, _value(3, 1, 1)) is None
    assert parse(_key("g", "t", 0, version=2), _value(3, 1, 1)) is None  # group metadata
    assert parse(_key("g", "t", 0, version=5), _value(3, 1, 1)) is None  # KIP-848 records
    assert parse(_key("g", "t", 0), _value(3, 1, 1)[:-1]) is None  # cut short
    assert parse(_key("g", "t", 0)[:-2], _value(3, 1, 1)) is None


def test_any_bytes_parse_to_a_commit_or_none() -> None:
    rng = random.Random(7)
    good_key, good_value = _key("g", "t", 1), _value(4, 9, 5)
    for _ in range(20_000):
        key = bytearray(good_key if rng.random() < 0.5 else rng.randbytes(rng.randrange(12)))
        value = bytearray(good_value if rng.random() < 0.5 else rng.randbytes(rng.randrange(30)))
        for buf in (key, value):
            if buf and rng.random() < 0.7:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        got = parse(bytes(key), bytes(value))  # raising anything fails the test
        assert got is None or isinstance(got, Commit)


def test_a_group_is_placed_as_kafkas_coordinator_places_it() -> None:
    """Java's String.hashCode: "hello" is 99162322; "polygenelubricants" hashes to
    Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0; "\u00e9t\u00e9" is 227 742."""
    assert offsets_partition("hello", 50) == 99162322 % 50
    assert offsets_partition("polygenelubricants", 50) == 0
    assert offsets_partition("", 50) == 0
    assert offsets_partition("\u00e9t\u00e9", 7) == (233 * 31 * 31 + 116 * 31 + 233) % 7


@pytest.mark.integration
async def test_a_commit_after_a_moment_is_told_from_one_before_it(
    kafka: embedded.BrokerProcess,
) -> None:
    topic = f"commit-log-{time.monotonic_ns()}"
    await embedded.create_topics(kafka.address, {topic: 2})
    log = CommitLog(kafka.address, "judged", probe_topic=topic)
    assert await log.open(30.0)
    member = AIOKafkaConsumer(bootstrap_servers=kafka.address, group_id="judged")
    await member.start()
    member.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    try:
        await member.commit({TopicPartition(topic, 0): OffsetAndMetadata(5, "")})
        moment = time.time()
        assert log.skew is not None
        # What the kit promises: a commit made more than the clocks' bound (its width, and
        # the broker's whole milliseconds) after a moment is seen as after it. A commit
        # closer to it may go either way: on a loaded machine the width is tens of ms.
        await asyncio.sleep(log.skew[1] - log.skew[0] + 0.002)
        await member.commit({TopicPartition(topic, 1): OffsetAndMetadata(8, "")})
        for _ in range(100):
            if len(log.commits) == 2:
                break
            await asyncio.sleep(0.05)
        assert [(c.partition, c.offset) for c in log.commits] == [(0, 5), (1, 8)]
        assert log.skew is not None
        assert log.skew[0] <= log.skew[1]
        assert log.stored_after(topic, 0, moment) == []
        assert [c.offset for c in log.stored_after(topic, 1, moment)] == [8]
    finally:
        await member.stop()
        await log.close()
