"""Controller latency: membership event -> published records, against real brokers.

Starts Tansu and Mosquitto on loopback, the controller as its own process (``ballast
run``), and a simulated fleet in this process (real MQTT presence with Wills, real reading
of the assignments topic), so the fleet does not share the controller's Python process.
Then one member at a time leaves cleanly and rejoins. Two numbers per event, both
excluding the configured ``rebalance_delay``:

* controller: from the rebalance being due to the broker acknowledging every record, read
  from the daemon's own ``ballast_event_to_publish_seconds`` histogram; its engine share
  from ``ballast_assignment_duration_seconds``, and the engine with every reconciliation
  the event caused (``ballast_reconcile_duration_seconds``: the first publication and
  the grants that follow acks);
* end to end: from the presence message being published to the first record of the new
  generation reaching the fleet, minus ``rebalance_delay``.

For each clean leave also: from the leave to every partition the member held being held
by another member (its record applied, as a client does after ``assign()``), the delay
included: how long a clean leave leaves its partitions unread.

Finally a burst of joins shows how many rebalances it coalesces into.

    python benchmarks/controller_bench.py --members 100 --partitions 10000
    python benchmarks/controller_bench.py --members 1000 --partitions 100000 --events 40 --broker tansu
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from promscrape import group_summary, pct, scrape

from controller.tools import apache_kafka, embedded
from controller.tools.simfleet import Fleet, SimMember

DELAY = 0.2


async def wait(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.02)


async def bench(
    members: int,
    partitions: int,
    topics: int,
    events: int,
    burst: int,
    log_dir: Path | None = None,
    log_level: str = "info",
    broker: apache_kafka.BrokerKind = "kafka",
) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory(prefix="ballast-bench-") as tmp,
        apache_kafka.running(broker, Path(tmp), partitions=partitions) as kafka,
        embedded.mosquitto(Path(tmp)).start() as mqtt,
    ):
        names = [f"bench-{i}" for i in range(topics)]
        await embedded.create_topics(kafka.address, dict.fromkeys(names, partitions // topics))
        port = embedded.free_port()
        config = Path(tmp) / "ballast.yaml"
        config.write_text(
            f"kafka: {json.dumps(apache_kafka.kafka_settings(broker, kafka.address))}\n"
            f"mqtt: {{port: {mqtt.port}, keepalive: 30}}\n"
            f"rebalance: {{delay: {DELAY}, leave_grace: 30, handoff_timeout: 60}}\n"
            "lag: {source: none}\n"
            "groups: [{name: bench}, {name: burst}]\n"
            "signing: {required: false}\n"
            f"http: {{port: {port}}}\n"
            f"logging: {{format: json, level: {log_level}}}\n"
        )
        daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
            stderr=(Path(log_dir or tmp) / "daemon.log").open("w"),
        )
        fleet = Fleet(kafka.address, mqtt.port, "bench", keepalive=30)
        first_record: dict[int, float] = {}
        #: The partitions a member that left held and nobody else holds yet.
        unheld: set[tuple[str, int]] = set()
        all_held = asyncio.Event()

        def stamp(member: SimMember) -> None:
            first_record.setdefault(member.generation, time.perf_counter())
            if unheld:
                unheld.difference_update(member.partitions)
                if not unheld:
                    all_held.set()

        try:
            await embedded.wait_until_ready(port, 60, proc=daemon)
            await fleet.start()
            fleet.on_apply = stamp
            started = time.perf_counter()
            for i in range(0, members, 50):
                await asyncio.gather(
                    *(fleet.join(f"m{j:05d}", names) for j in range(i, min(members, i + 50)))
                )
            await fleet.wait_for(
                lambda: sum(len(m.partitions) for m in fleet.members.values()) == partitions,
                timeout=900,
            )
            warmup = time.perf_counter() - started
            e2e: list[float] = []
            held_elsewhere: list[float] = []
            controller_ms: list[float] = []
            engine_ms: list[float] = []
            engine_reconcile_ms: list[float] = []
            compute_sum = 'ballast_event_to_publish_seconds_sum{group="bench"}'
            rebalance_count = 'ballast_event_to_publish_seconds_count{group="bench"}'
            assign_sum = 'ballast_assignment_duration_seconds_sum{group="bench"}'
            reconcile_sum = 'ballast_reconcile_duration_seconds_sum{group="bench"}'
            for i in range(events):
                victim = f"m{(i * 7919) % members:05d}"
                for action in ("leave", "join"):
                    before = await asyncio.to_thread(scrape, port)
                    gen: int = group_summary(port, "bench")["generation"]
                    t0 = time.perf_counter()
                    if action == "leave":
                        unheld.update(fleet.members[victim].partitions)
                        all_held.clear()
                        await fleet.leave(victim)
                    else:
                        await fleet.join(victim, names)
                    await wait(partial(published, port, gen), 60)
                    if action == "leave":
                        async with asyncio.timeout(60):
                            await all_held.wait()
                        held_elsewhere.append((time.perf_counter() - t0) * 1000)
                    await fleet.wait_for(partial(delivered, first_record, gen), timeout=60)
                    seen = min(v for k, v in first_record.items() if k > gen)
                    e2e.append((seen - t0 - DELAY) * 1000)
                    after = await asyncio.to_thread(scrape, port)
                    # The first rebalance of this event (handoff grants follow as acks arrive).
                    n = after[rebalance_count] - before[rebalance_count]
                    engine_ms.append((after[assign_sum] - before[assign_sum]) * 1000 / max(n, 1))
                    controller_ms.append(
                        (after[compute_sum] - before[compute_sum]) * 1000 / max(n, 1)
                    )
                    await wait(lambda: not group_summary(port, "bench")["revoking"], 120)
                    # The engine's rebalance and every reconciliation the event caused (its
                    # first publication and the grants that follow acks).
                    done = await asyncio.to_thread(scrape, port)
                    engine_reconcile_ms.append(
                        (
                            done[assign_sum]
                            - before[assign_sum]
                            + done[reconcile_sum]
                            - before[reconcile_sum]
                        )
                        * 1000
                        / max(n, 1)
                    )
                    await asyncio.sleep(0.05)

            burst_fleet = Fleet(kafka.address, mqtt.port, "burst", keepalive=30)
            await burst_fleet.start()
            await asyncio.gather(*(burst_fleet.join(f"b{i:04d}", names[:1]) for i in range(burst)))
            await burst_fleet.wait_for(
                lambda: (
                    sum(len(m.partitions) for m in burst_fleet.members.values())
                    == partitions // topics
                ),
                timeout=600,
            )
            await asyncio.sleep(1)
            burst_rebalances = int(
                scrape(port).get('ballast_rebalances_total{group="burst",reason="join"}', 0)
            )
            await burst_fleet.stop()
        finally:
            await fleet.stop()
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
    return {
        "members": members,
        "partitions": partitions,
        "events": len(e2e),
        "initial_assignment_s": round(warmup, 2),
        "engine_ms": {
            "p50": round(pct(engine_ms, 0.5), 2),
            "p99": round(pct(engine_ms, 0.99), 2),
        },
        "engine_and_reconcile_ms": {
            "p50": round(pct(engine_reconcile_ms, 0.5), 2),
            "p99": round(pct(engine_reconcile_ms, 0.99), 2),
        },
        "controller_ms": {
            "p50": round(pct(controller_ms, 0.5), 2),
            "p99": round(pct(controller_ms, 0.99), 2),
        },
        "end_to_end_ms_minus_delay": {
            "p50": round(pct(e2e, 0.5), 2),
            "p99": round(pct(e2e, 0.99), 2),
        },
        "end_to_end_mean_ms": round(statistics.mean(e2e), 2),
        "clean_leave_to_held_elsewhere_ms_with_delay": {
            "p50": round(pct(held_elsewhere, 0.5), 2),
            "p99": round(pct(held_elsewhere, 0.99), 2),
            "max": round(max(held_elsewhere), 2),
        },
        "rebalance_delay_ms": DELAY * 1000,
        "burst_joins": burst,
        "burst_rebalances": burst_rebalances,
    }


def published(port: int, gen: int) -> bool:
    return bool(group_summary(port, "bench")["generation"] > gen)


def delivered(first_record: dict[int, float], gen: int) -> bool:
    return any(k > gen for k in first_record)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--events", type=int, default=50, help="leave+rejoin pairs")
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--log-dir", type=Path, help="keep the daemon's log here")
    parser.add_argument("--log-level", default="info", help="the daemon's log level")
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    args = parser.parse_args()
    result = asyncio.run(
        bench(
            args.members,
            args.partitions,
            args.topics,
            args.events,
            args.burst,
            args.log_dir,
            args.log_level,
            args.broker,
        )
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
