"""``ballast demo``: everything on this machine, nothing to configure.

Starts a Kafka-protocol broker (Tansu) and an MQTT broker (amqtt) on free loopback ports,
the controller, and a simulated fleet. Then it plays a scenario (a member leaves, one
joins, one crashes, one restarts within leave_grace) and prints the group after each step.
Every process it starts is stopped on exit, Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from . import embedded, logs
from .config import Config
from .daemon import Controller
from .http import bound_port, serve
from .simfleet import Fleet

GROUP = "demo-fleet"
TOPIC = "orders"


def _table(ctl: Controller, title: str) -> str:
    view = ctl.group_view(GROUP)
    members = view["members"]
    assert isinstance(members, dict)
    lines = [f"-- {title} (generation {view['generation']}, epoch {view['controller_epoch']})"]
    for name, m in sorted(members.items()):
        state = "live" if m["live"] else ("grace" if m["in_leave_grace"] else "gone")
        held = len(m["granted"])
        lines.append(f"   {name:<10} {state:<6} partitions {held:>4}  target {len(m['target']):>4}")
    revoking = view["revoking"]
    assert isinstance(revoking, list)
    lines.append(f"   revoking {len(revoking)}  quality {view['quality']}")
    return "\n".join(lines)


async def _settle(
    ctl: Controller, fleet: Fleet, expected_members: int, timeout: float = 30.0
) -> None:
    g = ctl.groups[GROUP]
    total = g.state.engine.partitions_per_topic.get(TOPIC, 0)

    def done() -> bool:
        owners = fleet.owners()
        return (
            len(g.state.reconciler.granted) == expected_members
            and len(owners) == total
            and all(len(v) == 1 for v in owners.values())
            and g.state.reconciler.revoking() == 0
        )

    await fleet.wait_for(done, timeout)


async def run_demo(members: int, partitions: int, duration: float, http_port: int) -> None:
    logs.configure("warning", "console")
    with (
        tempfile.TemporaryDirectory(prefix="ballast-demo-") as tmp,
        embedded.brokers(Path(tmp)) as (kafka, mqtt),
    ):
        print(f"brokers: kafka {kafka.address} (Tansu), mqtt {mqtt.address} (amqtt)")
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
        await admin.start()
        await admin.create_topics([NewTopic(TOPIC, partitions, 1)])
        await admin.close()
        cfg = Config.model_validate(
            {
                "kafka": {"bootstrap_servers": kafka.address, "idempotent_producer": False},
                "mqtt": {"port": mqtt.port, "keepalive": 2},
                "rebalance": {"delay": "300ms", "leave_grace": "3s", "handoff_timeout": "10s"},
                "lag": {"source": "poll", "poll_interval": "1s"},
                "groups": [{"name": GROUP}],
                "http": {"port": http_port},
            }
        )
        ctl = Controller(cfg)
        runner = await serve(ctl, "127.0.0.1", http_port)
        print(f"metrics: http://127.0.0.1:{bound_port(runner)}/metrics  group: /v1/groups/{GROUP}")
        fleet = Fleet(kafka.address, mqtt.port, GROUP, keepalive=1)
        try:
            await ctl.start()
            await fleet.start()
            names = [f"member-{i}" for i in range(members)]
            started = time.monotonic()
            for name in names:
                await fleet.join(name, [TOPIC])
            await _settle(ctl, fleet, members)
            print(_table(ctl, f"{members} members joined ({time.monotonic() - started:.2f}s)"))

            steps: list[tuple[str, Callable[[], Awaitable[object]], int]] = [
                ("clean leave of member-0", partial(fleet.leave, names[0]), members - 1),
                ("member-new joins", partial(fleet.join, "member-new", [TOPIC]), members),
                ("member-1 crashes (its Will fires)", partial(fleet.crash, names[1]), members - 1),
            ]
            for title, action, expect in steps:
                t0 = time.monotonic()
                await action()
                await _settle(ctl, fleet, expect)
                print(_table(ctl, f"{title}: settled in {time.monotonic() - t0:.2f}s"))

            generation = ctl.groups[GROUP].state.reconciler.generation
            await fleet.crash(names[2])
            await asyncio.sleep(1.0)
            await fleet.join(names[2], [TOPIC])
            await asyncio.sleep(3.5)
            moved = ctl.groups[GROUP].state.reconciler.generation != generation
            outcome = "MOVED" if moved else "nothing moved"
            print(
                _table(
                    ctl,
                    f"member-2 restarted within leave_grace: {outcome}",
                )
            )

            remaining = duration - (time.monotonic() - started)
            if remaining > 0:
                print(f"serving for {remaining:.0f}s more (Ctrl-C to stop)")
                await asyncio.sleep(remaining)
        finally:
            with contextlib.suppress(Exception):
                await fleet.stop()
            await ctl.stop()
            await runner.cleanup()
    print("demo stopped; brokers shut down")
