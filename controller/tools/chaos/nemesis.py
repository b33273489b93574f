"""Seeded, named faults against a real HA deployment, and the history of a run.

A run starts Apache Kafka (or Tansu: ``broker="tansu"``), Mosquitto, ``replicas``
``ballast run`` processes with ``ha.enabled`` and ``workers`` ``ballast worker`` processes
on one group, produces unique numbered records at a steady rate, and applies ``faults``
faults drawn from ``FAULTS`` by a ``random.Random(seed)``, a few seconds apart: the same
seed gives the same sequence.
``freeze_at_point`` restarts a replica with a fault point armed (``faultpoints``): it
freezes itself exactly between a read and a write, and the nemesis thaws it later. After
the last fault everything is healed, every record must be processed, and the checker,
``ballast audit`` and the history say what happened. On Kafka the replicas publish in
transactions (``ha.transactional_id_prefix``, unless ``transactions=False``), so a deposed
leader's producer is fenced at the broker too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from controller.runtime.faultpoints import ENV as FAULT_ENV
from controller.tasks import cancel_and_wait
from controller.tools import apache_kafka, embedded
from controller.tools.audit import run_audit
from controller.tools.chaos import checker

BIN = Path(sys.executable).parent / "ballast"
GROUP = "chaos"
TOPIC = "input"
PARTITIONS = 24
#: membership.session_timeout with Kafka presence (members beat every 0.5 s to 2 s).
KAFKA_SESSION = 6.0
#: (fault, weight). Worker faults are the common case; replica faults the dangerous one.
FAULTS = (
    ("kill_worker", 3),
    ("stop_worker", 2),
    ("start_worker", 3),
    ("kill_leader", 2),
    ("pause_leader", 2),
    ("freeze_at_point", 3),
    ("restart_mqtt", 1),
)
#: Where ``freeze_at_point`` freezes a replica (see ``controller.runtime.faultpoints``).
FREEZE_POINTS = (
    "acquire.after_read",
    "acquire.before_epoch",
    "acquire.before_fence",
    "publish.after_confirm",
    "release.before_cancel",
)


@dataclass
class Timing:
    session_timeout: float = 3.0
    leave_grace: float = 6.0
    handoff_timeout: float = 8.0
    delay: float = 0.2
    rate: float = 40.0  # records per second
    gap: tuple[float, float] = (3.0, 5.0)  # seconds between faults


@dataclass
class Run:
    """The processes of one run and its history; ``async with`` stops everything."""

    workdir: Path
    replicas: int = 2
    timing: Timing = field(default_factory=Timing)
    broker: apache_kafka.BrokerKind = "kafka"
    transactions: bool = True
    #: How workers announce themselves: MQTT (retained presence) or the heartbeat topic.
    presence: Literal["mqtt", "kafka"] = "mqtt"
    #: Classpath of the Java member (``clients/java``), for ``start_worker(java=True)``.
    java_classpath: str | None = None
    kafka: embedded.BrokerProcess | None = None
    mqtt: embedded.BrokerProcess | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    deaths: dict[str, list[float]] = field(default_factory=dict)
    produced: int = 0
    _producing: asyncio.Task[None] | None = None
    #: Replicas we SIGSTOPped or that froze at a fault point: name -> when to thaw.
    _frozen: dict[str, float] = field(default_factory=dict)
    #: Replicas armed with a fault point: name -> (log size at start, seconds to hold).
    _armed: dict[str, tuple[int, float]] = field(default_factory=dict)

    # ------------------------------------------------------------------ setup

    async def __aenter__(self) -> Run:
        self.kafka = apache_kafka.broker(self.broker, self.workdir).start(
            timeout=apache_kafka.start_timeout(self.broker)
        )
        self.mqtt = embedded.mosquitto(self.workdir).start()
        admin = AIOKafkaAdminClient(bootstrap_servers=self.kafka.address)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        finally:
            await admin.close()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await cancel_and_wait(self._producing)
        for name, proc in self.procs.items():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.send_signal(signal.SIGKILL if name.startswith("r") else signal.SIGTERM)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for broker in (self.mqtt, self.kafka):
            if broker is not None:
                broker.stop()

    @property
    def transactional(self) -> bool:
        return self.transactions and self.broker == "kafka"

    def note(self, op: str, **detail: Any) -> None:
        entry = {"t": time.time(), "op": op, **detail}
        self.history.append(entry)
        with (self.workdir / "history.jsonl").open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def _config(self, replica: str) -> Path:
        assert self.kafka is not None
        assert self.mqtt is not None
        t = self.timing
        path = self.workdir / f"{replica}.yaml"
        self.ports.setdefault(replica, embedded.free_port())
        kafka = json.dumps(apache_kafka.kafka_settings(self.broker, self.kafka.address))
        transactions = f"transactional_id_prefix: {GROUP}-publisher, " if self.transactional else ""
        path.write_text(f"""
kafka: {kafka}
mqtt: {{port: {self.mqtt.port}, client_id: ctl-{replica}, keepalive: 2}}
rebalance: {{delay: {t.delay}s, leave_grace: {t.leave_grace}s,
             handoff_timeout: {t.handoff_timeout}s}}
lag: {{source: none}}
ha: {{enabled: true, shards: 4, session_timeout: {t.session_timeout}s, {transactions}
      heartbeat_interval: {t.session_timeout / 6:.3f}s, replica_id: {replica}}}
groups: [{{name: {GROUP}}}]
signing: {{required: false}}
http: {{host: 127.0.0.1, port: {self.ports[replica]}}}
logging: {{format: json}}
""")
        if self.presence == "kafka":
            with path.open("a") as f:
                f.write(f"membership: {{source: kafka, session_timeout: {KAFKA_SESSION}s}}\n")
        return path

    def start_replica(self, name: str, freeze_at: str | None = None, hold: float = 3.0) -> None:
        env = {**os.environ}
        env.pop(FAULT_ENV, None)
        if freeze_at is not None:
            env[FAULT_ENV] = freeze_at
        log_path = self.workdir / f"{name}.log"
        if freeze_at is not None:
            size = log_path.stat().st_size if log_path.exists() else 0
            self._armed[name] = (size, hold)
        log = log_path.open("ab")
        self.procs[name] = subprocess.Popen(
            [str(BIN), "run", "--config", str(self._config(name))],
            stderr=log,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        self.note("start_replica", target=name, freeze_at=freeze_at)

    def start_worker(self, name: str, java: bool = False, hand_off: bool = False) -> None:
        """A ``ballast worker`` process, or (``java``) the Java member's worker: the same
        files, so the checker reads both. ``hand_off``: its SIGTERM reads on until the
        controller has moved its partitions (``--hand-off``)."""
        assert self.kafka is not None
        assert self.mqtt is not None
        out = str(self.workdir / f"{name}.out")
        if java:
            assert self.java_classpath is not None, "Run(java_classpath=...)"
            assert self.presence == "kafka", "the Java member announces itself on Kafka"
            argv = ["java", "-cp", self.java_classpath, "dev.ballast.member.Worker"]
            argv += ["--bootstrap", self.kafka.address, "--group", GROUP, "--member", name]
            argv += ["--topic", TOPIC, "--out", out, "--heartbeat-interval-ms", "500"]
        else:
            argv = [str(BIN), "worker", "--bootstrap", self.kafka.address, "--mqtt-port"]
            argv += [str(self.mqtt.port), "--group", GROUP, "--member", name, "--topic", TOPIC]
            argv += ["--out", out, "--presence", self.presence]
        if hand_off:
            argv.append("--hand-off")
        log = (self.workdir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(argv, stderr=log, stdout=subprocess.DEVNULL)
        self.note("start_worker", target=name)

    def alive(self, prefix: str) -> list[str]:
        return sorted(n for n, p in self.procs.items() if n.startswith(prefix) and p.poll() is None)

    # ------------------------------------------------------------------ observation

    def leader(self) -> str | None:
        for name in self.alive("r"):
            if name in self._frozen:
                continue
            try:
                url = f"http://127.0.0.1:{self.ports[name]}/v1/leadership"
                with urllib.request.urlopen(url, timeout=1) as r:
                    if GROUP in json.loads(r.read())["groups"]:
                        return name
            except OSError:
                continue
        return None

    def reached_point(self, name: str) -> bool:
        start, _ = self._armed[name]
        with (self.workdir / f"{name}.log").open("rb") as f:
            f.seek(start)
            return b'"fault_point"' in f.read()

    async def until(self, predicate: Any, timeout: float, what: str) -> float:
        started = time.monotonic()
        while not await asyncio.to_thread(predicate):
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"not reached within {timeout}s: {what}")
            await asyncio.sleep(0.1)
        return time.monotonic() - started

    # ------------------------------------------------------------------ traffic

    async def start_producing(self) -> None:
        assert self.kafka is not None
        producer = AIOKafkaProducer(bootstrap_servers=self.kafka.address, linger_ms=0)
        await producer.start()

        async def produce() -> None:
            try:
                while True:
                    await producer.send_and_wait(
                        TOPIC, str(self.produced).encode(), partition=self.produced % PARTITIONS
                    )
                    self.produced += 1
                    await asyncio.sleep(1 / self.timing.rate)
            finally:
                await producer.stop()

        self._producing = asyncio.create_task(produce())

    async def stop_producing(self) -> None:
        await cancel_and_wait(self._producing)
        self._producing = None

    # ------------------------------------------------------------------ faults

    def signal(self, name: str, sig: int, op: str) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            proc.wait(30)
        if sig == signal.SIGKILL and name.startswith("w"):
            self.deaths.setdefault(name, []).append(time.time())
        self.note(op, target=name)

    async def apply(self, fault: str, rng: random.Random) -> None:
        workers = self.alive("w")
        if fault == "kill_worker" and len(workers) > 1:
            self.signal(rng.choice(workers), signal.SIGKILL, fault)
        elif fault == "stop_worker" and len(workers) > 1:
            self.signal(rng.choice(workers), signal.SIGTERM, fault)
        elif fault == "start_worker":
            idle = [f"w{i}" for i in range(6) if f"w{i}" not in workers]
            if idle:
                self.start_worker(rng.choice(idle))
        elif fault in ("kill_leader", "pause_leader", "freeze_at_point"):
            leader = self.leader()
            if leader is None:
                self.note("skipped", fault=fault, why="no leader answering")
                return
            if fault == "pause_leader":
                self.signal(leader, signal.SIGSTOP, fault)
                self._frozen[leader] = (
                    time.monotonic() + self.timing.session_timeout + rng.uniform(0.5, 3)
                )
                return
            self.signal(leader, signal.SIGKILL, fault)
            await asyncio.sleep(rng.uniform(0.2, 1.0))
            point = None
            if fault == "freeze_at_point":
                point = rng.choice(FREEZE_POINTS) + f"@{rng.randint(1, 3)}"
            self.start_replica(leader, freeze_at=point, hold=rng.uniform(1.0, 6.0))
        elif fault == "restart_mqtt":
            assert self.mqtt is not None
            self.mqtt.stop()
            self.note(fault)
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            self.mqtt.start()

    def thaw(self, force: bool = False) -> None:
        """SIGCONT replicas whose pause is over. A replica armed with a fault point is
        held there for a few seconds once it reaches it (its log says so)."""
        now = time.monotonic()
        for name, (_, hold) in list(self._armed.items()):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                del self._armed[name]
            elif self.reached_point(name):
                del self._armed[name]
                self._frozen[name] = now + hold
                self.note("froze_at_point", target=name)
        for name, until in list(self._frozen.items()):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None and (force or until <= now):
                proc.send_signal(signal.SIGCONT)
                self.note("thaw", target=name)
            if proc is None or proc.poll() is not None or force or until <= now:
                del self._frozen[name]

    # ------------------------------------------------------------------ a run

    async def run(self, seed: int, faults: int, workers: int = 4) -> dict[str, Any]:
        rng = random.Random(seed)
        started = time.time()
        for i in range(self.replicas):
            self.start_replica(f"r{i}")
        for i in range(self.replicas):
            await embedded.wait_until_ready(self.ports[f"r{i}"], 60, self.procs[f"r{i}"])
        for i in range(workers):
            self.start_worker(f"w{i}")
        await self.until(lambda: self.leader() is not None, 60, "a leader")
        await self.start_producing()
        await asyncio.sleep(3)
        names, weights = zip(*FAULTS, strict=True)
        applied = 0
        while applied < faults:
            fault = rng.choices(names, weights)[0]
            await self.apply(fault, rng)
            applied += 1
            deadline = time.monotonic() + rng.uniform(*self.timing.gap)
            while time.monotonic() < deadline:
                self.thaw()
                await asyncio.sleep(0.1)
        self.thaw(force=True)
        for name in sorted({f"r{i}" for i in range(self.replicas)} - set(self.alive("r"))):
            self.start_replica(name)
        if not self.alive("w"):
            self.start_worker("w0")
        await asyncio.sleep(2)
        await self.stop_producing()
        produced = [str(i) for i in range(self.produced)]
        drained = await self.drain(produced, 120)
        end = time.time()
        assert self.kafka is not None
        logs = {
            p.stem: checker.WorkerLog.read(p.stem, p) for p in sorted(self.workdir.glob("w*.out"))
        }
        verdict = checker.check(produced, logs, self.deaths, end)
        reports = await run_audit(self.kafka.address, "ballast.assignments", [GROUP], 60.0)
        counts: dict[str, int] = {}
        for entry in self.history:
            counts[entry["op"]] = counts.get(entry["op"], 0) + 1
        return {
            "seed": seed,
            "faults": applied,
            "ops": counts,
            "seconds": round(end - started, 1),
            "drained": drained,
            **verdict.summary(),
            "audit_ok": all(r.ok for r in reports),
            "audit": [r.render() for r in reports],
            "longest_ungranted_s": round(max((r.longest_gap_s for r in reports), default=0), 3),
            "ok": verdict.ok and all(r.ok for r in reports),
        }

    async def drain(self, produced: list[str], timeout: float) -> bool:
        """Until every produced record was processed by someone (False on timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen: set[str] = set()
            for out in self.workdir.glob("w*.out"):
                seen.update(line.split()[3] for line in out.read_text().splitlines())
            if seen.issuperset(produced):
                return True
            await asyncio.sleep(0.5)
        return False
