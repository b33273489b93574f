"""What the fail-stop and binding tests count, whatever the client: records produced
round-robin over a 12-partition topic, how often each was processed, and whether the
members' assignments have settled."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Protocol

from aiokafka import AIOKafkaProducer


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
