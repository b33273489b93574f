"""``ballast demo``: everything on this machine, nothing to configure.

Starts a Kafka-protocol broker (Tansu) and an MQTT broker (amqtt) on free loopback ports,
the controller, and a fleet of real consumers (``ManagedConsumer``s, or with ``--client``
another binding's) that process a skewed stream of
records, each at most ~200 records/s. Then it plays a scenario: a member leaves, one
joins, one crashes, and a sustained hot spot hits every partition of one member, more
than that member can process. With ``lagsticky`` the controller sees that member's lag
pass the policy's bound and moves hot partitions to members with room, and the live view
says so; with ``sticky`` (the controller given no lag) the hot member falls further
behind. A live view shows members, partitions, lag measured directly (log end minus
processed), moves and the generation, and ``/metrics`` is served. Every process it starts
is stopped on exit, Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP

from controller import logs
from controller.client import ManagedConsumer, PresenceOptions
from controller.client.sync_binding import SyncBinding
from controller.config import Config
from controller.runtime.daemon import Controller
from controller.runtime.http import serve
from controller.tasks import cancel_and_wait
from controller.tools import apache_kafka, embedded, worker
from controller.tools.worker import Client

GROUP = "demo-fleet"
TOPIC = "orders"
#: Simulated work per record: each consumer handles ~200 records/s.
WORK_SECONDS = 0.005
BASE_RATE = 150.0
#: Records/s on each hot partition: a member holding all of them (4 to 6 in the default
#: demo) gets 240-360/s, more than it can process; spread out, every member keeps up.
HOT_RATE = 60.0
Strategy = Literal["lagsticky", "sticky"]
STRATEGIES: tuple[Strategy, ...] = ("lagsticky", "sticky")


class Fleet:
    """Real consumers in this process, on the client binding asked for; each processes
    records with a little work. aiokafka members are tasks on this loop; a synchronous
    binding's members each poll on a thread of their own, as a synchronous application
    does."""

    def __init__(self, kafka: str, mqtt_port: int, report_lag: bool, client: Client) -> None:
        self.kafka = kafka
        self.mqtt_port = mqtt_port
        self.report_lag = report_lag
        self.client = client
        self.members: dict[str, _Running] = {}
        self.processed = 0
        #: Next offset to process, per partition, whoever processed it.
        self.done: dict[int, int] = {}
        self._lock = threading.Lock()  # synchronous members count from their threads

    def _settings(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.kafka,
            "presence": PresenceOptions(mqtt_port=self.mqtt_port, mqtt_keepalive=1),
            "auto_offset_reset": "earliest",
            "report_lag": self.report_lag,
        }

    def _worked(self, partition: int, offset: int) -> None:
        with self._lock:
            self.processed += 1
            self.done[partition] = max(self.done.get(partition, 0), offset + 1)

    async def join(self, name: str) -> None:
        if self.client == "aiokafka":
            consumer = ManagedConsumer(GROUP, name, [TOPIC], **self._settings())
            await consumer.start()
            loop = asyncio.create_task(self._consume(consumer))
            self.members[name] = _Running(
                lambda: consumer.assignment,
                lambda: _stopped(loop, consumer.close),
                lambda: _stopped(loop, consumer.abort),
            )
            return
        member, fetch, commit_error = worker.sync_member(
            self.client, GROUP, name, [TOPIC], **self._settings()
        )
        await asyncio.to_thread(member.start)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._consume_sync, args=(member, fetch, commit_error, stop), daemon=True
        )
        thread.start()

        async def ended(end: Callable[[], None]) -> None:
            stop.set()
            await asyncio.to_thread(thread.join)
            await asyncio.to_thread(end)

        self.members[name] = _Running(
            lambda: member.assignment, lambda: ended(member.close), lambda: ended(member.abort)
        )

    async def _consume(self, consumer: ManagedConsumer) -> None:
        while True:
            batch = await consumer.getmany(timeout_ms=200, max_records=50)
            for tp, records in batch.items():
                for record in records:
                    await asyncio.sleep(WORK_SECONDS)
                    self._worked(tp.partition, record.offset)
            if batch:
                await consumer.commit()

    def _consume_sync(
        self,
        member: SyncBinding[Any],
        fetch: Callable[[], list[worker.Processed]],
        commit_error: type[Exception],
        stop: threading.Event,
    ) -> None:
        while not stop.is_set():
            batch = fetch()
            for _, partition, offset, _ in batch:
                time.sleep(WORK_SECONDS)
                self._worked(partition, offset)
            if batch:
                with contextlib.suppress(commit_error):  # the next batch's commit covers it
                    member.commit()

    def holding(self) -> dict[str, list[int]]:
        return {
            name: sorted(p for _, p in m.assignment()) for name, m in sorted(self.members.items())
        }

    async def leave(self, name: str) -> None:
        await self.members.pop(name).leave()

    async def crash(self, name: str) -> None:
        await self.members.pop(name).crash()

    async def stop(self) -> None:
        for name in list(self.members):
            with contextlib.suppress(Exception):
                await self.leave(name)


@dataclass(frozen=True)
class _Running:
    """One member of the demo's fleet, whatever its binding."""

    assignment: Callable[[], Iterable[tuple[str, int]]]
    leave: Callable[[], Awaitable[None]]
    crash: Callable[[], Awaitable[None]]


async def _stopped(loop: asyncio.Task[None], end: Callable[[], Awaitable[None]]) -> None:
    await cancel_and_wait(loop)
    await end()


async def traffic(kafka: str, partitions: int, hot: asyncio.Queue[list[int]]) -> None:
    """Skewed load (partition p gets weight 1/(p+1)), plus each hot partition at
    ``HOT_RATE`` once the scenario names them. One record per request, because Tansu's
    ListOffsets is exact only at batch boundaries (the lag poller and the view use it)."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka, linger_ms=0)
    await producer.start()
    rng = random.Random(7)
    weights = [1 / (p + 1) for p in range(partitions)]

    async def steady(partition: int) -> None:
        while True:
            await producer.send_and_wait(TOPIC, b"hot", partition=partition)
            await asyncio.sleep(1 / HOT_RATE)

    heating: list[asyncio.Task[None]] = []
    try:
        while True:
            if not hot.empty():
                heating += [asyncio.create_task(steady(p)) for p in hot.get_nowait()]
            p = rng.choices(range(partitions), weights)[0]
            await producer.send_and_wait(TOPIC, b"x", partition=p)
            await asyncio.sleep(1 / BASE_RATE)
    finally:
        for task in heating:
            task.cancel()
        await asyncio.gather(*heating, return_exceptions=True)
        await producer.stop()


@dataclass(frozen=True)
class Frame:
    """What one refresh of the live view saw."""

    lag: dict[str, int]  # per member, measured: log end - processed
    moved: float
    moved_for_lag: float
    view: dict[str, Any]  # the controller's group view

    @property
    def max_lag(self) -> int:
        return max(self.lag.values(), default=0)

    @property
    def skew(self) -> float:
        total = sum(self.lag.values())
        return self.max_lag * len(self.lag) / total if total > 0 else 1.0


async def measure(ctl: Controller, fleet: Fleet, ends: AIOKafkaConsumer, partitions: int) -> Frame:
    tps = [KafkaTP(TOPIC, p) for p in range(partitions)]
    end = await ends.end_offsets(tps)
    lag = {
        member: sum(max(end[KafkaTP(TOPIC, p)] - fleet.done.get(p, 0), 0) for p in held)
        for member, held in fleet.holding().items()
    }
    return Frame(
        lag,
        _counter(ctl, "ballast_partitions_moved_total"),
        _counter(ctl, "ballast_partitions_moved_total", reason="lag"),
        ctl.group_view(GROUP),
    )


def lag_events(view: dict[str, Any], seen: int, started_at: float) -> tuple[list[str], int]:
    """The controller's own account of each lag move since ``seen`` rebalances (its
    group view's ``recent_rebalances``): ``moved 2 for lag: member-2 was 4.1x the bound``."""
    recent: list[dict[str, Any]] = view["recent_rebalances"]
    fresh = [r for r in recent if r["generation"] > seen]
    lines = [
        f"t={r['at'] - started_at:5.1f}s generation {r['generation']} {r['why']}"
        for r in fresh
        if r["moved_for_lag"]
    ]
    return lines, max((r["generation"] for r in recent), default=seen)


def render(
    frame: Frame, strategy: Strategy, elapsed: float, fleet: Fleet, events: list[str]
) -> str:
    view = frame.view
    members: dict[str, Any] = view["members"]
    lines = [
        f"ballast demo ({strategy})  t={elapsed:5.1f}s  generation {view['generation']}  "
        f"epoch {view['controller_epoch']}  processed {fleet.processed}  "
        f"partitions moved {frame.moved:.0f} ({frame.moved_for_lag:.0f} for lag)",
        f"largest member lag {frame.max_lag}  skew {frame.skew:.2f}  "
        f"count spread {view['quality']['count_spread']}",
        "",
        f"{'member':<12}{'state':<13}{'partitions':>11}{'lag':>9}  held",
    ]
    for name, m in sorted(members.items()):
        held = ",".join(str(p) for _, p in m["granted"])
        lag = frame.lag.get(name, 0)
        lines.append(f"{name:<12}{m['state']:<13}{len(m['granted']):>11}{lag:>9}  {held}")
    lines += ["", "events:", *[f"  {e}" for e in events[-7:]]]
    return "\n".join(lines)


def _counter(ctl: Controller, name: str, **labels: str) -> float:
    """Sum of a counter's samples for the demo group (matching ``labels``)."""
    return sum(
        s.value
        for metric in ctl.metrics.registry.collect()
        for s in metric.samples
        if s.name == name
        and s.labels.get("group") == GROUP
        and all(s.labels.get(k) == v for k, v in labels.items())
    )


@dataclass(frozen=True)
class Outcome:
    strategy: Strategy
    max_lag: int
    skew: float
    moved: float
    moved_for_lag: float
    peak_lag: int


def _config(
    kafka: str, mqtt_port: int, http_port: int, strategy: Strategy, broker: apache_kafka.BrokerKind
) -> Config:
    return Config.model_validate(
        {
            "kafka": apache_kafka.kafka_settings(broker, kafka),
            "mqtt": {"port": mqtt_port, "keepalive": 2},
            "rebalance": {
                "delay": "300ms",
                "leave_grace": "2s",
                "handoff_timeout": "10s",
                "min_lag": 100,
                "max_moves": 4,
            },
            # sticky: the controller is given no lag, so it balances counts and keeps
            # partitions where they are, as a count-based sticky assignor does.
            "lag": {"source": "poll", "poll_interval": "1s", "smoothing": 0.5}
            if strategy == "lagsticky"
            else {"source": "none"},
            "groups": [{"name": GROUP}],
            "http": {"port": http_port},
        }
    )


async def run_demo(
    members: int,
    partitions: int,
    duration: float,
    http_port: int,
    pace: float = 6.0,
    *,
    strategy: Strategy = "lagsticky",
    broker: apache_kafka.BrokerKind = "tansu",
    client: Client = "aiokafka",
) -> Outcome:
    logs.configure("error", "console")
    with (
        tempfile.TemporaryDirectory(prefix="ballast-demo-") as tmp,
        apache_kafka.running(broker, Path(tmp)) as kafka,
        embedded.amqtt(Path(tmp)).start() as mqtt,
    ):
        await embedded.create_topics(kafka.address, {TOPIC: partitions})
        ctl = Controller(_config(kafka.address, mqtt.port, http_port, strategy, broker))
        runner = await serve(ctl, "127.0.0.1", http_port)
        fleet = Fleet(kafka.address, mqtt.port, strategy == "lagsticky", client)
        ends = AIOKafkaConsumer(bootstrap_servers=kafka.address)
        hot: asyncio.Queue[list[int]] = asyncio.Queue()
        events = [
            f"brokers: kafka {kafka.address} ({apache_kafka.NAMES[broker]}), "
            f"mqtt {mqtt.address} (amqtt); members on {client}",
            f"metrics: http://127.0.0.1:{runner.port}/metrics",
        ]
        load: asyncio.Task[None] | None = None

        async def heat() -> None:
            holding = fleet.holding()
            victim = max(holding, key=lambda m: (len(holding[m]), m))
            events[-1] += (
                f": {victim}'s partitions {holding[victim]} now get {HOT_RATE:.0f} "
                f"records/s each, more than {victim} can process"
            )
            await hot.put(holding[victim])

        try:
            await ends.start()
            await ctl.start()
            await asyncio.gather(*(fleet.join(f"member-{i}") for i in range(members)))
            load = asyncio.create_task(traffic(kafka.address, partitions, hot))
            steps: list[tuple[float, str, Callable[[], Awaitable[None]]]] = [
                (pace, "member-0 leaves cleanly", lambda: fleet.leave("member-0")),
                (2 * pace, "member-new joins", lambda: fleet.join("member-new")),
                (
                    3 * pace,
                    "member-1 crashes (its MQTT Will fires)",
                    lambda: fleet.crash("member-1"),
                ),
                (4 * pace, "hot spot", heat),
            ]
            started = time.monotonic()
            end = started + 4 * pace + max(duration, 5 * pace, 15.0)
            tty = sys.stdout.isatty()
            started_at = time.time()
            last = await measure(ctl, fleet, ends, partitions)
            seen, peak = 0, 0
            while time.monotonic() < end:
                elapsed = time.monotonic() - started
                while steps and elapsed >= steps[0][0]:
                    _, title, action = steps.pop(0)
                    events.append(f"t={elapsed:5.1f}s {title}")
                    await action()
                frame = await measure(ctl, fleet, ends, partitions)
                notes, seen = lag_events(frame.view, seen, started_at)
                events += notes
                last, peak = frame, max(peak, frame.max_lag)
                print(
                    ("\033[H\033[2J" if tty else "\n")
                    + render(frame, strategy, elapsed, fleet, events),
                    flush=True,
                )
                await asyncio.sleep(1.0 if tty else 3.0)
            outcome = Outcome(
                strategy, last.max_lag, last.skew, last.moved, last.moved_for_lag, peak
            )
        finally:
            await cancel_and_wait(load)
            await fleet.stop()
            await ends.stop()
            await ctl.stop()
            await runner.cleanup()
    print("demo stopped; brokers shut down")
    return outcome


def compare(outcomes: list[Outcome]) -> str:
    """The runs side by side: what lag awareness bought."""
    rows = [
        ("largest member lag at the end", [f"{o.max_lag}" for o in outcomes]),
        ("largest member lag, peak", [f"{o.peak_lag}" for o in outcomes]),
        ("lag skew at the end (max / mean)", [f"{o.skew:.2f}" for o in outcomes]),
        ("partitions moved", [f"{o.moved:.0f}" for o in outcomes]),
        ("  of which for lag", [f"{o.moved_for_lag:.0f}" for o in outcomes]),
    ]
    width = max(len(r[0]) for r in rows)
    head = f"{'':<{width}}" + "".join(f"{o.strategy:>12}" for o in outcomes)
    return "\n".join([head, *(f"{t:<{width}}" + "".join(f"{v:>12}" for v in vs) for t, vs in rows)])
