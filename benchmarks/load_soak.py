"""Load and soak: the controller (its own process) against a simulated fleet under churn.

Loopback only: Tansu, Mosquitto, ``ballast run`` and the fleet (real MQTT presence with
Wills, real reading of the assignments topic) in this process. Churn mixes joins, clean
leaves, crashes (Will) and lag swings (lag records for every partition), for a bounded
time. Then it waits for the fleet to settle, runs ``ballast audit`` on the whole history
and reports events/s, rebalance latency, controller CPU and memory.

``--soak-minutes`` keeps a slower churn going and samples the controller's RSS, asyncio
tasks and open fds every ``--sample`` seconds, to show they do not grow.

    python benchmarks/load_soak.py --members 1000 --partitions 100000 --seconds 120 --broker tansu
    python benchmarks/load_soak.py --members 200 --partitions 20000 --soak-minutes 20
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from promscrape import group_summary, quantile, scrape

from controller.adapters.topics import partition_count
from controller.tools import apache_kafka, embedded
from controller.tools.audit import run_audit
from controller.tools.simfleet import Fleet
from controller.wire.records import LagRecord, partition_key

GROUP = "load"
T = TypeVar("T")
_NEW_IDS = itertools.count()


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


async def lag_swing(producer: AIOKafkaProducer, topics: list[str], per_topic: int) -> None:
    """A reading for every partition; a few hot ones carry most of the lag."""
    now = time.time()
    futures = []
    for t in topics:
        for p in range(per_topic):
            lag = int(random.paretovariate(1.3) * 100)
            rec = LagRecord(group=GROUP, topic=t, partition=p, lag=lag, observed_at=now)
            futures.append(
                await producer.send("load.lag", rec.encode(), key=partition_key(GROUP, t, p))
            )
            if p % 500 == 0:
                await asyncio.sleep(0)  # keep the members' MQTT keepalives flowing
    await asyncio.gather(*futures)


async def with_brokers(
    prefix: str,
    broker: apache_kafka.BrokerKind,
    body: Callable[[Path, embedded.BrokerProcess, embedded.BrokerProcess], Awaitable[T]],
    partitions: int = 0,
) -> T:
    """A Kafka-protocol broker of kind ``broker`` and Mosquitto on loopback in a temporary
    directory, around ``body`` (which creates about ``partitions``)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        with (
            apache_kafka.running(broker, work, partitions=partitions) as kafka,
            embedded.mosquitto(work).start() as mqtt,
        ):
            return await body(work, kafka, mqtt)


async def run(args: argparse.Namespace) -> dict[str, object]:
    random.seed(7)
    return await with_brokers(
        "ballast-load-", args.broker, lambda work, k, m: _run(args, work, k, m), args.partitions
    )


async def _run(
    args: argparse.Namespace,
    work: Path,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
) -> dict[str, object]:
    topics = [f"load-{i}" for i in range(args.topics)]
    per_topic = args.partitions // args.topics
    await embedded.create_topics(kafka.address, dict.fromkeys(topics, per_topic))
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    await admin.create_topics(
        [NewTopic("load.lag", 4, 1, topic_configs={"cleanup.policy": "compact"})]
    )
    # A broker that has just made 100 000 partitions lists a new topic late (41 s, one
    # Kafka 4.4 broker): the daemon's start-up must not be billed for it.
    await partition_count(admin, "load.lag")
    await admin.close()
    port = embedded.free_port()
    config = work / "ballast.yaml"
    config.write_text(
        f"kafka: {json.dumps(apache_kafka.kafka_settings(args.broker, kafka.address))}\n"
        f"mqtt: {{port: {mqtt.port}, keepalive: 5}}\n"
        "rebalance: {delay: 500ms, leave_grace: 2s, handoff_timeout: 300s, min_lag: 100}\n"
        "lag: {source: topic, topic: load.lag}\n"
        f"groups: [{{name: {GROUP}}}]\n"
        "signing: {required: false}\n"
        f"http: {{port: {port}}}\n"
        f"logging: {{format: json, level: {args.log_level}}}\n"
    )
    log = Path(args.log_dir or work) / "daemon.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stderr=log.open("w"),
    )
    fleet = Fleet(kafka.address, mqtt.port, GROUP, keepalive=15)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=20)
    result: dict[str, object] = {"members": args.members, "partitions": per_topic * args.topics}
    try:
        await embedded.wait_until_ready(port, 60, proc=daemon)
        await fleet.start()
        await producer.start()
        started = time.monotonic()
        names = [f"m{i:05d}" for i in range(args.members)]
        total = per_topic * args.topics
        wave = args.members if args.cold_start == "all" else 100
        waves: list[float] = []
        joins: list[float] = []

        async def settled(members: int) -> None:
            # Complete as the fleet holds it; every member in, balanced, nothing in
            # flight as the controller sees it.
            await until_settled(port, GROUP, members, fleet, total)

        if args.cold_start == "rolling":  # a wave every --wave-every s, none waited for
            for i in range(0, len(names), wave):
                due = started + i // wave * args.wave_every
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await asyncio.gather(*(fleet.join(n, topics) for n in names[i : i + wave]))
                joins.append(round(time.monotonic() - due, 2))
            await settled(len(names))
        else:
            for i in range(0, len(names), wave):  # waves, each settled before the next
                begun = time.monotonic()
                await asyncio.gather(*(fleet.join(n, topics) for n in names[i : i + wave]))
                joins.append(round(time.monotonic() - begun, 2))
                await settled(min(i + wave, len(names)))
                waves.append(round(time.monotonic() - begun, 2))
        result["initial_assignment_s"] = round(time.monotonic() - started, 1)
        # wave_s: from a wave's first join to settled; join_s: its members connecting and
        # catching up with the assignments topic (the simulated fleet's own share).
        result["cold_start"] = {"mode": args.cold_start, "wave_s": waves, "join_s": joins}

        base = await asyncio.to_thread(scrape, port)
        cpu0, t0 = base["process_cpu_seconds_total"], time.monotonic()
        events = await churn(fleet, producer, topics, per_topic, args.seconds, args.rate)
        wall = time.monotonic() - t0
        settle_start = time.monotonic()
        await until_settled(port, GROUP)
        settle = time.monotonic() - settle_start
        after = await asyncio.to_thread(scrape, port)
        rebalances = sum(v for k, v in after.items() if k.startswith("ballast_rebalances_total{"))
        rebalances -= sum(v for k, v in base.items() if k.startswith("ballast_rebalances_total{"))
        result |= {
            "churn_seconds": round(wall, 1),
            "events": dict(events),
            "membership_events_per_second": round(
                (events["join"] + events["leave"] + events["crash"]) / wall, 2
            ),
            "lag_records_per_second": round(events["lag_records"] / wall, 1),
            "rebalances": int(rebalances),
            "churn_ms": {
                metric: {
                    f"p{round(q * 100)}": round(
                        quantile(after, f"ballast_{metric}", q, group=GROUP, before=base) * 1000,
                        2,
                    )
                    for q in (0.5, 0.99)
                }
                for metric in (
                    "rebalance_latency_seconds",
                    "event_to_publish_seconds",
                    "assignment_duration_seconds",
                    "reconcile_duration_seconds",
                    "encode_duration_seconds",
                    "publish_duration_seconds",
                )
            },
            "controller_cpu_cores": round((after["process_cpu_seconds_total"] - cpu0) / wall, 2),
            "settle_after_churn_s": round(settle, 1),
            **{k: v for k, v in proc_status(daemon.pid).items()},
            "tasks": after.get("ballast_asyncio_tasks"),
        }
        if args.soak_minutes:
            result["soak"] = await soak(fleet, producer, topics, per_topic, port, daemon.pid, args)
            await until_settled(port, GROUP)
        reports = await run_audit(kafka.address, "ballast.assignments", [GROUP], 3600.0)
        result["audit"] = (
            "clean" if reports and all(r.ok for r in reports) else [r.render() for r in reports]
        )
        result["double_owned"] = sum(1 for o in fleet.owners().values() if len(o) > 1)
    finally:
        await producer.stop()
        await fleet.stop()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return result


async def until_settled(
    port: int,
    group: str,
    members: int | None = None,
    fleet: Fleet | None = None,
    total: int = 0,
    timeout: float = 1800,
) -> None:
    """Until the controller says ``group`` is settled (``controller_settled``) and, given
    a ``fleet``, the fleet holds every one of ``total`` partitions once. The controller is
    asked from a thread (a blocking request here held up the fleet this loop runs) and
    the fleet's holdings only once the controller is settled: asked every 0.1 s, that
    O(partitions) check took 40 % of the fleet process's CPU during cold-start waves."""
    deadline = time.monotonic() + timeout
    while not (
        await asyncio.to_thread(controller_settled, port, group, members)
        and (fleet is None or fleet_settled(fleet, total))
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{group} not settled after {timeout} s")
        await asyncio.sleep(0.1)


def fleet_settled(fleet: Fleet, total: int) -> bool:
    """Every partition held by exactly one member, as the fleet sees it: ``total``
    holdings of ``total`` distinct partitions (a union in C; the owner map this built
    before was 8 % of the fleet process's CPU during cold-start waves)."""
    held = [m.partitions for m in fleet.members.values()]
    if sum(map(len, held)) != total:
        return False  # O(members): the usual answer while anything is in flight
    return len(frozenset().union(*held)) == total


def controller_settled(port: int, group: str, members: int | None = None) -> bool:
    """The controller's own view: nothing pending, every grant its target, no handoff or
    publication in flight, and (given ``members``) that many members in its assignment:
    a join it has not heard of yet leaves the previous step looking settled
    (``/v1/groups``: O(members) to answer, cheap enough to poll)."""
    view = group_summary(port, group)
    return bool(view["settled"]) and members in (None, view["members"])


async def churn(
    fleet: Fleet,
    producer: AIOKafkaProducer,
    topics: list[str],
    per_topic: int,
    seconds: float,
    rate: float,
) -> dict[str, int]:
    """``rate`` membership events per second (join / leave / crash), and a lag swing
    for every partition every 5 s, for ``seconds``."""
    counts = {"join": 0, "leave": 0, "crash": 0, "lag_records": 0}
    deadline = time.monotonic() + seconds
    last_swing = 0.0
    while time.monotonic() < deadline:
        # as many joins as departures: the fleet keeps its size
        action = random.choice(("join", "join", "leave", "crash"))
        live = sorted(fleet.members)
        if action == "join" or len(live) < 3:
            await fleet.join(f"x{next(_NEW_IDS):06d}", topics)  # never reuse a member id
            counts["join"] += 1
        elif action == "leave":
            await fleet.leave(random.choice(live))
            counts["leave"] += 1
        else:
            await fleet.crash(random.choice(live))
            counts["crash"] += 1
        if time.monotonic() - last_swing >= 5:
            await lag_swing(producer, topics, per_topic)
            counts["lag_records"] += len(topics) * per_topic
            last_swing = time.monotonic()
        await asyncio.sleep(1 / rate)
    return counts


async def soak(
    fleet: Fleet,
    producer: AIOKafkaProducer,
    topics: list[str],
    per_topic: int,
    port: int,
    pid: int,
    args: argparse.Namespace,
) -> dict[str, object]:
    samples: list[Sample] = []
    started = time.monotonic()
    while time.monotonic() - started < args.soak_minutes * 60:
        await churn(fleet, producer, topics, per_topic, args.sample, args.soak_rate)
        m = await asyncio.to_thread(scrape, port)
        sample = Sample(
            t_s=round(time.monotonic() - started),
            rss_mb=round(proc_status(pid)["VmRSS"] / 2**20, 1),
            tasks=int(m.get("ballast_asyncio_tasks", -1)),
            fds=int(m.get("process_open_fds", -1)),
            members=len(fleet.members),
        )
        samples.append(sample)
        print(json.dumps(sample._asdict()), file=sys.stderr, flush=True)
    warm = [s for s in samples if s.t_s >= 120] or samples
    return {
        "minutes": args.soak_minutes,
        "samples": [s._asdict() for s in samples],
        "rss_mb_first_last_max": [warm[0].rss_mb, warm[-1].rss_mb, max(s.rss_mb for s in warm)],
        "tasks_first_last_max": [warm[0].tasks, warm[-1].tasks, max(s.tasks for s in warm)],
        "fds_first_last": [warm[0].fds, warm[-1].fds],
    }


class Sample(NamedTuple):
    t_s: int
    rss_mb: float
    tasks: int
    fds: int
    members: int


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument(
        "--cold-start",
        choices=("waves", "rolling", "all"),
        default="waves",
        help="members join in waves of 100, each settled before the next; in waves of 100"
        " every --wave-every seconds (a rolling scale-up); or all at once",
    )
    parser.add_argument("--wave-every", type=float, default=1.0, help="rolling: s between waves")
    parser.add_argument("--seconds", type=float, default=120, help="churn phase length")
    parser.add_argument("--rate", type=float, default=5, help="membership events per second")
    parser.add_argument("--soak-minutes", type=float, default=0)
    parser.add_argument("--soak-rate", type=float, default=1)
    parser.add_argument("--sample", type=float, default=30, help="soak sampling period, s")
    parser.add_argument("--log-dir", help="keep the daemon log here")
    parser.add_argument("--log-level", default="warning", help="the daemon's log level")
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=1))


if __name__ == "__main__":
    main()
