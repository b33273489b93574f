"""One slow member: do lag moves pay for themselves?

Loopback only: Apache Kafka (or Tansu), Mosquitto, ``ballast run`` polling lag every
``--poll`` seconds, and ``--members`` real ``ManagedConsumer``s in this process that
process records at a set rate (a sleep per batch, then a commit). A producer writes
``--rate`` records a second spread evenly over ``--partitions``. Every member can process
``--headroom`` times its share of the input, except one, which processes a third of its
share (``--slow-factor``): whatever it holds, it falls behind.

Three controllers, one after the other, each on a fresh topic and group for
``--seconds``:

* ``sticky``: count balance only (``rebalance.max_moves: 0``);
* ``lagsticky-eager``: the lag policy as it was, moving at every poll that passes the
  trigger (``lag_cooldown: 0``, ``min_gain: 0``);
* ``lagsticky``: the defaults (``lag_cooldown`` 30 s doubling to 10 min while the same
  member stays the most lagged, ``min_gain`` 5 %).

Every ``--sample`` seconds the lag of each partition (log end - committed, read from the
broker) is summed per member as the members hold them. Printed, one JSON object per
controller and side by side: the largest member lag and the total lag (mean over the
second half of the run and at the end), partitions moved for lag, lag rebalances, and
moves per minute over the second half.

    python benchmarks/slow_member.py --seconds 600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from load_soak import with_brokers
from promscrape import scrape

from controller import logs
from controller.client import PresenceOptions
from controller.client.consumer import ManagedConsumer
from controller.tasks import cancel_and_wait
from controller.tools import apache_kafka, embedded

VARIANTS: dict[str, str] = {
    "sticky": "max_moves: 0",
    "lagsticky-eager": "lag_cooldown: 0s, min_gain: 0",
    "lagsticky": "lag_cooldown: 30s, lag_backoff_max: 10m, min_gain: 0.05",
}


async def produce(bootstrap: str, topic: str, partitions: int, rate: float) -> None:
    """``rate`` records a second, round robin over the partitions, in 10 ticks a second."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        sent, started, p = 0, time.monotonic(), 0
        while True:
            due = int((time.monotonic() - started) * rate)
            batch = []
            for _ in range(due - sent):
                batch.append(await producer.send(topic, b"x" * 64, partition=p))
                p = (p + 1) % partitions
            sent = due
            if batch:
                await asyncio.gather(*batch)
            await asyncio.sleep(0.1)
    finally:
        await producer.stop()


async def process(member: ManagedConsumer, rate: float) -> None:
    """Take what is fetched, spend ``n / rate`` seconds on it, commit."""
    while True:
        batch = await member.getmany(timeout_ms=200, max_records=200)
        n = sum(len(records) for records in batch.values())
        if n:
            await asyncio.sleep(n / rate)
            await member.commit()


async def lag_by_member(
    reader: AIOKafkaConsumer,
    admin: AIOKafkaAdminClient,
    group: str,
    tps: list[KafkaTP],
    members: dict[str, ManagedConsumer],
) -> dict[str, int]:
    ends = await reader.end_offsets(tps)
    committed = await admin.list_consumer_group_offsets(group)
    lag = {tp: ends[tp] - (committed[tp].offset if tp in committed else 0) for tp in tps}
    return {
        name: sum(lag.get(KafkaTP(tp.topic, tp.partition), 0) for tp in m.assignment)
        for name, m in members.items()
    }


def moved_for_lag(port: int, group: str) -> tuple[float, float]:
    """(partitions moved for lag, lag rebalances) as the controller counts them."""
    m = scrape(port)
    moves = m.get(f'ballast_partitions_moved_total{{group="{group}",reason="lag"}}', 0.0)
    steps = m.get(f'ballast_rebalances_total{{group="{group}",reason="lag"}}', 0.0)
    return moves, steps


async def one(
    args: argparse.Namespace,
    work: Path,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    variant: str,
) -> dict[str, Any]:
    group, topic = f"slow-{variant}", f"work-{variant}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    await admin.create_topics([NewTopic(topic, args.partitions, 1)])
    port = embedded.free_port()
    config = work / f"{variant}.yaml"
    config.write_text(
        f"kafka: {json.dumps(apache_kafka.kafka_settings(args.broker, kafka.address))}\n"
        f"mqtt: {{port: {mqtt.port}, keepalive: 5, client_id: ctl-{variant}}}\n"
        "rebalance: {delay: 500ms, leave_grace: 5s, handoff_timeout: 30s, min_lag: 100, "
        f"{VARIANTS[variant]}}}\n"
        f"lag: {{source: poll, poll_interval: {args.poll}s}}\n"
        f"groups: [{{name: {group}}}]\n"
        "signing: {required: false}\n"
        f"http: {{port: {port}}}\n"
        "logging: {format: json, level: warning}\n"
    )
    log = work / f"{variant}.log"
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stderr=log.open("w"),
    )
    share = args.rate / args.members
    names = [f"m{i}" for i in range(args.members)]
    members = {
        n: ManagedConsumer(
            group,
            n,
            [topic],
            bootstrap_servers=kafka.address,
            presence=PresenceOptions(mqtt_port=mqtt.port),
        )
        for n in names
    }
    reader = AIOKafkaConsumer(bootstrap_servers=kafka.address, enable_auto_commit=False)
    tasks: list[asyncio.Task[None]] = []
    samples: list[tuple[float, int, int]] = []  # (t, largest member lag, total lag)
    try:
        await embedded.wait_until_ready(port, 60, proc=daemon)
        await reader.start()
        for n in names:
            await members[n].start()
            rate = share / args.slow_factor if n == names[0] else share * args.headroom
            tasks.append(asyncio.create_task(process(members[n], rate)))
        tps = [KafkaTP(topic, p) for p in range(args.partitions)]
        async with asyncio.timeout(60):
            while sum(len(m.assignment) for m in members.values()) < args.partitions:
                await asyncio.sleep(0.2)
        tasks.append(asyncio.create_task(produce(kafka.address, topic, args.partitions, args.rate)))
        started = time.monotonic()
        half_moves: tuple[float, float] | None = None
        while (elapsed := time.monotonic() - started) < args.seconds:
            await asyncio.sleep(args.sample)
            lags = await lag_by_member(reader, admin, group, tps, members)
            samples.append((elapsed, max(lags.values()), sum(lags.values())))
            if half_moves is None and elapsed >= args.seconds / 2:
                half_moves = await asyncio.to_thread(moved_for_lag, port, group)
        moves, steps = await asyncio.to_thread(moved_for_lag, port, group)
        half = [s for s in samples if s[0] >= args.seconds / 2] or samples[-1:]
        early = half_moves or (0.0, 0.0)
        return {
            "largest_member_lag": {
                "second_half_mean": round(sum(s[1] for s in half) / len(half)),
                "end": samples[-1][1],
            },
            "total_lag": {
                "second_half_mean": round(sum(s[2] for s in half) / len(half)),
                "end": samples[-1][2],
            },
            "partitions_moved_for_lag": int(moves),
            "lag_rebalances": int(steps),
            "moves_per_minute_second_half": round((moves - early[0]) / (args.seconds / 2 / 60), 2),
            "lag_rebalances_second_half": int(steps - early[1]),
        }
    finally:
        await cancel_and_wait(*tasks)
        for m in members.values():
            await m.close()
        await reader.stop()
        await admin.close()
        daemon.send_signal(signal.SIGTERM)
        await asyncio.to_thread(daemon.wait, 60)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async def body(
        work: Path, kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "broker": args.broker,
            "members": args.members,
            "partitions": args.partitions,
            "rate": args.rate,
            "seconds": args.seconds,
            "slow_member_rate_of_its_share": round(1 / args.slow_factor, 3),
        }
        for variant in args.variants:
            out[variant] = await one(args, work, kafka, mqtt, variant)
            print(json.dumps({variant: out[variant]}), file=sys.stderr, flush=True)
        return out

    return await with_brokers("ballast-slow-", args.broker, body)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--rate", type=float, default=240.0, help="records a second, in all")
    parser.add_argument("--slow-factor", type=float, default=3.0)
    parser.add_argument("--headroom", type=float, default=3.0, help="the others' rate / share")
    parser.add_argument("--seconds", type=float, default=600.0, help="per controller")
    parser.add_argument("--sample", type=float, default=5.0)
    parser.add_argument("--poll", type=float, default=5.0, help="the controller's lag poll, s")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    return parser


def main() -> None:
    logs.configure("warning", "json")  # the members' logs to stderr: stdout is the result
    print(json.dumps(asyncio.run(run(arguments().parse_args())), indent=1))


if __name__ == "__main__":
    main()
