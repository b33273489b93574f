"""``BallastConsumer``: Ballast's member for confluent-kafka (librdkafka), for synchronous
code. Install with ``pip install 'ballast[confluent]'``; importing it loads neither
aiokafka nor the daemon.

It looks like confluent-kafka's ``Consumer`` with manual assignment: ``poll()`` and
``consume()`` return ``Message`` objects (check ``msg.error()`` as usual), and Ballast
decides the partitions. A change takes effect inside the next ``poll()``/``consume()``:
on revoke the consumer commits what it returned before (the application has processed
it: it asked for more), calls ``on_partitions_revoked``, ``incremental_unassign()``s, and
only then acknowledges; on grant it ``incremental_assign()``s from the committed offsets
(or ``auto_offset_reset``). The rules are ``SyncMember``'s, shared with every binding.

    with BallastConsumer("orders-fleet", "pod-7", ["orders"],
                         bootstrap_servers="kafka:9092",
                         presence=PresenceOptions(mqtt_host="mqtt")) as consumer:
        while True:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                handle(msg)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from controller import logs
from controller.client.failure import MemberFailedError
from controller.client.grants import Partition, RawRecord
from controller.client.identity import PresenceOptions
from controller.client.sync_binding import Clients, ClientSettings, SyncBinding
from controller.errors import CredentialsError
from controller.wire.assignments import READ_ISOLATION
from controller.wire.signing import Header

log = logs.get("ballast.client")

#: How long a broker request of ours may take (s).
REQUEST_TIMEOUT = 10.0
#: How long a grant's lookup of committed offsets retries a coordinator that is moving
#: or loading before the partitions are left to librdkafka's own lookup (s).
COMMITTED_RETRY = 10.0
#: The errors of an OffsetFetch that a later one may not have.
_COORDINATOR_ERRORS = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)
#: How long one metadata request waits before the login's fate is looked at (s).
LOOK_INTERVAL = 0.5
#: What librdkafka reports when a broker refuses the login: no retry mends it.
_REFUSALS = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
#: Where a partition without a commit starts, by librdkafka's ``auto.offset.reset``.
_RESET_TO = {
    "smallest": OFFSET_BEGINNING,
    "earliest": OFFSET_BEGINNING,
    "beginning": OFFSET_BEGINNING,
    "largest": OFFSET_END,
    "latest": OFFSET_END,
    "end": OFFSET_END,
}

__all__ = ["BallastConsumer", "MemberFailedError", "PresenceOptions"]


class BallastConsumer(SyncBinding[Message]):
    """``kafka_config`` and ``consumer_config`` take librdkafka's setting names."""

    def _clients(self, settings: ClientSettings) -> Clients[Message]:
        s = settings
        common = {"bootstrap.servers": s.bootstrap_servers, **s.kafka_config}
        rack = s.identity.rack
        data = {
            **common,
            "group.id": s.commit_group,  # commits only: it never subscribes
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": s.auto_offset_reset,
            **({"client.rack": rack} if rack is not None else {}),
            **s.consumer_config,
        }
        reset = _RESET_TO.get(str(data["auto.offset.reset"]), OFFSET_INVALID)
        return Clients(
            _Data(Consumer(data), reset),
            _Log(common, s.identity.instance, s.bootstrap_servers),
            lambda: _Heartbeats(common),
        )

    def poll(self, timeout: float = 1.0) -> Message | None:
        """One message (or error event), or None; raises ``MemberFailedError`` after a
        fail-stop."""
        got = self._member.poll(timeout, 1)
        return got[0] if got else None

    def consume(self, num_messages: int = 1, timeout: float = 1.0) -> list[Message]:
        return self._member.poll(timeout, num_messages)


class _Heartbeats:
    """librdkafka's producer, one record delivered at a time."""

    def __init__(self, common: Mapping[str, Any]) -> None:
        self._producer = Producer({**common, "linger.ms": 0})

    def send(
        self, topic: str, key: bytes, value: bytes | None, headers: Sequence[Header] = ()
    ) -> None:
        failed: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failed.append(err)

        self._producer.produce(
            topic, value=value, key=key, headers=list(headers), on_delivery=delivered
        )
        if self._producer.flush(REQUEST_TIMEOUT) > 0:
            raise TimeoutError("heartbeat not delivered")
        if failed:
            raise KafkaException(failed[0])

    def close(self) -> None:
        self._producer.flush(REQUEST_TIMEOUT)


class _Data:
    """The application's consumer: assigned by hand, committed synchronously.
    librdkafka keeps the application's position per partition (the offset after the last
    message ``consume()`` returned) and drops what it had fetched for a partition it no
    longer has (``incremental_unassign``): no per-message work here."""

    def __init__(self, consumer: Consumer, reset: int) -> None:
        self._consumer = consumer
        self._reset = reset
        self._held: list[TopicPartition] = []

    def fetch(
        self, timeout: float, max_records: int, held: frozenset[Partition]
    ) -> tuple[list[Message], dict[Partition, int]]:
        batch = self._consumer.consume(max_records, timeout)
        if not batch:
            return batch, {}
        positions = self._consumer.position(self._held)
        return batch, {(tp.topic, tp.partition): tp.offset for tp in positions if tp.offset >= 0}

    def add(self, partitions: Sequence[Partition]) -> None:
        self._consumer.incremental_assign(self._starts(partitions))
        self._held = self._consumer.assignment()

    def _starts(self, partitions: Sequence[Partition]) -> list[TopicPartition]:
        """Each partition at its commit (or the reset policy's end), looked up here
        rather than by the assignment: when librdkafka's own lookup gets a request-level
        NOT_COORDINATOR (a coordinator that moved, ``__consumer_offsets`` still being
        created) it never fetches those partitions and never retries
        (confluentinc/librdkafka#5586); ``committed()`` returns the error, and we retry.
        Past ``COMMITTED_RETRY`` the partitions go to librdkafka's lookup after all: a
        grant is never dropped."""
        asked = [TopicPartition(t, p) for t, p in partitions]
        deadline = time.monotonic() + COMMITTED_RETRY
        while True:
            error = None
            try:
                found = self._consumer.committed(asked, timeout=REQUEST_TIMEOUT)
                error = next((tp.error for tp in found if tp.error is not None), None)
            except KafkaException as exc:
                error = exc.args[0]
            if error is None:
                break
            if error.code() not in _COORDINATOR_ERRORS or time.monotonic() > deadline:
                log.warning("committed_offsets_not_read", error=str(error))
                return asked
            time.sleep(0.1)
        for tp in found:
            if tp.offset < 0:
                tp.offset = self._reset
        return found

    def remove(self, partitions: Sequence[Partition]) -> None:
        self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in partitions])
        self._held = self._consumer.assignment()

    def log_end(self, partition: Partition) -> int | None:
        # librdkafka updates its cached high watermark from every fetch response.
        _, high = self._consumer.get_watermark_offsets(TopicPartition(*partition), cached=True)
        return high if high >= 0 else None

    def commit(self, offsets: Mapping[Partition, int]) -> None:
        done = self._consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
        for tp in done or []:
            if tp.error is not None:
                raise KafkaException(tp.error)

    def close(self) -> None:
        self._consumer.close()


class _Log:
    """One partition of the assignments topic, from its start, committed transactions
    only. librdkafka wants a group id even for a reader that never commits. It is the
    member's first client to reach Kafka, so it tells a refused login (``error_cb``)
    from a broker not up yet."""

    def __init__(self, common: Mapping[str, Any], instance: str, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._refusal: str | None = None
        self._consumer = Consumer(
            {
                **common,
                "error_cb": self._on_error,
                "group.id": f"ballast-reader-{instance}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": READ_ISOLATION,
                "fetch.wait.max.ms": 500,
                # The end of the partition as an event: past a transaction's commit
                # marker, which no message shows, the end is beyond the last record.
                "enable.partition.eof": True,
            }
        )
        self._tp: TopicPartition | None = None
        self._next = 0

    def _on_error(self, err: KafkaError) -> None:
        """Keeps the first refusal: the later errors are its consequences."""
        if self._refusal is not None:
            return
        text = str(err.str())
        if err.code() in _REFUSALS:
            self._refusal = f"the SASL login was refused ({text[:200]})"
        elif err.code() == KafkaError._SSL and "verify failed" in text:
            self._refusal = f"the broker's TLS certificate did not verify ({text[:200]})"

    def partition_count(self, topic: str) -> int | None:
        """``CredentialsError`` as soon as librdkafka reports a refused login (within a
        ``LOOK_INTERVAL`` of it), instead of its transport error ``REQUEST_TIMEOUT`` later."""
        deadline = time.monotonic() + REQUEST_TIMEOUT
        while True:
            try:
                listed = self._consumer.list_topics(topic, timeout=LOOK_INTERVAL)
                break
            except KafkaException:
                self._consumer.poll(0)  # serves error_cb
                if self._refusal is not None:
                    raise CredentialsError(
                        f"Kafka at {self._bootstrap}: {self._refusal}: check kafka_config "
                        "(sasl.username, sasl.password, ssl.ca.location)"
                    ) from None
                if time.monotonic() > deadline:
                    raise
        meta = listed.topics.get(topic)
        if meta is None or meta.error is not None:
            return None
        return len(meta.partitions) or None

    def open(self, topic: str, partition: int) -> None:
        self._tp = TopicPartition(topic, partition, OFFSET_BEGINNING)
        self._consumer.assign([self._tp])
        low, _ = self._consumer.get_watermark_offsets(self._tp, timeout=REQUEST_TIMEOUT)
        self._next = low

    def end_offset(self) -> int:
        assert self._tp is not None
        _, high = self._consumer.get_watermark_offsets(self._tp, timeout=REQUEST_TIMEOUT)
        return int(high)

    def position(self) -> int:
        return self._next

    def read(self, timeout: float) -> list[RawRecord]:
        """What has arrived, as soon as anything has: ``consume(n, timeout)`` would wait
        for ``n`` messages or the whole timeout, holding a new grant back."""
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        out = []
        for msg in [first, *self._consumer.consume(499, 0)]:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._next = max(self._next, msg.offset() or 0)
                    continue
                if err.fatal():
                    raise KafkaException(err)
                # librdkafka recovers from the rest (a broker down, a leader moving).
                log.warning("assignments_read_error", error=str(err))
                continue
            (topic, partition), offset = _where(msg)
            self._next = offset + 1
            out.append(RawRecord(topic, partition, offset, msg.key(), msg.value(), _headers(msg)))
        return out

    def close(self) -> None:
        self._consumer.close()


def _where(msg: Message) -> tuple[Partition, int]:
    """Where a record (not an error event) is: librdkafka's types allow None."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None
    assert partition is not None
    assert offset is not None
    return (topic, partition), offset


def _headers(msg: Message) -> list[tuple[str, bytes]]:
    """Headers as bytes, a null value as empty (no record of ours has one)."""
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(k, v.encode() if isinstance(v, str) else (v or b"")) for k, v in pairs]
