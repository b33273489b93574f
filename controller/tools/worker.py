"""``ballast worker``: a real consumer process on one of Ballast's client bindings
(``--client aiokafka``: ``ManagedConsumer``; ``confluent``: ``BallastConsumer``;
``kafka-python``: ``BallastKafkaConsumer``) for demos and end-to-end tests. It
"processes" a record by appending ``topic partition offset value time`` to a file, then
commits each batch; the file tells exactly what was processed, and twice. Beside it,
``<out>.events`` (JSON lines) says when partitions were granted and revoked (revoke
written before the acknowledgement leaves) and what each commit covered: the fault
suite's checker reads both (``controller.tools.chaos``).

SIGTERM closes cleanly: a clean leave by default, with ``--restart`` a restart that
keeps the member's partitions for ``leave_grace``, or with ``--hand-off`` a leave that
reads on until the controller has moved every partition (``hand_off()``). SIGKILL is a
crash.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from aiokafka.errors import KafkaError

from controller import logs
from controller.adapters.presence import MqttAuth
from controller.client.consumer import ManagedConsumer
from controller.client.identity import PresenceOptions
from controller.client.sync_binding import SyncBinding
from controller.wire.signing import Verifier

log = logs.get("ballast.worker")

Client = Literal["aiokafka", "confluent", "kafka-python"]
SyncClient = Literal["confluent", "kafka-python"]
CLIENTS: tuple[Client, ...] = ("aiokafka", "confluent", "kafka-python")


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    bootstrap: str
    mqtt_port: int
    group: str
    member: str
    topics: list[str]
    out: Path
    restart: bool
    presence: Literal["mqtt", "kafka"]
    delay: float
    #: On SIGTERM, ``hand_off()`` and stop once it is done, instead of stopping at once.
    hand_off: bool = False
    rack: str | None = None
    capacity: float | None = None
    verify_key: Verifier | None = None
    mqtt_auth: MqttAuth | None = None
    assignments_topic: str = "ballast.assignments"
    heartbeat_topic: str = "ballast.heartbeats"
    member_key: Path | None = None

    def member_settings(self, work: WorkLog) -> dict[str, Any]:
        """What every binding's member is made with here (the same keywords on each)."""
        return {
            "bootstrap_servers": self.bootstrap,
            "presence": self.presence_options(),
            "assignments_topic": self.assignments_topic,
            "auto_offset_reset": "earliest",
            "report_lag": True,
            "rack": self.rack,
            "capacity": self.capacity,
            "verify_key": self.verify_key,
            "on_partitions_assigned": lambda tps: work.note("granted", tps),
            "on_partitions_revoked": lambda tps: work.note("revoked", tps),
        }

    def presence_options(self) -> PresenceOptions:
        return PresenceOptions(
            via=self.presence,
            mqtt_port=self.mqtt_port,
            mqtt_keepalive=1,
            mqtt_auth=self.mqtt_auth,
            heartbeat_topic=self.heartbeat_topic,
            member_key=self.member_key,
        )


class WorkLog:
    """The two files the checkers read, whatever the binding."""

    def __init__(self, out: Path) -> None:
        self._sink: IO[str] = out.open("a", buffering=1)
        self._events: IO[str] = out.with_name(out.name + ".events").open("a", buffering=1)

    def note(self, kind: str, partitions: Iterable[tuple[str, int]]) -> None:
        tps = sorted([t, p] for t, p in partitions)
        self._event({"kind": kind, "partitions": tps})

    def processed(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        text = value.decode() if value else ""
        self._sink.write(f"{topic} {partition} {offset} {text} {time.time():.6f}\n")

    def committed(self, done: list[list[object]]) -> None:
        self._sink.flush()
        self._event({"kind": "commit", "offsets": done})

    def _event(self, body: dict[str, object]) -> None:
        self._events.write(json.dumps({"t": time.time(), **body}) + "\n")

    def close(self) -> None:
        self._sink.close()
        self._events.close()


def run(client: Client, options: WorkerOptions) -> None:
    logs.configure("info", "json")
    if client == "aiokafka":
        asyncio.run(run_aiokafka(options))
    else:
        run_sync(client, options)


async def run_aiokafka(o: WorkerOptions) -> None:
    stop = asyncio.Event()
    work = WorkLog(o.out)
    consumer = ManagedConsumer(o.group, o.member, o.topics, **o.member_settings(work))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, consumer.hand_off if o.hand_off else stop.set)
    await consumer.start()
    try:
        while not stop.is_set() and not consumer.handed_off:
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    work.processed(r.topic, r.partition, r.offset, r.value)
            if batch:
                try:
                    await consumer.commit()
                    work.committed(
                        [
                            [tp.topic, tp.partition, records[-1].offset + 1]
                            for tp, records in batch.items()
                            if records
                        ]
                    )
                except KafkaError as exc:
                    # Broker unreachable for a moment: the records stay uncommitted and
                    # the next batch's commit covers them.
                    log.warning("commit_failed", member=o.member, error=repr(exc))
                if o.delay:
                    await asyncio.sleep(o.delay)
    finally:
        await consumer.close(leave=not o.restart)
        work.close()


#: What a synchronous worker processed: topic, partition, offset, value.
Processed = tuple[str, int, int, bytes | None]


def run_sync(client: SyncClient, o: WorkerOptions) -> None:
    """The same loop, synchronous, on confluent-kafka or kafka-python."""
    stop = threading.Event()
    work = WorkLog(o.out)
    consumer, fetch, commit_error = _sync_member(client, o, work)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: consumer.hand_off() if o.hand_off else stop.set())
    consumer.start()
    try:
        while not stop.is_set() and not consumer.handed_off:
            batch = fetch()
            last = {(t, p): offset + 1 for t, p, offset, _ in batch}
            for t, p, offset, value in batch:
                work.processed(t, p, offset, value)
            if batch:
                try:
                    consumer.commit()
                    work.committed([[t, p, n] for (t, p), n in sorted(last.items())])
                except commit_error as exc:
                    log.warning("commit_failed", member=o.member, error=repr(exc))
                if o.delay:
                    time.sleep(o.delay)
    finally:
        consumer.close(leave=not o.restart)
        work.close()


def _sync_member(
    client: SyncClient, o: WorkerOptions, work: WorkLog
) -> tuple[SyncBinding[Any], Callable[[], list[Processed]], type[Exception]]:
    return sync_member(client, o.group, o.member, o.topics, **o.member_settings(work))


def sync_member(
    client: SyncClient, group: str, member: str, topics: list[str], **settings: Any
) -> tuple[SyncBinding[Any], Callable[[], list[Processed]], type[Exception]]:
    """A synchronous binding's member (``settings`` as its constructor takes them), one
    poll of it, and what its failed commit raises; each library imported only when asked
    for (an optional extra). The worker and the demo run members through this."""
    if client == "confluent":
        from confluent_kafka import KafkaException  # noqa: PLC0415

        from controller.client.confluent import BallastConsumer  # noqa: PLC0415

        confluent = BallastConsumer(group, member, topics, **settings)

        def consume() -> list[Processed]:
            out = []
            for m in confluent.consume(500, 0.2):
                topic, partition, offset = m.topic(), m.partition(), m.offset()
                if m.error() is None and topic and partition is not None and offset is not None:
                    out.append((topic, partition, offset, m.value()))
            return out

        return confluent, consume, KafkaException
    from kafka.errors import KafkaError as KafkaPythonError  # noqa: PLC0415

    from controller.client.kafka_python import BallastKafkaConsumer  # noqa: PLC0415

    kafka_python = BallastKafkaConsumer(group, member, topics, **settings)

    def poll() -> list[Processed]:
        batch = kafka_python.poll(timeout_ms=200, max_records=500)
        return [(r.topic, r.partition, r.offset, r.value) for rs in batch.values() for r in rs]

    return kafka_python, poll, KafkaPythonError
