"""Failover: Ballast-managed consumers vs Kafka's group protocol, same broker, same run.

For each event a member leaves (cleanly, or by crashing). Right after, a marker record is
produced to every partition it held; the time until other consumers have received every
marker is the time until its partitions are being consumed again. Also reported:
partitions moved per event and records processed twice.

* Ballast: ``ManagedConsumer`` in this process, ``ballast run`` as its own process
  (rebalance_delay 100 ms, leave_grace 0, MQTT keepalive 1 s). A crash drops the MQTT
  connection without DISCONNECT (the broker publishes the Will) and stops consuming
  without committing.
* Classic group protocol (a peer): ``AIOKafkaConsumer(group_id=...).subscribe()`` with
  default settings; a clean leave is ``stop()`` (LeaveGroup). The peer's crash is not
  measured: crashing one in-process aiokafka consumer needs its private internals.
* KIP-848 (the other peer, on Apache Kafka only): confluent-kafka consumers with
  ``group.protocol=consumer``: the broker assigns (its ``UniformAssignor``) and moves
  partitions incrementally; a clean leave is ``close()``. Each consumer polls in its own
  thread, as librdkafka's API asks.

    python benchmarks/handoff_bench.py --consumers 20 --events 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from controller.client import ManagedConsumer, PresenceOptions
from controller.tools import apache_kafka, embedded

PER_CONSUMER = 4


class Tracker:
    """Which consumer received which marker, and how many times each record was seen."""

    def __init__(self) -> None:
        self.markers: dict[str, float] = {}
        self.seen: dict[tuple[int, int], int] = {}

    def record(self, partition: int, offset: int, value: bytes | None) -> None:
        key = (partition, offset)
        self.seen[key] = self.seen.get(key, 0) + 1
        if value and value.startswith(b"marker-"):
            self.markers.setdefault(value.decode(), time.perf_counter())

    def duplicates(self) -> int:
        return sum(n - 1 for n in self.seen.values() if n > 1)


async def produce_markers(
    producer: AIOKafkaProducer, topic: str, partitions: set[int], tag: str
) -> set[str]:
    names = set()
    for p in sorted(partitions):
        name = f"marker-{tag}-{p}"
        await producer.send_and_wait(topic, name.encode(), partition=p)
        names.add(name)
    return names


async def wait_markers(tracker: Tracker, names: set[str], timeout: float) -> float:
    deadline = time.perf_counter() + timeout
    while not names <= tracker.markers.keys():
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{len(names - tracker.markers.keys())} markers never consumed")
        await asyncio.sleep(0.005)
    return max(tracker.markers[n] for n in names)


# ------------------------------------------------------------------ Ballast


async def ballast_run(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    n: int,
    events: int,
    tmp: Path,
    reader_wait_ms: int = 500,
    poll_ms: int = 100,
    broker: apache_kafka.BrokerKind = "kafka",
) -> dict[str, Any]:
    topic, group = "ballast-bench", "ballast-bench"
    await embedded.create_topics(kafka.address, {topic: n * PER_CONSUMER})
    port = embedded.free_port()
    config = tmp / "ballast.yaml"
    config.write_text(
        f"kafka: {json.dumps(apache_kafka.kafka_settings(broker, kafka.address))}\n"
        f"mqtt: {{port: {mqtt.port}, keepalive: 2}}\n"
        "rebalance: {delay: 100ms, leave_grace: 0s, handoff_timeout: 10s}\n"
        "lag: {source: none}\n"
        f"groups: [{{name: {group}}}]\n"
        "signing: {required: false}\n"
        f"http: {{port: {port}}}\n"
        "logging: {format: json, level: warning}\n"
    )
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stderr=(tmp / "daemon.log").open("w"),
    )
    tracker = Tracker()
    consumers: dict[str, ManagedConsumer] = {}
    loops: dict[str, asyncio.Task[None]] = {}
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()

    async def consume(c: ManagedConsumer) -> None:
        while True:
            batch = await c.getmany(timeout_ms=poll_ms)
            for records in batch.values():
                for r in records:
                    tracker.record(r.partition, r.offset, r.value)
            if batch:
                await c.commit()

    async def start(name: str) -> None:
        c = ManagedConsumer(
            group,
            name,
            [topic],
            bootstrap_servers=kafka.address,
            presence=PresenceOptions(mqtt_port=mqtt.port, mqtt_keepalive=1),
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            assignments_fetch_max_wait_ms=reader_wait_ms,
        )
        await c.start()
        consumers[name] = c
        loops[name] = asyncio.create_task(consume(c))

    results: dict[str, list[float]] = {"clean": [], "crash": []}
    moved: list[int] = []
    try:
        await asyncio.sleep(1.5)  # the daemon starts and creates the assignments topic
        await asyncio.gather(*(start(f"c{i:03d}") for i in range(n)))
        await settle(
            lambda: (
                sum(len(c.assignment) for c in consumers.values()) == n * PER_CONSUMER
                and all(c.assignment for c in consumers.values())
            ),
            120,
        )
        for i in range(events):
            for kind in ("clean", "crash"):
                victim = sorted(consumers)[i % len(consumers)]
                c = consumers.pop(victim)
                held = {tp.partition for tp in c.assignment}
                before = {name: set(other.assignment) for name, other in consumers.items()}
                t0 = time.perf_counter()
                loops.pop(victim).cancel()
                if kind == "clean":
                    await c.close()
                else:
                    await c.abort()
                names = await produce_markers(producer, topic, held, f"{kind}{i}")
                t1 = await wait_markers(tracker, names, 60)
                results[kind].append((t1 - t0) * 1000)
                await settle(lambda: all(c._feed.pending is None for c in consumers.values()), 30)
                moved.append(
                    sum(len(before[name] - set(o.assignment)) for name, o in consumers.items())
                )
                await start(victim)
                await settle(lambda: all(c.assignment for c in consumers.values()), 60)
    finally:
        for task in loops.values():
            task.cancel()
        for c in consumers.values():
            with contextlib.suppress(Exception):
                await c.close()
        await producer.stop()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    return {
        "clean_leave_ms": summary(results["clean"]),
        "crash_ms": summary(results["crash"]),
        "moved_per_event_max": max(moved, default=0),
        "duplicates": tracker.duplicates(),
    }


# ------------------------------------------------------------------ group protocol


async def group_run(kafka: embedded.BrokerProcess, n: int, events: int) -> dict[str, Any]:
    topic, group = "group-bench", "group-bench"
    await embedded.create_topics(kafka.address, {topic: n * PER_CONSUMER})
    tracker = Tracker()
    consumers: dict[str, AIOKafkaConsumer] = {}
    loops: dict[str, asyncio.Task[None]] = {}
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()

    async def consume(c: AIOKafkaConsumer) -> None:
        while True:
            batch = await c.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    tracker.record(r.partition, r.offset, r.value)

    async def start(name: str) -> None:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka.address,
            group_id=group,
            auto_offset_reset="earliest",
            client_id=name,
        )
        await c.start()
        consumers[name] = c
        loops[name] = asyncio.create_task(consume(c))

    clean: list[float] = []
    moved: list[int] = []
    try:
        await asyncio.gather(*(start(f"g{i:03d}") for i in range(n)))
        await settle(
            lambda: (
                sum(len(c.assignment()) for c in consumers.values()) == n * PER_CONSUMER
                and all(c.assignment() for c in consumers.values())
            ),
            300,
        )
        for i in range(events):
            victim = sorted(consumers)[i % len(consumers)]
            c = consumers.pop(victim)
            held = {tp.partition for tp in c.assignment()}
            before = {name: set(other.assignment()) for name, other in consumers.items()}
            t0 = time.perf_counter()
            loops.pop(victim).cancel()
            await c.stop()  # LeaveGroup
            names = await produce_markers(producer, topic, held, f"g{i}")
            t1 = await wait_markers(tracker, names, 300)
            clean.append((t1 - t0) * 1000)
            await settle(
                lambda: sum(len(o.assignment()) for o in consumers.values()) == n * PER_CONSUMER,
                300,
            )
            moved.append(
                sum(len(before[name] - set(o.assignment())) for name, o in consumers.items())
            )
            await start(victim)
            await settle(lambda: all(o.assignment() for o in consumers.values()), 300)
    finally:
        for task in loops.values():
            task.cancel()
        for c in consumers.values():
            with contextlib.suppress(Exception):
                await c.stop()
        await producer.stop()
    return {
        "clean_leave_ms": summary(clean),
        "moved_per_event_max": max(moved, default=0),
        "duplicates": tracker.duplicates(),
    }


# ------------------------------------------------------------------ KIP-848


class _Kip848Member(threading.Thread):
    """One confluent-kafka consumer of the new protocol, polling in its own thread."""

    def __init__(self, name: str, bootstrap: str, topic: str, tracker: Tracker) -> None:
        super().__init__(name=name, daemon=True)
        from confluent_kafka import Consumer  # noqa: PLC0415 - the bench extra only

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": topic,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "client.id": name,
            }
        )
        self.consumer.subscribe([topic])
        self.tracker = tracker
        self.held: frozenset[int] = frozenset()
        self.leave = threading.Event()
        self.left = threading.Event()

    def run(self) -> None:
        try:
            while not self.leave.is_set():
                msg = self.consumer.poll(0.05)
                if msg is not None and msg.error() is None:
                    self.tracker.record(msg.partition() or 0, msg.offset() or 0, msg.value())
                self.held = frozenset(tp.partition for tp in self.consumer.assignment())
        finally:
            self.consumer.close()  # leaves the group
            self.left.set()


async def kip848_run(kafka: embedded.BrokerProcess, n: int, events: int) -> dict[str, Any]:
    topic = "kip848-bench"
    await embedded.create_topics(kafka.address, {topic: n * PER_CONSUMER})
    tracker = Tracker()
    members: dict[str, _Kip848Member] = {}
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()

    def start(name: str) -> None:
        members[name] = _Kip848Member(name, kafka.address, topic, tracker)
        members[name].start()

    def total() -> int:
        return sum(len(m.held) for m in members.values())

    clean: list[float] = []
    moved: list[int] = []
    try:
        for i in range(n):
            start(f"k{i:03d}")
        await settle(
            lambda: total() == n * PER_CONSUMER and all(m.held for m in members.values()), 300
        )
        for i in range(events):
            victim = sorted(members)[i % len(members)]
            m = members.pop(victim)
            held = set(m.held)
            before = {name: set(o.held) for name, o in members.items()}
            t0 = time.perf_counter()
            m.leave.set()
            await asyncio.to_thread(m.left.wait, 60)
            names = await produce_markers(producer, topic, held, f"k{i}")
            t1 = await wait_markers(tracker, names, 300)
            clean.append((t1 - t0) * 1000)
            await settle(lambda: total() == n * PER_CONSUMER, 300)
            moved.append(sum(len(before[name] - o.held) for name, o in members.items()))
            start(victim)
            await settle(lambda: all(o.held for o in members.values()), 300)
    finally:
        for m in members.values():
            m.leave.set()
        for m in members.values():
            await asyncio.to_thread(m.left.wait, 60)
        await producer.stop()
    return {
        "clean_leave_ms": summary(clean),
        "moved_per_event_max": max(moved, default=0),
        "duplicates": tracker.duplicates(),
    }


# ------------------------------------------------------------------ helpers


async def settle(predicate: Any, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError("did not settle")
        await asyncio.sleep(0.02)


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p99": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], 1),
        "n": len(ordered),
    }


async def main_async(
    consumers: int, events: int, reader_wait_ms: int, poll_ms: int, broker: apache_kafka.BrokerKind
) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="ballast-handoff-") as tmp,
        apache_kafka.running(broker, Path(tmp)) as kafka,
        embedded.amqtt(Path(tmp)).start() as mqtt,
    ):
        ours = await ballast_run(
            kafka, mqtt, consumers, events, Path(tmp), reader_wait_ms, poll_ms, broker
        )
        peer = await group_run(kafka, consumers, events)
        kip848 = await kip848_run(kafka, consumers, events) if broker == "kafka" else None
    out = {"consumers": consumers, "ballast": ours, "group_protocol": peer, "kip848": kip848}
    for name, other in (("classic", peer), ("kip848", kip848)):
        if other and ours["clean_leave_ms"] and other["clean_leave_ms"]:
            out[f"clean_leave_speedup_p50_vs_{name}"] = round(
                other["clean_leave_ms"]["p50"] / ours["clean_leave_ms"]["p50"], 1
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--consumers", type=int, default=20)
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument(
        "--assignments-fetch-wait-ms",
        type=int,
        default=500,
        help="ManagedConsumer(assignments_fetch_max_wait_ms=...): how long each member's "
        "reader of the assignments topic waits at the broker (docs/client.md)",
    )
    parser.add_argument(
        "--poll-ms",
        type=int,
        default=100,
        help="the timeout of each Ballast consumer's getmany (async for uses 1000)",
    )
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    args = parser.parse_args()
    out = main_async(
        args.consumers, args.events, args.assignments_fetch_wait_ms, args.poll_ms, args.broker
    )
    print(json.dumps(asyncio.run(out), indent=2))


if __name__ == "__main__":
    main()
