"""Where the confluent-kafka binding starts a granted partition: at its commit, or at the
reset policy's end, looked up by the binding itself. librdkafka's own lookup leaves a
partition unfetched for good when its OffsetFetch gets a request-level NOT_COORDINATOR
(confluentinc/librdkafka#5586), which a broker whose ``__consumer_offsets`` is still
being created answers to the first groups that ask: a fresh Kafka of its own."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer

from controller.client.confluent import _Data
from controller.tools import embedded
from tests.brokers import needs_kafka, restartable_broker

pytestmark = [pytest.mark.integration, needs_kafka]

TOPIC = "orders"
PARTITIONS = 4
#: Consumers of groups of their own that start at once, so that some ask a coordinator
#: that is not ready yet (each of them did in about half the runs without the fix).
FIRST_GROUPS = 8


async def _topic_with_records(broker: embedded.BrokerProcess, per_partition: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    finally:
        await admin.close()
    await _produce(broker, [str(i) for i in range(per_partition)])


async def _produce(broker: embedded.BrokerProcess, suffixes: list[str]) -> None:
    """``<partition>-<suffix>`` to each partition."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.address)
    await producer.start()
    try:
        for p in range(PARTITIONS):
            for suffix in suffixes:
                await producer.send(TOPIC, f"{p}-{suffix}".encode(), partition=p)
        await producer.flush()
    finally:
        await producer.stop()


def _data(broker: embedded.BrokerProcess, group: str, reset: int) -> _Data:
    return _Data(
        Consumer(
            {
                "bootstrap.servers": broker.address,
                "group.id": group,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        ),
        reset,
    )


def _read(data: _Data, want: int, within: float = 30.0) -> list[bytes]:
    held = frozenset((TOPIC, p) for p in range(PARTITIONS))
    out: list[bytes] = []
    deadline = time.monotonic() + within
    while len(out) < want and time.monotonic() < deadline:
        batch, _ = data.fetch(0.2, 100, held)
        out += [m.value() or b"" for m in batch if m.error() is None]
    return out


async def test_the_first_groups_on_a_fresh_broker_read_their_partitions(tmp_path: Path) -> None:
    with restartable_broker(tmp_path) as broker:
        await _topic_with_records(broker, 5)

        def first_use(group: str) -> int:
            data = _data(broker, group, OFFSET_BEGINNING)
            try:
                data.add([(TOPIC, p) for p in range(PARTITIONS)])
                return len(_read(data, 5 * PARTITIONS))
            finally:
                data.close()

        with concurrent.futures.ThreadPoolExecutor(FIRST_GROUPS) as pool:
            read = list(pool.map(first_use, [f"g{i}" for i in range(FIRST_GROUPS)]))
    assert read == [5 * PARTITIONS] * FIRST_GROUPS


async def test_a_grant_starts_at_the_commit_else_at_the_reset_policys_end(
    tmp_path: Path,
) -> None:
    with restartable_broker(tmp_path) as broker:
        await _topic_with_records(broker, 5)
        first = _data(broker, "fleet", OFFSET_BEGINNING)
        first.add([(TOPIC, 0)])
        assert len(_read(first, 5)) == 5
        first.commit({(TOPIC, 0): 3})
        first.close()

        later = _data(broker, "fleet", OFFSET_END)
        try:
            later.add([(TOPIC, p) for p in range(PARTITIONS)])
            # Partition 0 from its commit; the others, never committed, from the end:
            # what arrives in a few seconds is partition 0's last two and nothing else.
            assert sorted(_read(later, 5 * PARTITIONS, within=3.0)) == [b"0-3", b"0-4"]
            await _produce(broker, ["new"])
            assert sorted(_read(later, PARTITIONS)) == [f"{p}-new".encode() for p in range(4)]
        finally:
            later.close()
