"""One process of ``fleet_ops``' simulated fleet: a slice of the members (real MQTT
presence with Wills, real reading of the assignments topic), driven by JSON-line
commands on stdin, reporting every change of what a member holds as JSON lines on
stdout, stamped with the wall clock the driver shares.

Commands: ``{"id": N, "op": "join"|"leave"|"handoff"|"crash"|"stop", "names": [...],
"racks": [...]}``; each is answered ``{"id": N}`` once done. Events: ``{"t": time, "m":
name, "held": [partition, ...]}``; a member that leaves, crashes or stops reads nothing
from the moment the command reaches it; one that hands off reads on until a record
takes its partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from agent_io import say, serve

from controller.tools.simfleet import Fleet, SimMember


def _held(member: SimMember) -> None:
    say({"t": time.time(), "m": member.name, "held": sorted(p for _, p in member.partitions)})


async def main(a: argparse.Namespace) -> None:
    slot, slots = a.slot
    fleet = Fleet(
        a.bootstrap,
        a.mqtt_port,
        a.group,
        keepalive=a.keepalive,
        hosts=lambda name: name[1:].isdigit() and int(name[1:]) % slots == slot,
    )
    fleet.on_held = _held
    await fleet.start()

    async def run(cmd: dict[str, Any]) -> None:
        names: list[str] = cmd["names"]
        if cmd["op"] == "join":
            racks: list[str | None] = cmd.get("racks") or [None] * len(names)
            await asyncio.gather(
                *(fleet.join(n, [a.topic], r) for n, r in zip(names, racks, strict=True))
            )
        elif cmd["op"] == "handoff":
            await asyncio.gather(*(fleet.hand_off(n) for n in names if n in fleet.members))
        else:
            now = time.time()
            for n in names:
                say({"t": now, "m": n, "held": []})
            end = {"leave": fleet.leave, "crash": fleet.crash, "stop": fleet.stop_member}[cmd["op"]]
            await asyncio.gather(*(end(n) for n in names if n in fleet.members))

    await serve(run, fleet.stop)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--mqtt-port", type=int, required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--keepalive", type=int, default=5)
    p.add_argument(
        "--slot",
        type=lambda v: tuple(map(int, v.split("/"))),
        required=True,
        help="I/N: this agent hosts the members m<k> with k %% N == I (the driver's split)",
    )
    asyncio.run(main(p.parse_args()))
