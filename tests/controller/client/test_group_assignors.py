"""Ballast's strategies inside Kafka's own group protocol, on the real broker: aiokafka
consumers on ``subscribe()`` with ``group_assignor(...)`` join, leave and crash; after
every rebalance the group holds exactly what the pure function computes from the
leader's inputs."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from assignors import STRATEGIES, TopicPartition, assign
from controller.adapters.group_protocol import BallastAssignor
from controller.client import GroupLag, group_assignor
from controller.tools import embedded

pytestmark = pytest.mark.integration

#: Every strategy on Kafka 4.4; two in the compatibility subset. All six send the broker
#: the same user data (generation, owned partitions, lag: ``BallastAssignor``) under their
#: own protocol name, so what a broker can get wrong is seen with one that keeps what
#: members own (lagsticky) and one that ignores it (range); six took 3.6 min of Tansu's
#: pass, whose rebalances run on timers.
ON_EVERY_BROKER = ("lagsticky", "range")
EVERY_STRATEGY = [
    pytest.param(s, marks=[pytest.mark.compat] if s in ON_EVERY_BROKER else []) for s in STRATEGIES
]

#: A member in its own process, killed with SIGKILL to crash it.
CRASHABLE = """
import asyncio, sys
from aiokafka import AIOKafkaConsumer
from controller.client import group_assignor

async def main() -> None:
    bootstrap, group, topic, strategy = sys.argv[1:5]
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         enable_auto_commit=False, session_timeout_ms=6000,
                         heartbeat_interval_ms=500,
                         partition_assignment_strategy=(group_assignor(strategy),))
    await c.start()
    while True:
        await c.getmany(timeout_ms=200)

asyncio.run(main())
"""


HOT = (0, 2)


class Group:
    """In-process members of one consumer group, polled together."""

    def __init__(self, kafka: embedded.BrokerProcess, group: str, topic: str) -> None:
        self.kafka, self.group, self.topic = kafka, group, topic
        self.members: dict[str, tuple[AIOKafkaConsumer, type[BallastAssignor]]] = {}

    async def join(
        self, name: str, strategy: str, lag: Callable[[], dict[TopicPartition, int]] | None = None
    ) -> AIOKafkaConsumer:
        assignor = group_assignor(strategy, lag=lag)
        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.kafka.address,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            partition_assignment_strategy=(assignor,),
        )
        await consumer.start()
        self.members[name] = (consumer, assignor)
        return consumer

    async def leave(self, name: str) -> None:
        consumer, _ = self.members.pop(name)
        await consumer.stop()  # LeaveGroup: a clean leave

    async def stop(self) -> None:
        for name in list(self.members):
            await self.leave(name)

    def held(self) -> list[frozenset[TopicPartition]]:
        return [
            frozenset(TopicPartition(tp.topic, tp.partition) for tp in c.assignment())
            for c, _ in self.members.values()
        ]

    async def settled(self, partitions: int, elsewhere: int = 0, timeout: float = 60) -> None:
        """Until a rebalance over these members (and ``elsewhere`` other ones) is done: some
        member led it, and each of ours holds one share of its result."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c, _ in self.members.values():
                await c.getmany(timeout_ms=50)
            if self.led(partitions, len(self.members) + elsewhere) is not None:
                return
        raise AssertionError(f"group did not settle: {self.held()}")

    def led(self, partitions: int, members: int) -> type[BallastAssignor] | None:
        """The assignor whose last result covers ``partitions`` over ``members``, of which
        ours hold their shares now."""
        held = sorted(self.held(), key=sorted)
        for _, cls in self.members.values():
            last = cls.last
            if last is None or len(last.result) != members:
                continue
            shares = [frozenset(v) for v in last.result.values()]
            if sum(map(len, shares)) == partitions and all(h and h in shares for h in held):
                return cls
        return None

    def check_pure(self, strategy: str, partitions: int = 12, elsewhere: int = 0) -> None:
        cls = self.led(partitions, len(self.members) + elsewhere)
        assert cls is not None
        last = cls.last
        assert last is not None
        pure = assign(strategy, last.counts, last.subscriptions, current=last.current, lag=last.lag)
        assert pure == last.result


@asynccontextmanager
async def group_of(
    kafka: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> AsyncIterator[Group]:
    g = Group(kafka, names[0], topic)
    try:
        yield g
    finally:
        await g.stop()


@pytest.mark.parametrize("strategy", EVERY_STRATEGY)
async def test_join_and_leave_hold_what_the_pure_function_computes(
    kafka: embedded.BrokerProcess, names: tuple[str, str], topic: str, strategy: str
) -> None:
    async with group_of(kafka, names, topic) as g:
        for name in ("a", "b", "c"):
            await g.join(name, strategy)
            await g.settled(12)
            g.check_pure(strategy)
        assert sorted(map(len, g.held())) == [4, 4, 4]
        before = dict(zip(g.members, g.held(), strict=True))
        await g.leave("b")
        await g.settled(12)
        g.check_pure(strategy)
        after = dict(zip(g.members, g.held(), strict=True))
        if strategy in ("sticky", "lagsticky"):
            # KIP-54: what a and c held, they keep; only b's partitions move.
            assert all(before[m] <= after[m] for m in after)


@pytest.mark.parametrize("strategy", EVERY_STRATEGY)
async def test_a_crashed_member_is_replaced_by_the_pure_result(
    kafka: embedded.BrokerProcess, names: tuple[str, str], topic: str, strategy: str
) -> None:
    async with group_of(kafka, names, topic) as g:
        for name in ("a", "b"):
            await g.join(name, strategy)
        crashable = subprocess.Popen(
            [sys.executable, "-c", CRASHABLE, kafka.address, names[0], topic, strategy]
        )
        try:
            await g.settled(12, elsewhere=1)  # the third member, in its own process
            crashable.send_signal(signal.SIGKILL)
            crashable.wait(10)
            await g.settled(12, timeout=90)  # after the session timeout
            g.check_pure(strategy)
        finally:
            if crashable.poll() is None:
                crashable.kill()
                crashable.wait(10)


@pytest.mark.compat
@pytest.mark.parametrize("strategy", ["lag", "lagsticky"])
async def test_skewed_lag_puts_the_hot_partitions_on_different_members(
    kafka: embedded.BrokerProcess, names: tuple[str, str], topic: str, strategy: str
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address)
    await producer.start()
    try:
        # 0 and 2: sticky, range, round robin and fair would all put them on one member.
        for p in HOT:
            for i in range(300):
                await producer.send_and_wait(topic, f"{p}-{i}".encode(), partition=p)
    finally:
        await producer.stop()
    lag = GroupLag(reset="earliest")
    async with group_of(kafka, names, topic) as g:
        first = await g.join("a", strategy, lag=lag)
        await g.settled(12)
        await lag.refresh(first)  # a owns everything; the hot two are 300 behind
        assert lag()[TopicPartition(topic, 0)] == 300
        await g.join("b", strategy)
        await g.settled(12)
        g.check_pure(strategy)
        owners = {
            name: {tp.partition for tp in c.assignment()} for name, (c, _) in g.members.items()
        }
        hot = sorted(name for name, parts in owners.items() for p in parts if p in HOT)
        assert hot == ["a", "b"], owners


@pytest.mark.compat
async def test_a_member_with_only_range_makes_the_group_use_range(
    kafka: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """The broker picks a protocol every member supports, as for Kafka's own assignors."""
    ballast = group_assignor("sticky")
    both = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka.address,
        group_id=names[0],
        partition_assignment_strategy=(ballast, RangePartitionAssignor),
    )
    only_range = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka.address,
        group_id=names[0],
        partition_assignment_strategy=(RangePartitionAssignor,),
    )
    await only_range.start()
    await both.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for c in (both, only_range):
                await c.getmany(timeout_ms=50)
            mine, theirs = len(both.assignment()), len(only_range.assignment())
            if mine and theirs and mine + theirs == 12:
                break
            await asyncio.sleep(0.05)
        held = sorted(sorted(tp.partition for tp in c.assignment()) for c in (both, only_range))
        assert held == [list(range(6)), list(range(6, 12))]  # range's contiguous halves
        assert ballast.last is None  # Ballast's assignor never ran
    finally:
        await both.stop()
        await only_range.stop()
