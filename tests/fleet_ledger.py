"""What the fail-stop and binding tests count, whatever the client: records produced
round-robin over a 12-partition topic, how often each was processed, and whether the
members' assignments have settled; and a fleet of ``ManagedConsumer``s that process
and commit, for the tests on aiokafka's binding."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer

from controller.client import PresenceOptions
from controller.client.consumer import ManagedConsumer
from controller.client.failure import MemberFailedError
from controller.tools import embedded


class Holds(Protocol):
    @property
    def assignment(self) -> Collection[object]: ...


class FleetLedger:
    def __init__(self, address: str, topic: str) -> None:
        self.address, self.topic = address, topic
        self.processed: Counter[bytes] = Counter()
        self.produced = 0

    @property
    def holders(self) -> Mapping[str, Holds]:
        raise NotImplementedError

    async def produce(self, n: int) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.address, linger_ms=5)
        await producer.start()
        try:
            for _ in range(n):
                await producer.send(
                    self.topic, str(self.produced).encode(), partition=self.produced % 12
                )
                self.produced += 1
            await producer.flush()
        finally:
            await producer.stop()

    async def all_processed(self, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(str(i).encode() in self.processed for i in range(self.produced)):
            missing = self.produced - len(self.processed)
            assert time.monotonic() < deadline, f"{missing} records never processed"
            await asyncio.sleep(0.1)

    async def held_by(self, names: list[str], timeout: float = 30.0) -> None:
        """All 12 partitions held by exactly these members, evenly (no two differ by
        more than one): the settled split, not a step on the way to it, where a member
        that has not yet applied its revoke still holds its old share."""
        deadline = time.monotonic() + timeout
        while True:
            held = [len(self.holders[n].assignment) for n in names]
            if sum(held) == 12 and max(held) - min(held) <= 1:
                return
            assert time.monotonic() < deadline, (
                f"not settled: {dict(zip(names, held, strict=True))}"
            )
            await asyncio.sleep(0.1)

    def twice(self) -> list[bytes]:
        return sorted(v for v, n in self.processed.items() if n > 1)


class ManagedFleet(FleetLedger):
    """``ManagedConsumer`` members of ``group`` reading ``topic`` from the start: each
    processes (counts) what it gets and commits it; a member's fail-stop is kept in
    ``failed``."""

    def __init__(
        self, kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, group: str, topic: str
    ) -> None:
        super().__init__(kafka.address, topic)
        self.kafka, self.mqtt, self.group = kafka, mqtt, group
        self.members: dict[str, ManagedConsumer] = {}
        self.loops: dict[str, asyncio.Task[None]] = {}
        self.failed: dict[str, MemberFailedError] = {}
        #: Partitions seen held by two members at once (``start_traffic`` samples).
        self.overlaps: list[str] = []
        self._traffic: list[asyncio.Task[None]] = []

    @property
    def holders(self) -> dict[str, ManagedConsumer]:
        return self.members

    async def join(self, name: str, **options: Any) -> ManagedConsumer:
        """``options``: more ``ManagedConsumer`` settings (``verify_key``, ``presence``
        over Kafka, ...)."""
        options.setdefault("presence", PresenceOptions(mqtt_port=self.mqtt.port, mqtt_keepalive=1))
        consumer = ManagedConsumer(
            self.group,
            name,
            [self.topic],
            bootstrap_servers=self.kafka.address,
            auto_offset_reset="earliest",
            **options,
        )
        await consumer.start()
        self.members[name] = consumer
        self.loops[name] = asyncio.create_task(self._consume(name, consumer))
        return consumer

    async def leave(self, name: str) -> None:
        """A clean leave."""
        self.loops.pop(name).cancel()
        await self.members.pop(name).close()

    async def _consume(self, name: str, consumer: ManagedConsumer) -> None:
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=100)
            except MemberFailedError as exc:
                self.failed[name] = exc
                return
            for records in batch.values():
                for r in records:
                    self.processed[r.value] += 1
            if batch:
                await consumer.commit()

    def start_traffic(self) -> None:
        """Records produced continuously, and the members' holdings sampled every 20 ms
        for a partition held by two at once."""

        async def feed() -> None:
            while True:
                await self.produce(24)
                await asyncio.sleep(0.05)

        async def sample() -> None:
            while True:
                seen: dict[object, str] = {}
                for name, m in self.members.items():
                    for tp in m.assignment:
                        if tp in seen:
                            self.overlaps.append(f"{tp} held by {seen[tp]} and {name}")
                        seen[tp] = name
                await asyncio.sleep(0.02)

        self._traffic += [asyncio.create_task(feed()), asyncio.create_task(sample())]

    async def stop_traffic(self) -> None:
        for t in self._traffic:
            t.cancel()
        await asyncio.gather(*self._traffic, return_exceptions=True)
        self._traffic = []

    async def stop(self) -> None:
        await self.stop_traffic()
        for loop in self.loops.values():
            loop.cancel()
        for consumer in self.members.values():
            with contextlib.suppress(Exception):
                await consumer.close()
