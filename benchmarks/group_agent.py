"""One process of ``group_ops``' fleet: a slice of the members as real aiokafka consumers
that ``subscribe()`` through Kafka's group protocol, driven and reporting exactly as
``fleet_agent.py`` is (the same commands and the same events), so that ``fleet_ops``'
per-partition figures compare the two ways of deciding who reads what.

A member "holds" what its rebalance listener was last given: partitions are taken away
in ``on_partitions_revoked`` and handed over in ``on_partitions_assigned``, which is when
a consumer stops and starts fetching them. ``crash`` is not offered: a member of a lost
zone dies with its process (``group_ops`` puts each zone in processes of its own and
SIGKILLs them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from typing import Any

from agent_io import say, serve
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTP
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from controller import logs
from controller.client import group_assignor


def assignor(name: str) -> type[AbstractPartitionAssignor]:
    kafkas: dict[str, type[AbstractPartitionAssignor]] = {
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
    }
    return kafkas.get(name) or group_assignor(name)


class Reporter(ConsumerRebalanceListener):  # type: ignore[misc]
    """Reports what the member holds after each change its group protocol makes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.held: set[int] = set()

    def report(self) -> None:
        say({"t": time.time(), "m": self.name, "held": sorted(self.held)})

    async def on_partitions_revoked(self, revoked: list[KafkaTP]) -> None:
        if revoked:
            self.held -= {tp.partition for tp in revoked}
            self.report()

    async def on_partitions_assigned(self, assigned: list[KafkaTP]) -> None:
        self.held |= {tp.partition for tp in assigned}
        self.report()


class Member:
    def __init__(self, name: str, a: argparse.Namespace, rack: str | None) -> None:
        self.name = name
        self.reporter = Reporter(name)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            client_id=name,
            group_instance_id=name if a.static else None,
            partition_assignment_strategy=(assignor(a.assignor),),
            session_timeout_ms=a.session_timeout_ms,
            heartbeat_interval_ms=max(100, a.session_timeout_ms // 10),
            rebalance_timeout_ms=60_000,
            enable_auto_commit=False,
            client_rack=rack,
        )
        self._poll: asyncio.Task[None] | None = None

    async def start(self, topic: str) -> None:
        await self.consumer.start()
        self.consumer.subscribe([topic], listener=self.reporter)
        self._poll = asyncio.create_task(self._polling())

    async def _polling(self) -> None:
        """Fetching is what drives aiokafka's rebalances to completion."""
        while True:
            await self.consumer.getmany(timeout_ms=200, max_records=1)

    async def stop(self) -> None:
        """A clean stop: with a ``group_instance_id`` aiokafka does not send LeaveGroup
        (static membership keeps the member's partitions for its session timeout)."""
        if self._poll is not None:
            self._poll.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poll
        self.reporter.held.clear()
        self.reporter.report()
        await self.consumer.stop()


async def main(a: argparse.Namespace) -> None:
    members: dict[str, Member] = {}

    async def join(name: str, rack: str | None) -> None:
        m = members[name] = Member(name, a, rack)
        await m.start(a.topic)

    async def run(cmd: dict[str, Any]) -> None:
        names: list[str] = cmd["names"]
        if cmd["op"] == "join":
            racks: list[str | None] = cmd.get("racks") or [None] * len(names)
            await asyncio.gather(*(join(n, r) for n, r in zip(names, racks, strict=True)))
        elif cmd["op"] in ("leave", "stop"):
            await asyncio.gather(*(members.pop(n).stop() for n in names if n in members))
        else:
            raise ValueError(f"unknown op {cmd['op']!r}")

    async def close() -> None:
        await asyncio.gather(*(m.stop() for m in members.values()), return_exceptions=True)

    await serve(run, close)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--assignor", default="sticky", help="roundrobin, sticky, or a Ballast strategy")
    p.add_argument("--static", action="store_true", help="static membership (group.instance.id)")
    p.add_argument("--session-timeout-ms", type=int, default=10_000)
    logs.configure("warning", "json")  # to stderr: stdout carries the events
    asyncio.run(main(p.parse_args()))
