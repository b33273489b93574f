"""What a client binding costs: each client library bare (manual ``assign()`` of every
partition) against the same library under Ballast, same broker, same run, rounds
alternated; and each binding's clean-leave handoff.

* Throughput: ``--records`` records (100 bytes) on a 12-partition topic, read from the
  start by one consumer in batches of 500, no commits until the end; the rate counts from
  the first record to the last (start-up and the first grant excluded). Bare: confluent-
  kafka's ``Consumer`` / aiokafka's ``AIOKafkaConsumer``. Under Ballast:
  ``BallastConsumer`` / ``ManagedConsumer``, the one member of its group (it holds all 12
  partitions), commits to a group of its own so each round starts from the beginning.
* Clean-leave handoff: two members consuming; one stops polling and ``close()``s; the
  time from ``close()`` until the other holds all 12 partitions (it applies the grant
  inside its next poll). Controller:
  ``ballast run`` as its own process (rebalance delay 100 ms).

    python benchmarks/binding_overhead.py --records 300000 --rounds 3 --leaves 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message
from confluent_kafka import TopicPartition as ConfluentTP
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTP

from controller.client import ManagedConsumer, PresenceOptions
from controller.client.confluent import BallastConsumer
from controller.client.kafka_python import BallastKafkaConsumer
from controller.tasks import cancel_and_wait
from controller.tools import apache_kafka, embedded

TOPIC, GROUP, PARTITIONS, BATCH = "overhead", "overhead-fleet", 12, 500
CLIENTS = ("confluent", "kafka-python", "aiokafka")
Sync = Literal["confluent", "kafka-python"]
SYNC: tuple[Sync, ...] = ("confluent", "kafka-python")
Member = BallastConsumer | BallastKafkaConsumer


def start_controller(
    tmp: Path, kafka: str, mqtt_port: int, broker: apache_kafka.BrokerKind
) -> subprocess.Popen[bytes]:
    config = tmp / "ballast.yaml"
    config.write_text(
        f"kafka: {json.dumps(apache_kafka.kafka_settings(broker, kafka))}\n"
        f"mqtt: {{port: {mqtt_port}, keepalive: 2}}\n"
        "rebalance: {delay: 100ms, leave_grace: 0s, handoff_timeout: 10s}\n"
        "lag: {source: none}\n"
        f"groups: [{{name: {GROUP}}}]\n"
        "signing: {required: false}\n"
        f"http: {{port: {embedded.free_port()}}}\n"
        "logging: {format: json, level: warning}\n"
    )
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stderr=(tmp / "daemon.log").open("w"),
    )


async def produce(address: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=address, linger_ms=20, max_batch_size=262144)
    await producer.start()
    try:
        value = b"x" * 100
        for i in range(n):
            await producer.send(TOPIC, value, partition=i % PARTITIONS)
        await producer.flush()
    finally:
        await producer.stop()


def _rate(n: int, first: float, last: float) -> float:
    return n / (last - first) if last > first else float("nan")


# ------------------------------------------------------------------ throughput


def confluent_bare(address: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"bare-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    c.assign([ConfluentTP(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    try:
        return _drain_sync(lambda: c.consume(BATCH, 1.0), n)
    finally:
        c.close()


def kafka_python_bare(address: str, n: int) -> float:
    c = KafkaConsumer(
        bootstrap_servers=address,
        group_id=f"bare-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
    )
    tps = [KafkaPythonTP(TOPIC, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    try:
        return _drain_sync(lambda: _records(c.poll(timeout_ms=1000, max_records=BATCH)), n)
    finally:
        c.close(autocommit=False)


SYNC_BARE: dict[Sync, Callable[[str, int], float]] = {
    "confluent": confluent_bare,
    "kafka-python": kafka_python_bare,
}


def _sync_member(kind: Sync, address: str, mqtt_port: int, name: str, **more: Any) -> Member:
    binding = BallastConsumer if kind == "confluent" else BallastKafkaConsumer
    member = binding(
        GROUP,
        name,
        [TOPIC],
        bootstrap_servers=address,
        presence=PresenceOptions(mqtt_port=mqtt_port, mqtt_keepalive=1),
        **more,
    )
    member.start()
    return member


def _one_poll(c: Member) -> list[Any]:
    if isinstance(c, BallastConsumer):
        return c.consume(BATCH, 1.0)
    return _records(c.poll(timeout_ms=1000, max_records=BATCH))


def _records(batch: dict[Any, list[Any]]) -> list[Any]:
    return [r for records in batch.values() for r in records]


def sync_ballast(kind: Sync, address: str, mqtt_port: int, n: int) -> float:
    c = _sync_member(
        kind,
        address,
        mqtt_port,
        "solo",
        commit_group=f"ballast-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
    )
    try:
        return _drain_sync(lambda: _one_poll(c), n)
    finally:
        c.close()


def _drain_sync(batch: Callable[[], list[Any]], n: int) -> float:
    got, first = 0, 0.0
    while got < n:
        msgs = [m for m in batch() if not isinstance(m, Message) or m.error() is None]
        if msgs and not got:
            first = time.perf_counter()
        got += len(msgs)
    return _rate(n, first, time.perf_counter())


async def aiokafka_bare(address: str, n: int) -> float:
    c = AIOKafkaConsumer(
        bootstrap_servers=address,
        group_id=f"bare-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await c.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        return await _drain_async(c, n)
    finally:
        await c.stop()


async def aiokafka_ballast(address: str, mqtt_port: int, n: int) -> float:
    c = ManagedConsumer(
        GROUP,
        "solo",
        [TOPIC],
        bootstrap_servers=address,
        presence=PresenceOptions(mqtt_port=mqtt_port),
        commit_group=f"ballast-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
    )
    await c.start()
    try:
        return await _drain_async(c, n)
    finally:
        await c.close()


async def _drain_async(c: AIOKafkaConsumer | ManagedConsumer, n: int) -> float:
    got, first = 0, 0.0
    while got < n:
        batch = await c.getmany(timeout_ms=1000, max_records=BATCH)
        count = sum(len(records) for records in batch.values())
        if count and not got:
            first = time.perf_counter()
        got += count
    return _rate(n, first, time.perf_counter())


# ------------------------------------------------------------------ clean-leave handoff


def sync_leaves(kind: Sync, address: str, mqtt_port: int, leaves: int) -> list[float]:
    def member(name: str) -> tuple[Member, threading.Event, threading.Thread]:
        c = _sync_member(kind, address, mqtt_port, name)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                _one_poll(c)

        poller = threading.Thread(target=poll)
        poller.start()
        return c, stop, poller

    stay, stay_stop, stay_poller = member("stay")
    took = []
    try:
        for _ in range(leaves):
            go, go_stop, go_poller = member("go")
            _wait(_halves(go, stay))
            go_stop.set()
            go_poller.join()  # the application stops polling, then leaves
            t0 = time.perf_counter()
            go.close()
            _wait(lambda: len(stay.assignment) == PARTITIONS)
            took.append((time.perf_counter() - t0) * 1000)
    finally:
        stay_stop.set()
        stay_poller.join()
        stay.close()
    return took


async def aiokafka_leaves(address: str, mqtt_port: int, leaves: int) -> list[float]:
    def member(name: str) -> ManagedConsumer:
        return ManagedConsumer(
            GROUP,
            name,
            [TOPIC],
            bootstrap_servers=address,
            presence=PresenceOptions(mqtt_port=mqtt_port, mqtt_keepalive=1),
        )

    async def poll(c: ManagedConsumer) -> None:
        while True:
            await c.getmany(timeout_ms=100, max_records=BATCH)

    stay = member("stay")
    await stay.start()
    polling = [asyncio.create_task(poll(stay))]
    took = []
    try:
        for _ in range(leaves):
            go = member("go")
            await go.start()
            polling.append(asyncio.create_task(poll(go)))
            await _settle(_halves(go, stay))
            await cancel_and_wait(polling.pop())  # the application stops polling, then leaves
            t0 = time.perf_counter()
            await go.close()
            await _settle(lambda: len(stay.assignment) == PARTITIONS)
            took.append((time.perf_counter() - t0) * 1000)
    finally:
        for task in polling:
            task.cancel()
        await stay.close()
    return took


class _Holds(Protocol):
    @property
    def assignment(self) -> Collection[object]: ...


def _halves(a: _Holds, b: _Holds) -> Callable[[], bool]:
    return lambda: len(a.assignment) == PARTITIONS // 2 == len(b.assignment)


def _wait(done: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("not settled")
        time.sleep(0.005)


async def _settle(done: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("not settled")
        await asyncio.sleep(0.005)


# ------------------------------------------------------------------ the run


async def main_async(
    records: int, rounds: int, leaves: int, broker: apache_kafka.BrokerKind
) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="ballast-overhead-") as tmp,
        apache_kafka.running(broker, Path(tmp)) as kafka,
        embedded.amqtt(Path(tmp)).start() as mqtt,
    ):
        await embedded.create_topics(kafka.address, {TOPIC: PARTITIONS})
        daemon = start_controller(Path(tmp), kafka.address, mqtt.port, broker)
        try:
            await produce(kafka.address, records)
            await asyncio.sleep(1.5)  # the daemon creates the assignments topic
            rates: dict[str, list[float]] = {
                f"{c}_{k}": [] for c in CLIENTS for k in ("bare", "ballast")
            }
            for _ in range(rounds):
                for kind in SYNC:
                    rates[f"{kind}_bare"].append(
                        await asyncio.to_thread(SYNC_BARE[kind], kafka.address, records)
                    )
                    rates[f"{kind}_ballast"].append(
                        await asyncio.to_thread(
                            sync_ballast, kind, kafka.address, mqtt.port, records
                        )
                    )
                rates["aiokafka_bare"].append(await aiokafka_bare(kafka.address, records))
                rates["aiokafka_ballast"].append(
                    await aiokafka_ballast(kafka.address, mqtt.port, records)
                )
            handoff: dict[str, list[float]] = {
                kind: await asyncio.to_thread(sync_leaves, kind, kafka.address, mqtt.port, leaves)
                for kind in SYNC
            }
            handoff["aiokafka"] = await aiokafka_leaves(kafka.address, mqtt.port, leaves)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
    out: dict[str, Any] = {"broker": broker, "records": records, "rounds": rounds}
    for client in CLIENTS:
        bare_rate = statistics.median(rates[f"{client}_bare"])
        ours = statistics.median(rates[f"{client}_ballast"])
        out[client] = {
            "bare_records_per_s": [round(r) for r in rates[f"{client}_bare"]],
            "ballast_records_per_s": [round(r) for r in rates[f"{client}_ballast"]],
            "ballast_over_bare_median": round(ours / bare_rate, 3),
            "clean_leave_ms": [round(t, 1) for t in handoff[client]],
            "clean_leave_p50_ms": round(statistics.median(handoff[client]), 1),
        }
    for kind in SYNC:
        out[f"clean_leave_p50_{kind}_over_aiokafka"] = round(
            out[kind]["clean_leave_p50_ms"] / out["aiokafka"]["clean_leave_p50_ms"], 2
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--leaves", type=int, default=5)
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    args = parser.parse_args()
    out = main_async(args.records, args.rounds, args.leaves, args.broker)
    print(json.dumps(asyncio.run(out), indent=2))


if __name__ == "__main__":
    main()
