"""Ballast's plug-in assignors against aiokafka's own sticky, inside Kafka's group protocol.

One Tansu broker on loopback, one run: for each assignor, N aiokafka consumers on
``subscribe()`` settle, then one member joins and one leaves. Per event: the time from
the event until every member holds its share (disjoint, complete), the partitions that
changed owner beyond the leaver's own, and the largest member lag afterwards (a tenth of
the partitions carry a backlog; nothing is committed, so lag is the backlog; members
fetch, so ``GroupLag`` sees the end through the Fetch high watermark).

    python benchmarks/group_assignors_bench.py --consumers 20 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from assignors import TopicPartition
from controller.client import GroupLag, group_assignor
from controller.tools import apache_kafka, embedded

Holdings = dict[str, frozenset[TopicPartition]]
VARIANTS = ("aiokafka-sticky", "ballast-sticky", "ballast-lagsticky")


class Fleet:
    def __init__(self, address: str, topic: str, group: str, variant: str) -> None:
        self.address, self.topic, self.group, self.variant = address, topic, group, variant
        self.members: dict[str, tuple[AIOKafkaConsumer, GroupLag | None]] = {}

    async def add(self, name: str) -> None:
        lag = GroupLag(reset="earliest") if self.variant == "ballast-lagsticky" else None
        if self.variant == "aiokafka-sticky":
            # Its state lives in class attributes: one subclass per consumer, as one
            # consumer per process would have (else all would share one "owned" list).
            strategy: object = type(f"Sticky{name}", (StickyPartitionAssignor,), {})
        else:
            strategy = group_assignor(self.variant.removeprefix("ballast-"), lag=lag)
        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.address,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=30000,
            heartbeat_interval_ms=1000,
            max_poll_interval_ms=300000,
            partition_assignment_strategy=(strategy,),
        )
        await consumer.start()
        if lag is not None:
            await lag.start(consumer)
        self.members[name] = (consumer, lag)

    async def remove(self, name: str) -> None:
        consumer, lag = self.members.pop(name)
        if lag is not None:
            await lag.stop()
        await consumer.stop()

    def holdings(self) -> Holdings:
        return {
            name: frozenset(TopicPartition(tp.topic, tp.partition) for tp in c.assignment())
            for name, (c, _) in self.members.items()
        }

    async def settle(self, partitions: int, timeout: float = 300) -> float:
        """Seconds until every member holds a share: complete, disjoint, none empty."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            await asyncio.gather(*(c.getmany(timeout_ms=20) for c, _ in self.members.values()))
            held = self.holdings()
            total = sum(len(h) for h in held.values())
            union = set().union(*held.values()) if held else set()
            if total == partitions == len(union) and all(held.values()):
                return time.monotonic() - started
        raise TimeoutError(f"{self.variant}: no complete assignment within {timeout} s")

    async def refresh_lag(self) -> None:
        for c, lag in self.members.values():
            if lag is not None:
                await lag.refresh(c)


def moved(before: Holdings, after: Holdings, leaver: str | None) -> int:
    owner = {tp: m for m, parts in before.items() for tp in parts}
    return sum(
        1
        for m, parts in after.items()
        for tp in parts
        if owner.get(tp) not in (m, leaver) and tp in owner
    )


def max_lag(held: Holdings, backlog: dict[TopicPartition, int]) -> int:
    return max((sum(backlog.get(tp, 0) for tp in parts) for parts in held.values()), default=0)


async def run_variant(
    address: str,
    topic: str,
    variant: str,
    n: int,
    partitions: int,
    backlog: dict[TopicPartition, int],
) -> dict[str, object]:
    fleet = Fleet(address, topic, f"bench-{variant}-{n}-{random.randrange(10**6)}", variant)
    try:
        started = time.monotonic()
        await asyncio.gather(*(fleet.add(f"c{i:03d}") for i in range(n)))
        cold = time.monotonic() - started + await fleet.settle(partitions)
        await fleet.refresh_lag()
        before = fleet.holdings()
        started = time.monotonic()
        await fleet.add("joiner")
        join_s = time.monotonic() - started + await fleet.settle(partitions)
        after_join = fleet.holdings()
        await fleet.refresh_lag()
        leaver = sorted(after_join)[0]
        started = time.monotonic()
        await fleet.remove(leaver)
        leave_s = time.monotonic() - started + await fleet.settle(partitions)
        after_leave = fleet.holdings()
        return {
            "variant": variant,
            "consumers": n,
            "partitions": partitions,
            "cold_start_s": round(cold, 2),
            "join_s": round(join_s, 2),
            "join_moved": moved(before, after_join, None),
            "leave_s": round(leave_s, 2),
            "leave_moved_beyond_leaver": moved(after_join, after_leave, leaver),
            "max_member_lag_after_join": max_lag(after_join, backlog),
            "max_member_lag_after_leave": max_lag(after_leave, backlog),
        }
    finally:
        for name in list(fleet.members):
            await fleet.remove(name)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumers", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--per-consumer", type=int, default=4, help="partitions per consumer")
    # Above LagPolicy.min_lag (1 000): below it, lag-aware strategies leave skew alone.
    parser.add_argument("--backlog", type=int, default=1500, help="records on each hot partition")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    args = parser.parse_args()
    rng = random.Random(7)
    with (
        tempfile.TemporaryDirectory() as tmp,
        apache_kafka.running(args.broker, Path(tmp)) as kafka,
    ):
        for n in args.consumers:
            partitions = n * args.per_consumer
            topic = f"bench-{n}"
            await embedded.create_topics(kafka.address, {topic: partitions})
            hot = rng.sample(range(partitions), max(1, partitions // 10))
            producer = AIOKafkaProducer(bootstrap_servers=kafka.address)
            await producer.start()
            try:
                for p in hot:
                    sent = [
                        await producer.send(topic, str(i).encode(), partition=p)
                        for i in range(args.backlog)
                    ]
                    await asyncio.gather(*sent)
            finally:
                await producer.stop()
            backlog = {TopicPartition(topic, p): args.backlog for p in hot}
            for variant in args.variants:
                result = await run_variant(kafka.address, topic, variant, n, partitions, backlog)
                print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
