"""The closed loop at fleet scale: the controller's poller samples offsets, the Spark lag job
turns the samples into lag records, and the controller assigns from them.

Loopback only: Tansu, Mosquitto, ``ballast run`` (``lag.source: topic`` with
``lag.samples_topic``, so its poller writes samples and it reads lag only from the lag
topic), ``ballast pipeline lag`` on ``local[2]``, and a simulated fleet in this process.

The data topics are filled once with a skewed number of records per partition and
nobody consumes them, so every partition's lag is a known constant (log end - log start:
nothing is committed and ``auto_offset_reset`` is ``earliest``). The controller's lag view
(``/v1/groups/<group>?partitions=true``) is compared with that direct reading, partition
by partition, every few seconds.

    python benchmarks/pipeline_loop.py --members 1000 --partitions 100000 --seconds 180 --broker tansu

Prints one JSON object: samples and lag records per second, sample -> lag record latency
(the record's broker timestamp minus its ``observed_at``, p50/p99), sample -> controller
weight (``ballast_lag_record_age_seconds``, p50/p99), the controller's poll time and CPU, the
first time the controller's view matched the direct reading for every partition and how
many matched at the end, and the partitions moved for lag.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from load_soak import until_settled, with_brokers
from promscrape import pct, quantile, scrape

from controller.tasks import cancel_and_wait
from controller.tools import apache_kafka, embedded
from controller.tools.simfleet import Fleet
from controller.wire.records import LagRecord, decode

GROUP = "loop"
SAMPLES, LAG = "loop.samples", "loop.lag"
#: Seconds between two comparisons of the controller's view with the direct reading.
CHECK_EVERY = 5.0


def record_counts(partitions: int, seed: int) -> list[int]:
    """Records per partition: 1 to 40, heavy-tailed, so a few partitions carry most lag."""
    rng = random.Random(seed)
    return [min(40, int(rng.paretovariate(1.2))) for _ in range(partitions)]


async def fill(bootstrap: str, topics: list[str], per_topic: int, counts: list[int]) -> None:
    """``counts[i]`` records into partition ``i`` (topic after topic), one record per
    partition per round, each round acknowledged before the next: a batch holds one
    record, so every broker reports the log end exactly."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks=1)
    await producer.start()
    try:
        for r in range(max(counts, default=0)):
            futures = [
                await producer.send(topics[i // per_topic], b"x", partition=i % per_topic)
                for i, n in enumerate(counts)
                if n > r
            ]
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def direct_reading(bootstrap: str, topics: list[str], per_topic: int) -> dict[str, int]:
    """Lag per ``topic/partition`` read from the broker: log end - log start."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [KafkaTP(t, p) for t in topics for p in range(per_topic)]
        end = await consumer.end_offsets(tps)
        start = await consumer.beginning_offsets(tps)
    finally:
        await consumer.stop()
    return {f"{tp.topic}/{tp.partition}": end[tp] - start[tp] for tp in tps}


def controller_view(port: int) -> dict[str, int]:
    url = f"http://127.0.0.1:{port}/v1/groups/{GROUP}?partitions=true"
    with urllib.request.urlopen(url, timeout=60) as r:
        rows = json.loads(r.read())["partitions"]
    return {f"{row['topic']}/{row['partition']}": row["lag"] for row in rows}


class LagTopicWatch:
    """Reads the lag topic as the controller does and keeps each record's latency: its
    broker timestamp (when the job wrote it) minus its ``observed_at`` (when sampled)."""

    def __init__(self, bootstrap: str) -> None:
        self.latencies: list[float] = []
        self.records = 0
        self._bootstrap = bootstrap

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(
            LAG,
            bootstrap_servers=self._bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=500, max_records=20_000)
                for msgs in batch.values():
                    for msg in msgs:
                        if msg.value is None:
                            continue
                        rec = decode(LagRecord, msg.value, LAG)
                        self.records += 1
                        self.latencies.append(msg.timestamp / 1000 - rec.observed_at)
        finally:
            await consumer.stop()


async def run(args: argparse.Namespace) -> dict[str, object]:
    return await with_brokers(
        "ballast-loop-", args.broker, lambda work, k, m: _run(args, work, k, m), args.partitions
    )


async def _run(
    args: argparse.Namespace,
    work: Path,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
) -> dict[str, object]:
    topics = [f"loop-{i}" for i in range(args.topics)]
    per_topic = args.partitions // args.topics
    await embedded.create_topics(kafka.address, dict.fromkeys(topics, per_topic))
    await embedded.create_topics(kafka.address, {SAMPLES: 4, LAG: 4})
    result: dict[str, object] = {"members": args.members, "partitions": per_topic * args.topics}
    begun = time.monotonic()
    await fill(kafka.address, topics, per_topic, record_counts(per_topic * args.topics, 7))
    truth = await direct_reading(kafka.address, topics, per_topic)
    result["fill_s"] = round(time.monotonic() - begun, 1)
    result["total_lag"] = sum(truth.values())

    port = embedded.free_port()
    config = work / "ballast.yaml"
    config.write_text(
        f"kafka: {json.dumps(apache_kafka.kafka_settings(args.broker, kafka.address))}\n"
        f"mqtt: {{port: {mqtt.port}, keepalive: 5}}\n"
        "rebalance: {delay: 500ms, leave_grace: 2s, handoff_timeout: 300s, min_lag: 100}\n"
        f"lag: {{source: topic, topic: {LAG}, samples_topic: {SAMPLES}, poll_interval: "
        f"{args.poll_interval}s, auto_offset_reset: earliest, smoothing: 1.0, batch: 100000}}\n"
        f"groups: [{{name: {GROUP}}}]\n"
        "signing: {required: false}\n"
        f"http: {{port: {port}}}\n"
        "logging: {format: json, level: info}\n"
        f"pipeline: {{master: 'local[2]', checkpoint: '{work / 'checkpoint'}', "
        f"trigger_interval: {args.trigger}s, shuffle_partitions: 2, lateness: 60s}}\n"
    )
    bin_dir = Path(sys.executable).parent
    daemon = subprocess.Popen(
        [str(bin_dir / "ballast"), "run", "--config", str(config)],
        stderr=(work / "daemon.log").open("w"),
    )
    logs = Path(args.log_dir or work)
    logs.mkdir(parents=True, exist_ok=True)
    job_log = logs / "pipeline.log"
    job: subprocess.Popen[bytes] | None = None
    fleet = Fleet(kafka.address, mqtt.port, GROUP, keepalive=15)
    watch = LagTopicWatch(kafka.address)
    watching: asyncio.Task[None] | None = None
    try:
        await embedded.wait_until_ready(port, 60, proc=daemon)
        await fleet.start()
        names = [f"m{i:05d}" for i in range(args.members)]
        total = per_topic * args.topics
        for i in range(0, len(names), 100):
            await asyncio.gather(*(fleet.join(n, topics) for n in names[i : i + 100]))
            await until_settled(port, GROUP, fleet=fleet, total=total)
        result["fleet_settled_s"] = round(time.monotonic() - begun, 1)
        base = await asyncio.to_thread(scrape, port)
        job = subprocess.Popen(
            [str(bin_dir / "ballast"), "pipeline", "lag", "--config", str(config)],
            stderr=job_log.open("w"),
            stdout=subprocess.DEVNULL,
        )
        watching = asyncio.create_task(watch.run())
        started = time.monotonic()
        matched_at: float | None = None
        matches: list[tuple[float, int, int]] = []
        while time.monotonic() - started < args.seconds:
            await asyncio.sleep(CHECK_EVERY)
            if job.poll() is not None:
                raise RuntimeError(f"the lag job exited ({job.returncode}); see {job_log}")
            # A partition in a handoff (revoked, not yet granted) has no owner and is
            # not listed: compared are the listed ones.
            view = await asyncio.to_thread(controller_view, port)
            same = sum(1 for k, v in view.items() if truth.get(k) == v)
            matches.append((round(time.monotonic() - started, 1), same, len(view)))
            if same == len(truth) and matched_at is None:
                matched_at = time.monotonic() - started
                if args.until_matched:
                    break
        wall = time.monotonic() - started
        after = await asyncio.to_thread(scrape, port)
        batches = [
            json.loads(line)
            for line in job_log.read_text().splitlines()
            if line.startswith("{") and '"pipeline_batch"' in line
        ]
        samples = sum(b["samples"] for b in batches)
        age, poll = (
            {
                f"p{round(q * 100)}": round(quantile(after, metric, q, group=GROUP, before=base), 2)
                for q in (0.5, 0.99)
            }
            for metric in ("ballast_lag_record_age_seconds", "ballast_lag_poll_duration_seconds")
        )
        cpu = "process_cpu_seconds_total"
        moved = f'ballast_partitions_moved_total{{group="{GROUP}",reason="lag"}}'
        result |= {
            "seconds": round(wall, 1),
            "batches": len(batches),
            "samples_per_second": round(samples / wall, 1),
            "batch_seconds_p50": pct([b["duration_s"] for b in batches], 0.5),
            "lag_records": watch.records,
            "lag_records_per_second": round(watch.records / wall, 1),
            "sample_to_record_s": {
                "p50": round(pct(watch.latencies, 0.5), 2),
                "p99": round(pct(watch.latencies, 0.99), 2),
            },
            "sample_to_controller_weight_s": age,
            "controller_poll_s": poll,
            "controller_cpu_cores": round((after[cpu] - base[cpu]) / wall, 2),
            "view_matches_direct_reading": {
                "first_all_s": None if matched_at is None else round(matched_at, 1),
                "at_end": f"{matches[-1][1] if matches else 0} of {len(truth)}",
                "over_time_s_same_listed": matches,
            },
            "partitions_moved_for_lag": int(after.get(moved, 0) - base.get(moved, 0)),
        }
    finally:
        if watching is not None:
            await cancel_and_wait(watching)  # its consumer stops before the brokers do
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGINT)
            try:
                job.wait(120)
            except subprocess.TimeoutExpired:
                job.kill()
        await fleet.stop()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return result


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=180, help="how long the loop runs")
    parser.add_argument("--poll-interval", type=float, default=5, help="lag.poll_interval, s")
    parser.add_argument("--trigger", type=float, default=5, help="pipeline.trigger_interval, s")
    parser.add_argument("--log-dir", help="keep the lag job's log here")
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    parser.add_argument(
        "--until-matched",
        action="store_true",
        help="end the loop at the first check where the view matches (--seconds: its bound)",
    )
    return parser


def main() -> None:
    print(json.dumps(asyncio.run(run(arguments().parse_args()))))


if __name__ == "__main__":
    main()
