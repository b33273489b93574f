"""Autoscaling a consumer fleet on Ballast's recommendation against KEDA's rule, on a real
broker, the same input, the same HPA-like loop.

Each member is a process (``autoscale_member.py``, a pod) that processes at most
``--member-rate`` records/s. The input is ``--input`` records/s, then either a **step**
(x ``--factor`` for ``--step`` s, then back) or a **drift** (up to x ``--factor`` and
back, linearly, over ``--step`` s). A scaler loop acts as Kubernetes' HPA does on a
KEDA ScaledObject: every ``--sync`` s it reads the metric, ignores a change within 10 %
(HPA's tolerance), scales up at most to max(2 x, +4) per period, scales down only to the
highest recommendation of the last ``--stabilization`` s, within ``--min``/``--max``;
a new pod starts ``--start-delay`` s after it is asked for. The loop starts with the
change: until then both fleets run ``--initial`` pods, which keep up with the input.

- ``ballast``: ``ballast run`` with ``groups[].autoscale`` (lag polled every second,
  ``start_time`` the pod start, ``scale_down_delay`` ``--scale-down-delay``; lag moves
  from ``--min-lag`` records of skew, ``--lag-cooldown`` apart, so that members which
  have drained their share take the rest of the backlog); the
  metric is its recommended member count (what its KEDA scaler serves, target 1 a
  replica); the fleet consumes through Ballast (lag-aware placement: members that join
  for a backlog take it); a scale-in stops the members the recommendation names
  (``remove_first``: the least lag held). ``first_read_s``: each pod's seconds from its
  process start to its first processed record.
- ``keda``: KEDA's Kafka scaler rule, ``ceil(total lag / --lag-threshold)`` capped by the
  partition count; the fleet ``subscribe()``s with Kafka's sticky assignor (what KEDA's
  scaler is made for); a scale-in stops the newest pods (a ReplicaSet's choice).

Measured from the lag the driver reads itself (log-end minus committed offsets, every
second), from the change's start to the end: ``drained_s`` (until the lag is back under
``--drained-s`` seconds of the input having been over it: records in flight between
commits are always there), ``backlog_s`` (all the time over it),
``peak_lag``, ``lag_area`` (record-seconds), ``replica_changes``, ``replica_s`` (pods x
seconds: the bill), ``moved`` (partitions whose reader changed, from what the members
report) and ``read_twice`` (offsets processed by more than one read, from the offset
ranges the members report).

    python benchmarks/autoscale.py --json                 # the step: about 30 minutes
    python benchmarks/autoscale.py --scenario drift --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from load_soak import with_brokers

from controller.tools import apache_kafka, embedded

HERE = Path(__file__).parent
POLICIES = ("ballast", "keda")


def input_rate(a: argparse.Namespace, t: float) -> float:
    """Records/s at ``t`` s from the start."""
    x, base, step = t - float(a.warmup), float(a.input), float(a.step)
    if x < 0 or x >= step:
        return base
    if a.scenario == "step":
        return base * float(a.factor)
    return base * (1 + (float(a.factor) - 1) * (1 - abs(2 * x / step - 1)))


@dataclass
class Fleet:
    """The pods: started after the start delay, stopped with SIGTERM, their reports read."""

    a: argparse.Namespace
    policy: str
    kafka: str
    mqtt_port: int
    group: str
    topic: str
    started: float
    pods: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    stopping: list[asyncio.subprocess.Process] = field(default_factory=list)
    pending: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    born: dict[str, float] = field(default_factory=dict)
    #: Seconds from a pod's process start to the first record it processed.
    first_read: dict[str, float] = field(default_factory=dict)
    ranges: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    owner: dict[int, str] = field(default_factory=dict)
    moves: list[float] = field(default_factory=list)
    readers: list[asyncio.Task[None]] = field(default_factory=list)
    serial: int = 0
    crashes: int = 0
    closing: bool = False

    @property
    def replicas(self) -> int:
        return len(self.pods) + len(self.pending)

    def scale_to(self, n: int, remove_first: list[str]) -> None:
        while self.replicas < n:
            self.serial += 1
            name = f"pod-{self.serial:03d}"
            self.pending[name] = asyncio.create_task(self._start(name))
        surplus = self.replicas - n
        for name in sorted(self.pending, reverse=True)[:surplus]:  # not started: first
            self.pending.pop(name).cancel()
            surplus -= 1
        if surplus <= 0:
            return
        named = [m for m in remove_first if m in self.pods]
        newest = sorted(self.pods, key=self.born.__getitem__, reverse=True)
        victims = (named + [m for m in newest if m not in named])[:surplus]
        for name in victims:
            proc = self.pods.pop(name)
            self.stopping.append(proc)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    async def _start(self, name: str) -> None:
        await asyncio.sleep(self.a.start_delay)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "autoscale_member.py"),
            "--mode", "ballast" if self.policy == "ballast" else "group",
            "--bootstrap", self.kafka, "--mqtt-port", str(self.mqtt_port),
            "--group", self.group, "--topic", self.topic, "--name", name,
            "--rate", str(self.a.member_rate),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self.pending.pop(name, None)
        self.pods[name] = proc
        self.born[name] = time.monotonic()
        self.readers.append(asyncio.create_task(self._read(name, proc)))

    async def _read(self, name: str, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            event = json.loads(line)
            if event.get("r") and name not in self.first_read:
                self.first_read[name] = time.monotonic() - self.born[name]
            for p, first, last in event.get("r", ()):
                self.ranges.setdefault(p, []).append((first, last))
            for p in event.get("held", ()):
                before = self.owner.get(p)
                if before is not None and before != event["m"]:
                    self.moves.append(time.monotonic() - self.started)
                self.owner[p] = event["m"]
        if not self.closing and self.pods.get(name) is proc:  # died unasked: restarted
            self.crashes += 1
            print(f"{self.policy}: {name} exited {await proc.wait()}", file=sys.stderr)
            del self.pods[name]
            self.pending[name] = asyncio.create_task(self._start(name))

    async def stop(self) -> None:
        self.closing = True
        for task in self.pending.values():
            task.cancel()
        for proc in self.pods.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*(p.wait() for p in [*self.pods.values(), *self.stopping]))
        await asyncio.gather(*self.readers, return_exceptions=True)

    def read_twice(self) -> int:
        twice = 0
        for spans in self.ranges.values():
            end = -1
            for first, last in sorted(spans):
                twice += max(0, min(last, end) - first + 1)
                end = max(end, last)
        return twice


async def produce(a: argparse.Namespace, kafka: str, topic: str, started: float) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka, linger_ms=5)
    await producer.start()
    try:
        sent, due, last, n = 0, 0.0, started, 0
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            due += input_rate(a, now - started) * (now - last)
            last = now
            futures = []
            while sent < int(due):
                futures.append(await producer.send(topic, b"x", partition=n % a.partitions))
                sent, n = sent + 1, n + 1
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def watch_lag(
    kafka: str, group: str, topic: str, partitions: int, started: float, out: list[Any]
) -> None:
    """(seconds since start, total lag) every second: log-end minus committed offsets."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    ends = AIOKafkaConsumer(bootstrap_servers=kafka)
    await admin.start()
    await ends.start()
    tps = [KafkaTP(topic, p) for p in range(partitions)]
    try:
        while True:
            try:
                end = await ends.end_offsets(tps)
                done = await admin.list_consumer_group_offsets(group)
            except KafkaError as exc:  # a coordinator moving: the next second reads
                print(f"lag: {exc!r}", file=sys.stderr, flush=True)
            else:
                committed = {(tp.topic, tp.partition): o.offset for tp, o in done.items()}
                lag = sum(
                    max(0, end[tp] - max(0, committed.get((tp.topic, tp.partition), 0)))
                    for tp in tps
                )
                out.append((time.monotonic() - started, lag))
            await asyncio.sleep(1.0)
    finally:
        await ends.stop()
        await admin.close()


def recommended(port: int, group: str) -> tuple[int | None, list[str]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/groups/{group}", timeout=5) as r:
        sizing = json.load(r).get("autoscale") or {}
    print(f"ballast: {sizing.get('reason')}", file=sys.stderr, flush=True)
    return sizing.get("desired"), list(sizing.get("remove_first") or [])


@dataclass
class Hpa:
    """HPA's replica calculation for one external metric of type AverageValue."""

    a: argparse.Namespace
    history: list[tuple[float, int]] = field(default_factory=list)

    def decide(self, now: float, current: int, ratio: float | None, proposal: int) -> int:
        """``ratio``: the metric over its target for ``current`` replicas (None: no
        reading, keep); ``proposal``: ceil of metric / target."""
        a = self.a
        if ratio is None or abs(ratio - 1) <= 0.1:
            proposal = current
        proposal = min(max(proposal, a.min), a.max)
        self.history.append((now, proposal))
        self.history = [(t, r) for t, r in self.history if t >= now - a.stabilization]
        if proposal < current:
            proposal = min(current, max(r for _, r in self.history))
        return min(proposal, max(2 * current, current + 4))


async def scale(
    a: argparse.Namespace, policy: str, fleet: Fleet, lag: list[Any], port: int | None,
    changes: list[tuple[float, int]],
) -> None:  # fmt: skip
    hpa = Hpa(a)
    await asyncio.sleep(a.warmup)  # both policies meet the change with --initial pods
    while True:
        await asyncio.sleep(a.sync)
        now = time.monotonic() - fleet.started
        current = fleet.replicas
        remove: list[str] = []
        if policy == "ballast":
            assert port is not None
            try:
                desired, remove = await asyncio.to_thread(recommended, port, fleet.group)
            except OSError:
                desired = None
            ratio = None if desired is None else desired / current
            proposal = current if desired is None else desired
        else:
            total = lag[-1][1] if lag else 0
            proposal = min(a.partitions, math.ceil(total / a.lag_threshold))
            ratio = total / (a.lag_threshold * current)
        target = hpa.decide(now, current, ratio, proposal)
        if target != current:
            changes.append((now, target))
            fleet.scale_to(target, remove)


def daemon(a: argparse.Namespace, work: Path, kafka: str, mqtt_port: int, group: str) -> tuple[
    subprocess.Popen[bytes], int
]:  # fmt: skip
    port = embedded.free_port()
    config = work / f"{group}.yaml"
    config.write_text(
        f"kafka: {json.dumps(apache_kafka.kafka_settings(a.broker, kafka))}\n"
        f"mqtt: {{port: {mqtt_port}, keepalive: 5}}\n"
        "rebalance: {delay: 500ms, leave_grace: 10s, handoff_timeout: 15s, "
        f"min_lag: {a.min_lag}, lag_cooldown: {a.lag_cooldown}s}}\n"
        "lag: {source: poll, poll_interval: 1s}\n"
        f"groups: [{{name: {group}, autoscale: {{min_members: {a.min}, max_members: {a.max}, "
        f"drain_time: {a.drain_time}s, start_time: {a.start_delay}s, rate_window: 30s, "
        f"scale_down_delay: {a.scale_down_delay}s}}}}]\n"
        "signing: {required: false}\n"
        f"http: {{port: {port}}}\n"
        "logging: {format: json, level: warning}\n"
    )
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stderr=(work / f"{group}.log").open("ab"),
    )
    return proc, port


def figures(
    a: argparse.Namespace, lag: list[tuple[float, int]], changes: list[tuple[float, int]],
    fleet: Fleet, replicas: list[tuple[float, int]],
) -> dict[str, Any]:  # fmt: skip
    """The figures from the change's start (``--warmup`` s in) to the end."""
    t0 = a.warmup
    span = [(t, v) for t, v in lag if t >= t0]
    over = [v > a.drained_s * input_rate(a, t) for t, v in span]
    drained = 0.0
    if any(over):
        first = over.index(True)
        back = next((i for i in range(first, len(span)) if not over[i]), None)
        drained = (span[back][0] if back is not None else span[-1][0]) - t0
    backlog = sum(t2 - t1 for (t1, _), (t2, _), o in zip(span, span[1:], over, strict=False) if o)
    area = sum((t2 - t1) * v for (t1, v), (t2, _) in itertools.pairwise(span))
    pod_s = sum((t2 - t1) * n for (t1, n), (t2, _) in itertools.pairwise(replicas))
    return {
        "drained_s": round(drained, 1),
        "backlog_s": round(backlog, 1),
        "peak_lag": max((v for _, v in span), default=0),
        "lag_area": round(area),
        "replica_changes": sum(1 for t, _ in changes if t >= t0),
        "peak_replicas": max((n for t, n in replicas if t >= t0), default=0),
        "replica_s": round(pod_s),
        "moved": sum(1 for t in fleet.moves if t >= t0),
        "read_twice": fleet.read_twice(),
        "pod_crashes": fleet.crashes,
        "first_read_s": sorted(round(v, 1) for v in fleet.first_read.values()),
        "replicas": [[round(t), n] for t, n in changes],
    }


async def one_policy(
    a: argparse.Namespace, policy: str, work: Path, kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
) -> dict[str, Any]:  # fmt: skip
    group = topic = f"autoscale-{policy}"
    await embedded.create_topics(kafka.address, {topic: a.partitions})
    ctl, port = (None, None)
    if policy == "ballast":
        ctl, port = daemon(a, work, kafka.address, mqtt.port, group)
        await embedded.wait_until_ready(port, 60, proc=ctl)
    started = time.monotonic()
    fleet = Fleet(a, policy, kafka.address, mqtt.port, group, topic, started)
    lag: list[tuple[float, int]] = []
    changes: list[tuple[float, int]] = [(0.0, a.initial)]
    fleet.scale_to(a.initial, [])
    replicas: list[tuple[float, int]] = []

    async def count() -> None:
        while True:
            replicas.append((time.monotonic() - started, fleet.replicas))
            await asyncio.sleep(1.0)

    tasks = [
        asyncio.create_task(produce(a, kafka.address, topic, started)),
        asyncio.create_task(watch_lag(kafka.address, group, topic, a.partitions, started, lag)),
        asyncio.create_task(scale(a, policy, fleet, lag, port, changes)),
        asyncio.create_task(count()),
    ]
    try:
        await asyncio.sleep(a.warmup + a.step + a.after)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await fleet.stop()
        if ctl is not None:
            ctl.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                ctl.wait(60)
    if a.timeline:
        with Path(a.timeline).open("a") as out:
            out.write(json.dumps({"policy": policy, "lag": lag, "replicas": replicas}) + "\n")
    return figures(a, lag, changes, fleet, replicas)


async def run(a: argparse.Namespace) -> dict[str, Any]:
    async def body(
        work: Path, kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scenario": a.scenario, "partitions": a.partitions, "input": a.input,
            "factor": a.factor, "member_rate": a.member_rate,
        }  # fmt: skip
        for policy in a.policies.split(","):
            got = await one_policy(a, policy, work, kafka, mqtt)
            out.update({f"{policy}_{k}": v for k, v in got.items()})
            print(f"{policy}: {got}", file=sys.stderr, flush=True)
        return out

    return await with_brokers("ballast-autoscale-", a.broker, body)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scenario", choices=("step", "drift"), default="step")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    p.add_argument("--partitions", type=int, default=24)
    p.add_argument("--input", type=float, default=250.0, help="records/s before the change")
    p.add_argument("--factor", type=float, default=3.0, help="the change's peak multiple")
    p.add_argument("--member-rate", type=float, default=100.0, help="records/s a pod does")
    p.add_argument("--warmup", type=float, default=120.0, help="s before the change")
    p.add_argument("--step", type=float, default=300.0, help="the change's length (s)")
    p.add_argument("--after", type=float, default=420.0, help="s measured after it")
    p.add_argument("--initial", type=int, default=4, help="pods until the change")
    p.add_argument("--min", type=int, default=2)
    p.add_argument("--max", type=int, default=24)
    p.add_argument("--sync", type=float, default=15.0, help="HPA's sync period (s)")
    p.add_argument("--stabilization", type=float, default=300.0, help="HPA's scale-down window")
    p.add_argument("--start-delay", type=float, default=10.0, help="a new pod's start (s)")
    p.add_argument("--lag-threshold", type=int, default=500, help="KEDA's lagThreshold")
    p.add_argument("--drain-time", type=float, default=60.0, help="Ballast's drain_time (s)")
    p.add_argument(
        "--scale-down-delay", type=float, default=60.0,
        help="Ballast's scale_down_delay (s): its recommendations agree this long before a"
        " step down (the HPA's stabilization applies after it, as to KEDA's)",
    )  # fmt: skip
    p.add_argument(
        "--min-lag", type=int, default=100,
        help="Ballast's rebalance.min_lag: member lag below this moves nothing for lag (1 s"
        " of a pod's work, as operations.md advises for autoscaled groups)",
    )  # fmt: skip
    p.add_argument(
        "--lag-cooldown", type=float, default=2.0,
        help="Ballast's rebalance.lag_cooldown (s): the wait after partitions moved for lag"
        " (a backlog being drained is balanced again as members finish their share)",
    )  # fmt: skip
    p.add_argument(
        "--drained-s", type=float, default=2.0,
        help="drained: a lag of at most this many seconds of the input at that moment",
    )  # fmt: skip
    p.add_argument("--timeline", help="write each policy's lag and replicas over time here")
    p.add_argument("--json", action="store_true", help="one JSON line")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)  # stop as Ctrl-C does: everything it started
    out = asyncio.run(run(a))
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>32}  {v}")


if __name__ == "__main__":
    main()
