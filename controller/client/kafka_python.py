"""``BallastKafkaConsumer``: Ballast's member for kafka-python, for synchronous code.
Install with ``pip install 'ballast[kafka-python]'``; importing it loads neither aiokafka
nor confluent-kafka nor the daemon.

It looks like kafka-python's ``KafkaConsumer`` with manual assignment: ``poll()``
returns ``{TopicPartition: [ConsumerRecord, ...]}``, and Ballast decides the partitions.
A change takes effect inside the next ``poll()``: on revoke the consumer commits what it
returned before, calls ``on_partitions_revoked``, ``assign()``s what remains (kafka-python
keeps the positions of partitions it still holds) and only then acknowledges; new
partitions start from their commits (or ``auto_offset_reset``). kafka-python's consumer
is not thread-safe: ``SyncMember`` only touches it from the polling thread, or from its
watchdog while no poll runs (one lock).

    with BallastKafkaConsumer("orders-fleet", "pod-7", ["orders"],
                              bootstrap_servers="kafka:9092",
                              presence=PresenceOptions(mqtt_host="mqtt")) as consumer:
        while True:
            for tp, records in consumer.poll(timeout_ms=1000).items():
                for record in records:
                    handle(record)
            consumer.commit()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndMetadata

from controller.client.failure import MemberFailedError
from controller.client.grants import Partition, RawRecord
from controller.client.identity import PresenceOptions
from controller.client.sync_binding import Clients, ClientSettings, SyncBinding
from controller.wire.assignments import READ_ISOLATION
from controller.wire.signing import Header

#: How long a broker request of ours may take (s).
REQUEST_TIMEOUT = 10.0

__all__ = ["BallastKafkaConsumer", "MemberFailedError", "PresenceOptions"]


class BallastKafkaConsumer(SyncBinding[ConsumerRecord]):
    """``kafka_config`` and ``consumer_config`` take kafka-python's setting names."""

    def _clients(self, settings: ClientSettings) -> Clients[ConsumerRecord]:
        s = settings
        common = {"bootstrap_servers": s.bootstrap_servers, **s.kafka_config}
        rack = s.identity.rack
        data = KafkaConsumer(
            **common,
            group_id=s.commit_group,  # commits only: it never subscribes
            enable_auto_commit=False,
            auto_offset_reset=s.auto_offset_reset,
            **({"client_rack": rack} if rack is not None else {}),
            **s.consumer_config,
        )
        return Clients(_Data(data), _Log(common), lambda: _Heartbeats(common))

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Like ``KafkaConsumer.poll``; raises ``MemberFailedError`` after a fail-stop."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in self._member.poll(timeout_ms / 1000, max_records or 500):
            out.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        return out


class _Heartbeats:
    def __init__(self, common: Mapping[str, Any]) -> None:
        self._producer = KafkaProducer(**common, linger_ms=0)

    def send(
        self, topic: str, key: bytes, value: bytes | None, headers: Sequence[Header] = ()
    ) -> None:
        sent = self._producer.send(topic, value=value, key=key, headers=list(headers))
        sent.get(timeout=REQUEST_TIMEOUT)

    def close(self) -> None:
        self._producer.close(timeout=REQUEST_TIMEOUT)


class _Data:
    """The application's consumer: assigned by hand, committed synchronously."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self._consumer = consumer

    def fetch(
        self, timeout: float, max_records: int, held: frozenset[Partition]
    ) -> tuple[list[ConsumerRecord], dict[Partition, int]]:
        batch = self._consumer.poll(timeout_ms=round(timeout * 1000), max_records=max_records)
        out: list[ConsumerRecord] = []
        positions = {}
        for tp, records in batch.items():
            if records and (tp.topic, tp.partition) in held:
                out += records
                positions[tp.topic, tp.partition] = records[-1].offset + 1
        return out, positions

    def add(self, partitions: Sequence[Partition]) -> None:
        held = set(self._consumer.assignment())
        self._consumer.assign(sorted(held | {TopicPartition(t, p) for t, p in partitions}))

    def remove(self, partitions: Sequence[Partition]) -> None:
        gone = {TopicPartition(t, p) for t, p in partitions}
        self._consumer.assign(sorted(set(self._consumer.assignment()) - gone))

    def log_end(self, partition: Partition) -> int | None:
        try:
            high: int | None = self._consumer.highwater(TopicPartition(*partition))
        except (AssertionError, KeyError):  # unassigned meanwhile, on the poll thread
            return None
        return high

    def commit(self, offsets: Mapping[Partition, int]) -> None:
        self._consumer.commit(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
        )

    def close(self) -> None:
        self._consumer.close(autocommit=False)


class _Log:
    """One partition of the assignments topic, from its start, committed transactions
    only; no group id (it never commits)."""

    def __init__(self, common: Mapping[str, Any]) -> None:
        self._consumer = KafkaConsumer(
            **common,
            enable_auto_commit=False,
            isolation_level=READ_ISOLATION,
            fetch_max_wait_ms=500,
        )
        self._tp: TopicPartition | None = None

    def partition_count(self, topic: str) -> int | None:
        parts = self._consumer.partitions_for_topic(topic)
        return len(parts) if parts else None

    def open(self, topic: str, partition: int) -> None:
        self._tp = TopicPartition(topic, partition)
        self._consumer.assign([self._tp])
        self._consumer.seek_to_beginning(self._tp)

    def end_offset(self) -> int:
        assert self._tp is not None
        return int(self._consumer.end_offsets([self._tp])[self._tp])

    def position(self) -> int:
        assert self._tp is not None
        return int(self._consumer.position(self._tp))

    def read(self, timeout: float) -> list[RawRecord]:
        batch = self._consumer.poll(timeout_ms=round(timeout * 1000), max_records=500)
        return [
            RawRecord(r.topic, r.partition, r.offset, r.key, r.value, list(r.headers or []))
            for records in batch.values()
            for r in records
        ]

    def close(self) -> None:
        self._consumer.close(autocommit=False)
