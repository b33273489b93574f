"""``ballast demo``: everything on this machine, nothing to configure.

Starts a Kafka-protocol broker (Tansu) and an MQTT broker (amqtt) on free loopback ports,
the controller, and a fleet of real ``ManagedConsumer``s that process a skewed stream of
records. Then it plays a scenario: a member leaves, one joins, one crashes, and a lag
spike hits a few partitions. A live view shows members, partitions, lag, moves and the
generation, and ``/metrics`` is served. Every process it starts is stopped on exit,
Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from controller import logs
from controller.client import ManagedConsumer
from controller.runtime.config import Config
from controller.runtime.daemon import Controller
from controller.runtime.http import bound_port, serve
from controller.tools import embedded

GROUP = "demo-fleet"
TOPIC = "orders"
#: Simulated work per record: each consumer handles ~200 records/s.
WORK_SECONDS = 0.005


class Fleet:
    """Real consumers in this process; each processes records with a little work."""

    def __init__(self, kafka: str, mqtt_port: int) -> None:
        self.kafka = kafka
        self.mqtt_port = mqtt_port
        self.consumers: dict[str, ManagedConsumer] = {}
        self.loops: dict[str, asyncio.Task[None]] = {}
        self.processed = 0

    async def join(self, name: str) -> None:
        consumer = ManagedConsumer(
            GROUP,
            name,
            [TOPIC],
            bootstrap_servers=self.kafka,
            mqtt_port=self.mqtt_port,
            mqtt_keepalive=1,
            auto_offset_reset="earliest",
            report_lag=True,
        )
        await consumer.start()
        self.consumers[name] = consumer
        self.loops[name] = asyncio.create_task(self._consume(consumer))

    async def _consume(self, consumer: ManagedConsumer) -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=200, max_records=50)
            for records in batch.values():
                for _ in records:
                    await asyncio.sleep(WORK_SECONDS)
                    self.processed += 1
            if batch:
                await consumer.commit()

    async def leave(self, name: str) -> None:
        self.loops.pop(name).cancel()
        await self.consumers.pop(name).close()

    async def crash(self, name: str) -> None:
        self.loops.pop(name).cancel()
        await self.consumers.pop(name).abort()

    async def stop(self) -> None:
        for name in list(self.consumers):
            with contextlib.suppress(Exception):
                await self.leave(name)


async def traffic(kafka: str, partitions: int, rate: float, spike: asyncio.Event) -> None:
    """Skewed load: partition p gets weight 1/(p+1). One record per request, because
    Tansu's ListOffsets is exact only at batch boundaries (the lag poller uses it)."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka, linger_ms=0)
    await producer.start()
    rng = random.Random(7)
    weights = [1 / (p + 1) for p in range(partitions)]
    try:
        while True:
            if spike.is_set():
                spike.clear()
                for p in (partitions - 1, partitions - 2):
                    for _ in range(400):
                        await producer.send_and_wait(TOPIC, b"spike", partition=p)
            p = rng.choices(range(partitions), weights)[0]
            await producer.send_and_wait(TOPIC, b"x", partition=p)
            await asyncio.sleep(1 / rate)
    finally:
        await producer.stop()


def render(ctl: Controller, fleet: Fleet, elapsed: float, events: list[str]) -> str:
    view = ctl.group_view(GROUP)
    members = view["members"]
    quality = view["quality"]
    assert isinstance(members, dict)
    assert isinstance(quality, dict)
    moved = _counter(ctl, "ballast_partitions_moved_total")
    lines = [
        f"ballast demo  t={elapsed:5.1f}s  generation {view['generation']}  "
        f"epoch {view['controller_epoch']}  processed {fleet.processed}  "
        f"partitions moved {moved:.0f}",
        f"total lag {quality['total_lag']}  largest member lag {quality['max_member_lag']}  "
        f"skew {quality['lag_skew']:.2f}  count spread {quality['count_spread']}",
        "",
        f"{'member':<12}{'state':<8}{'partitions':>11}{'lag':>9}  held",
    ]
    for name, m in sorted(members.items()):
        state = "live" if m["live"] else ("grace" if m["in_leave_grace"] else "gone")
        held = ",".join(str(p) for _, p in m["granted"])
        lines.append(f"{name:<12}{state:<8}{len(m['granted']):>11}{m['lag']:>9}  {held}")
    lines += ["", "events:", *[f"  {e}" for e in events[-6:]]]
    return "\n".join(lines)


def _counter(ctl: Controller, name: str) -> float:
    """Sum of a counter's samples for the demo group, all reasons."""
    return sum(
        s.value
        for metric in ctl.metrics.registry.collect()
        for s in metric.samples
        if s.name == name and s.labels.get("group") == GROUP
    )


async def run_demo(
    members: int, partitions: int, duration: float, http_port: int, pace: float = 6.0
) -> None:
    logs.configure("error", "console")
    with (
        tempfile.TemporaryDirectory(prefix="ballast-demo-") as tmp,
        embedded.brokers(Path(tmp)) as (kafka, mqtt),
    ):
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
        await admin.start()
        await admin.create_topics([NewTopic(TOPIC, partitions, 1)])
        await admin.close()
        cfg = Config.model_validate(
            {
                "kafka": {"bootstrap_servers": kafka.address, "idempotent_producer": False},
                "mqtt": {"port": mqtt.port, "keepalive": 2},
                "rebalance": {
                    "delay": "300ms",
                    "leave_grace": "2s",
                    "handoff_timeout": "10s",
                    "min_lag": 100,
                    "max_moves": 4,
                },
                "lag": {"source": "poll", "poll_interval": "1s", "smoothing": 0.5},
                "groups": [{"name": GROUP}],
                "http": {"port": http_port},
            }
        )
        ctl = Controller(cfg)
        runner = await serve(ctl, "127.0.0.1", http_port)
        fleet = Fleet(kafka.address, mqtt.port)
        spike = asyncio.Event()
        events = [
            f"brokers: kafka {kafka.address} (Tansu), mqtt {mqtt.address} (amqtt)",
            f"metrics: http://127.0.0.1:{bound_port(runner)}/metrics",
        ]
        load: asyncio.Task[None] | None = None
        try:
            await ctl.start()
            await asyncio.gather(*(fleet.join(f"member-{i}") for i in range(members)))
            load = asyncio.create_task(traffic(kafka.address, partitions, 150.0, spike))
            steps: list[tuple[float, str, Callable[[], Awaitable[None]]]] = [
                (pace, "member-0 leaves cleanly", lambda: fleet.leave("member-0")),
                (2 * pace, "member-new joins", lambda: fleet.join("member-new")),
                (
                    3 * pace,
                    "member-1 crashes (its MQTT Will fires)",
                    lambda: fleet.crash("member-1"),
                ),
                (4 * pace, "lag spike: 400 records each on the last two partitions", _set(spike)),
            ]
            started = time.monotonic()
            end = started + max(duration, steps[-1][0] + 2 * pace)
            tty = sys.stdout.isatty()
            while time.monotonic() < end:
                elapsed = time.monotonic() - started
                while steps and elapsed >= steps[0][0]:
                    _, title, action = steps.pop(0)
                    events.append(f"t={elapsed:5.1f}s {title}")
                    await action()
                frame = render(ctl, fleet, elapsed, events)
                print(("\033[H\033[2J" if tty else "\n") + frame, flush=True)
                await asyncio.sleep(1.0 if tty else 3.0)
        finally:
            if load is not None:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await load
            await fleet.stop()
            await ctl.stop()
            await runner.cleanup()
    print("demo stopped; brokers shut down")


def _set(event: asyncio.Event) -> Callable[[], Awaitable[None]]:
    async def fire() -> None:
        event.set()

    return fire
