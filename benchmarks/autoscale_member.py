"""One consumer pod of ``autoscale.py``: reads what it is given and processes at most
``--rate`` records/s (a real consumer's work, as a pause per batch), commits after each
batch, and reports on stdout what it processed (offset ranges) and, at each change, what
it holds. SIGTERM stops it cleanly: the stop of a scale-in.

``--mode ballast``: a ``ManagedConsumer`` (Ballast grants, ``assign()``).
``--mode group``: an aiokafka consumer that ``subscribe()``s with Kafka's sticky assignor
and commits what it processed when a rebalance revokes its partitions (the fleet KEDA's
Kafka scaler is made for).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from agent_io import say
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTP
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import CommitFailedError, IllegalGenerationError

from controller import logs
from controller.client import ManagedConsumer, PresenceOptions
from controller.tools import embedded

Batch = dict[KafkaTP, list[Any]]


class CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: list[KafkaTP]) -> None:
        if revoked:
            await self.consumer.commit()

    async def on_partitions_assigned(self, assigned: list[KafkaTP]) -> None:
        return None


async def consume(
    name: str,
    rate: float,
    fetch: Callable[[int], Awaitable[Batch]],
    commit: Callable[[], Awaitable[None]],
    held: Callable[[], Collection[KafkaTP]],
    stop: asyncio.Event,
) -> None:
    per_batch = max(1, int(rate // 5))
    last: list[int] | None = None
    while not stop.is_set():
        batch = await fetch(per_batch)
        now = sorted(tp.partition for tp in held())
        if now != last:
            say({"t": time.time(), "m": name, "held": now})
            last = now
        records = [(tp.partition, rs[0].offset, rs[-1].offset) for tp, rs in batch.items() if rs]
        if not records:
            continue
        say({"t": time.time(), "m": name, "r": records})
        await asyncio.sleep(sum(b - a + 1 for _, a, b in records) / rate)
        await commit()


async def main(a: argparse.Namespace) -> None:
    embedded.die_with_parent()  # a pod never outlives the run that started it
    logs.configure("warning", "json")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if a.mode == "ballast":
        member = ManagedConsumer(
            a.group, a.name, [a.topic],
            bootstrap_servers=a.bootstrap,
            presence=PresenceOptions(mqtt_port=a.mqtt_port, mqtt_keepalive=5),
            auto_offset_reset="earliest",
        )  # fmt: skip
        await member.start()
        try:
            await consume(
                a.name, a.rate,
                lambda n: member.getmany(timeout_ms=200, max_records=n),
                member.commit, lambda: member.assignment, stop,
            )  # fmt: skip
        finally:
            await member.close()
        return
    consumer = AIOKafkaConsumer(
        bootstrap_servers=a.bootstrap, group_id=a.group, client_id=a.name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        partition_assignment_strategy=(StickyPartitionAssignor,),
        session_timeout_ms=10_000, heartbeat_interval_ms=1_000, rebalance_timeout_ms=30_000,
    )  # fmt: skip
    await consumer.start()
    consumer.subscribe([a.topic], listener=CommitOnRevoke(consumer))

    async def commit() -> None:
        # A rebalance that ran while the batch was processed ends this commit; the next
        # owner reads those records again (counted as read twice), and the loop goes on.
        with contextlib.suppress(CommitFailedError, IllegalGenerationError):
            await consumer.commit()

    try:
        await consume(
            a.name, a.rate,
            lambda n: consumer.getmany(timeout_ms=200, max_records=n),
            commit, consumer.assignment, stop,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            await consumer.commit()
        await consumer.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=("ballast", "group"), required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--mqtt-port", type=int, default=1883)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--rate", type=float, required=True, help="records/s it processes at most")
    asyncio.run(main(p.parse_args()))
