"""Controller latency: membership event -> published records, against real brokers.

Starts Tansu and amqtt on loopback, a controller in this process, and a simulated fleet
(real MQTT presence with Wills, real reading of the assignments topic). Then one member
at a time leaves cleanly and rejoins. Two numbers per event, both excluding the configured
``rebalance_delay``:

* controller: from the rebalance tick to the broker acknowledging every record;
* end to end: from the presence message being published to the first record of the new
  generation reaching the fleet, minus ``rebalance_delay``.

Finally a burst of joins shows how many rebalances it coalesces into.

    python benchmarks/controller_bench.py --members 100 --partitions 10000
    python benchmarks/controller_bench.py --members 1000 --partitions 100000 --events 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from controller import embedded
from controller.config import Config
from controller.daemon import Controller, ManagedGroup
from controller.simfleet import Fleet, SimMember

DELAY = 0.2


def published(group: ManagedGroup, gen: int) -> bool:
    return group.state.reconciler.generation > gen


def delivered(first_record: dict[int, float], gen: int) -> bool:
    return any(k > gen for k in first_record)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bench(
    members: int, partitions: int, topics: int, events: int, burst: int
) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory(prefix="ballast-bench-") as tmp,
        embedded.brokers(Path(tmp)) as (kafka, mqtt),
    ):
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
        await admin.start()
        names = [f"bench-{i}" for i in range(topics)]
        await admin.create_topics([NewTopic(t, partitions // topics, 1) for t in names])
        await admin.close()
        cfg = Config.model_validate(
            {
                "kafka": {"bootstrap_servers": kafka.address, "idempotent_producer": False},
                "mqtt": {"port": mqtt.port},
                "rebalance": {"delay": DELAY, "leave_grace": 5, "handoff_timeout": 10},
                "lag": {"source": "none"},
                "groups": [{"name": "bench"}, {"name": "burst"}],
                "http": {"port": 0},
            }
        )
        ctl = Controller(cfg)
        await ctl.start()
        fleet = Fleet(kafka.address, mqtt.port, "bench", keepalive=10)
        await fleet.start()
        first_record: dict[int, float] = {}

        def stamp(member: SimMember) -> None:
            first_record.setdefault(member.generation, time.perf_counter())

        fleet.on_apply = stamp
        try:
            started = time.perf_counter()
            await asyncio.gather(*(fleet.join(f"m{i:05d}", names) for i in range(members)))
            await fleet.wait_for(
                lambda: sum(len(m.partitions) for m in fleet.members.values()) == partitions,
                timeout=600,
            )
            warmup = time.perf_counter() - started
            group = ctl.groups["bench"]
            compute = ctl.metrics.compute_seconds.labels("bench")
            e2e: list[float] = []
            controller_ms: list[float] = []
            for i in range(events):
                victim = f"m{(i * 7919) % members:05d}"
                for action in ("leave", "join"):
                    gen = group.state.reconciler.generation
                    before_sum = compute._sum.get()
                    t0 = time.perf_counter()
                    if action == "leave":
                        await fleet.leave(victim)
                    else:
                        await fleet.join(victim, names)
                    await fleet.wait_for(partial(published, group, gen), timeout=60)
                    await fleet.wait_for(partial(delivered, first_record, gen), timeout=60)
                    seen = min(v for k, v in first_record.items() if k > gen)
                    e2e.append((seen - t0 - DELAY) * 1000)
                    controller_ms.append((compute._sum.get() - before_sum) * 1000)
                    # Let handoffs complete before the next event.
                    await fleet.wait_for(lambda: group.state.reconciler.revoking() == 0, timeout=60)
                    await asyncio.sleep(0.05)

            # Burst: many joins at once into a fresh group, counted in rebalances.
            burst_fleet = Fleet(kafka.address, mqtt.port, "burst", keepalive=10)
            await burst_fleet.start()
            rebalances = ctl.metrics.rebalances.labels("burst", "join")
            await asyncio.gather(*(burst_fleet.join(f"b{i:04d}", names[:1]) for i in range(burst)))
            await burst_fleet.wait_for(
                lambda: (
                    sum(len(m.partitions) for m in burst_fleet.members.values())
                    == partitions // topics
                ),
                timeout=300,
            )
            await asyncio.sleep(1)
            burst_rebalances = int(rebalances._value.get())
            await burst_fleet.stop()
        finally:
            await fleet.stop()
            await ctl.stop()
    return {
        "members": members,
        "partitions": partitions,
        "events": len(e2e),
        "initial_assignment_s": round(warmup, 2),
        "controller_ms": {
            "p50": round(pct(controller_ms, 0.5), 2),
            "p99": round(pct(controller_ms, 0.99), 2),
        },
        "end_to_end_ms_minus_delay": {
            "p50": round(pct(e2e, 0.5), 2),
            "p99": round(pct(e2e, 0.99), 2),
        },
        "end_to_end_mean_ms": round(statistics.mean(e2e), 2),
        "burst_joins": burst,
        "burst_rebalances": burst_rebalances,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--events", type=int, default=50, help="leave+rejoin pairs")
    parser.add_argument("--burst", type=int, default=500)
    args = parser.parse_args()
    result = asyncio.run(bench(args.members, args.partitions, args.topics, args.events, args.burst))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
