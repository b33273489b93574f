"""The lag poll's offsets, read from the answers' bytes, against a real broker: the same
as aiokafka's own calls give, and a partition the fast read cannot answer is asked
again through aiokafka."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.partitioner import DefaultPartitioner

from assignors import TopicPartition
from controller.adapters import offsets as adapter_offsets
from controller.runtime import offsets_reader
from controller.runtime.offsets_reader import OffsetReader
from controller.runtime.samples import SamplePublisher
from controller.tools import embedded
from controller.wire.offsets import Offsets, PartitionOffsets
from controller.wire.raw_answers import RawDecodeError
from tests.brokers import make_config, read_records, records_and_commits

pytestmark = [pytest.mark.integration, pytest.mark.compat]

TP = TopicPartition


def _expected(topic: str) -> dict[TopicPartition, PartitionOffsets]:
    want = {TP(topic, p): PartitionOffsets(None, 0, 0) for p in range(12)}
    want[TP(topic, 0)] = PartitionOffsets(10, 30, 0)
    want[TP(topic, 1)] = PartitionOffsets(5, 5, 0)
    return want


class _SlowPath:
    """Records what reaches aiokafka's own offset calls (they still run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: list[tuple[str, list[KafkaTP]]] = []
        for name in ("end_offsets", "beginning_offsets"):
            monkeypatch.setattr(
                AIOKafkaConsumer, name, self._wrap(name, getattr(AIOKafkaConsumer, name))
            )

    def _wrap(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        async def recorded(consumer: AIOKafkaConsumer, partitions: list[KafkaTP]) -> Any:
            self.asked.append((name, sorted(partitions)))
            return await call(consumer, partitions)

        return recorded


async def test_the_offsets_read_from_the_answers_are_aiokafkas(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = names[0]
    await records_and_commits(kafka.address, group, topic)
    slow = _SlowPath(monkeypatch)
    reader = OffsetReader(make_config(kafka, mqtt, group), group)
    await reader.start()
    try:
        assert await reader.offsets({topic: 12}, with_start=True) == _expected(topic)
        assert await reader.offsets({topic: 12, "": 0}, with_start=False) == {
            tp: o._replace(log_start=None) for tp, o in _expected(topic).items()
        }
    finally:
        await reader.stop()
    assert slow.asked == []  # every answer was read from its bytes


@pytest.mark.parametrize("fault", ["partition_errors", "unreadable"])
async def test_what_the_fast_read_cannot_answer_is_asked_again_through_aiokafka(
    *,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    """A partition answered with an error (a leader that moved, a coordinator loading)
    or an answer this cannot read (a broker speaking ListOffsets v0): the poll still
    gives every partition's offsets, through aiokafka's calls for those."""
    group = names[0]
    await records_and_commits(kafka.address, group, topic)
    hit = [TP(topic, 0), TP(topic, 7)]
    listed, fetched = adapter_offsets.list_offsets, adapter_offsets.committed_offsets

    def faulty(got: Offsets) -> Offsets:
        if fault == "unreadable":
            raise RawDecodeError("ListOffsets version 0: only 1-3 are read")
        found = {tp: o for tp, o in got.found.items() if tp not in hit}
        return Offsets(found, [*got.failed, *hit], got.error)

    async def faulty_listed(*args: Any) -> Offsets:
        return faulty(await listed(*args))

    async def faulty_fetched(*args: Any) -> Offsets:
        return faulty(await fetched(*args))

    monkeypatch.setattr(offsets_reader, "list_offsets", faulty_listed)
    monkeypatch.setattr(offsets_reader, "committed_offsets", faulty_fetched)
    slow = _SlowPath(monkeypatch)
    reader = OffsetReader(make_config(kafka, mqtt, group), group)
    await reader.start()
    try:
        assert await reader.offsets({topic: 12}, with_start=True) == _expected(topic)
    finally:
        await reader.stop()
    every = sorted(KafkaTP(topic, p) for p in range(12))
    assert [name for name, _ in slow.asked] == ["end_offsets", "beginning_offsets"]
    for name, asked in slow.asked:
        if fault == "unreadable":
            assert asked == every, name
        else:
            # The two the fault hid, and any the real broker failed too under load
            # (a two-worker run saw 10 and 11 fail as well).
            assert {KafkaTP(topic, 0), KafkaTP(topic, 7)} <= set(asked) <= set(every), name


async def test_samples_written_right_after_start_reach_the_topic(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """A producer's refreshes ask only about the topic it tracks; one that tracked the
    assignments topic while writing samples lost the samples topic's leaders at its
    first refresh (learnt from Tansu's bootstrap, never asked about), and its first
    publication timed out (aiokafka: NotLeaderForPartitionError after the request
    timeout, 3 s here)."""
    group, samples = names[0], f"samples-{names[0]}"
    await embedded.create_topics(kafka.address, {samples: 4})
    cfg = make_config(kafka, mqtt, group)
    cfg = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update={"request_timeout": 3.0})})
    publisher = SamplePublisher(cfg, samples)
    await publisher.start()
    try:
        # At once: the refresh that tracking asked for lands while this publication runs.
        offsets = {TP("t", p): PartitionOffsets(None, p, None) for p in range(20)}
        assert await publisher.publish(group, offsets, 1.0) == []
    finally:
        await publisher.stop()


async def test_samples_of_two_groups_reading_one_topic_land_where_their_keys_go(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """The publisher remembers where each sampled partition's key went; two groups
    sampling the same partitions have different keys, so neither may reuse the other's
    places (a key written elsewhere than the Java partitioner puts it leaves two latest
    samples of one key after compaction)."""
    samples = f"samples-{names[1]}"
    await embedded.create_topics(kafka.address, {samples: 8})
    publisher = SamplePublisher(make_config(kafka, mqtt, names[0]), samples)
    await publisher.start()
    offsets = {TP("orders", p): PartitionOffsets(p, p, None) for p in range(40)}
    try:
        for group in names:
            assert await publisher.publish(group, offsets, 1.0) == []
    finally:
        await publisher.stop()
    landed = {key: part for part, key, _ in await read_records(kafka.address, samples, 80)}
    every = list(range(8))
    assert landed == {key: DefaultPartitioner()(key, every, every) for key in landed}
