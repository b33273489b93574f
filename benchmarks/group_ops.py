"""``fleet_ops``' operations through Kafka's own group protocol, beside Ballast's, on the
same broker in the same run: what a team choosing between the two gets, per partition.

The Kafka fleet is real aiokafka consumers that ``subscribe()`` (``group_agent.py``),
split over ``--agents`` processes by zone (agent ``i`` hosts zone ``i % 3``), each
reporting what its rebalance listener holds. Variants (``--variants``):

- ``sticky``: aiokafka's ``StickyPartitionAssignor`` (eager: every rebalance revokes
  everything first, as aiokafka implements the classic protocol);
- ``lagsticky``: Ballast's ``group_assignor("lagsticky")`` plugged into the same protocol;
- ``sticky-static``: ``sticky`` with static membership (``group.instance.id``): a member
  back within its session timeout rejoins without a rebalance, and one that stops sends
  no LeaveGroup;
- ``ballast``: ``fleet_ops`` itself (``ballast run`` and its simulated fleet).

The same operations in the same order: a cold start (the group protocol's fleet all at
once), a rolling deploy (10 % at a time, each back after ``--restart`` s), scale-in to
half (clean stops), scale-out back, and a lost zone (its processes SIGKILLed; Kafka
notices after the session timeout, Ballast after ``leave_grace``: both 10 s here).
Figures per operation as ``fleet_ops``' (``op_stats``), keys ``<variant>_<op>_<figure>``,
and ``ratio_<variant>_<op>_unavailable_p99`` = the variant's p99 / Ballast's.

    python benchmarks/group_ops.py --members 100 --partitions 2000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import fleet_ops
from fleet_ops import ZONES, Agents, op_stats, rack_of, rolling
from load_soak import with_brokers

from controller.tools import apache_kafka, embedded

TOPIC = "group-ops-data"
HERE = Path(__file__).parent
VARIANTS = ("ballast", "sticky", "lagsticky", "sticky-static")
GROUP_OPS = ("rolling", "scale_in", "scale_out", "zone_loss")
#: No holding changed for this long: the group protocol has settled (it has no
#: controller to ask).
QUIET = 3.0
#: A group that has not settled by then never will.
SETTLE_WITHIN = 300.0


async def agent(args: argparse.Namespace, kafka: str, variant: str) -> asyncio.subprocess.Process:
    static = variant.endswith("-static")
    return await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "group_agent.py"), "--bootstrap", kafka,
        "--group", f"group-ops-{variant}", "--topic", TOPIC,
        "--assignor", variant.removesuffix("-static"),
        *(["--static"] if static else []),
        "--session-timeout-ms", str(int(args.leave_grace * 1000)),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        # aiokafka's sticky assignor warns of double assignments in every eager round
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def settled(agents: Agents, members: list[str], total: int) -> float:
    """When the last holding changed, once every partition is held exactly once by
    ``members``, each of them holds some (a member that has not been given its share yet
    is still joining), and nothing changed for ``QUIET`` seconds."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while time.monotonic() < deadline:
        last = max((e[0] for e in agents.events[-50:]), default=0.0)
        if (
            agents.fleet_settled(total, members)
            and all(agents.held.get(m) for m in members)
            and time.time() - last >= QUIET
        ):
            return last
        await asyncio.sleep(0.1)
    held = [agents.held.get(m, frozenset()) for m in members]
    raise TimeoutError(
        f"the group did not settle with {len(members)} members: {sum(map(len, held))} "
        f"holdings of {len(frozenset().union(*held))} partitions (of {total}), "
        f"{sum(not h for h in held)} members holding nothing"
    )


async def group_variant(args: argparse.Namespace, kafka: str, variant: str) -> dict[str, Any]:
    total = args.partitions
    procs = [await agent(args, kafka, variant) for _ in range(args.agents)]
    agents = Agents(procs)
    agents.start_reading()
    everyone = [f"m{i:05d}" for i in range(args.members)]
    half = everyone[: args.members // 2]
    batch = max(1, math.ceil(args.members * 0.1))
    result: dict[str, Any] = {}
    try:
        began = time.time()
        await agents.send("join", everyone, [rack_of(n) for n in everyone])
        result["cold_start_s"] = round(await settled(agents, everyone, total) - began, 1)

        async def op(name: str, act: Any, after: list[str], minimum: int | None) -> None:
            t0 = time.time()
            await act()
            t1 = await settled(agents, after, total)
            if minimum is None:
                minimum = sum(len(agents.held.get(m, ())) for m in after[len(half) :])
            for key, value in op_stats(agents.events, t0, max(t1, t0), minimum).items():
                result[f"{name}_{key}"] = value

        await op("rolling", lambda: rolling(agents, everyone, args.restart, batch), everyone, 0)
        leaving = everyone[len(half) :]
        gone = sum(len(agents.held.get(m, ())) for m in leaving)
        await op("scale_in", lambda: agents.send("leave", leaving), half, gone)
        joining = everyone[len(half) :]
        await op("scale_out", lambda: agents.send("join", joining, [rack_of(n) for n in joining]), everyone, None)  # fmt: skip
        dead = [i for i in range(len(procs)) if i % len(ZONES) == 0]
        lost = [m for m in everyone if agents.agent_of(m) in dead]
        survivors = [m for m in everyone if m not in lost]

        async def kill_zone() -> None:
            now = time.time()
            for i in dead:
                agents.procs[i].kill()
            for m in lost:  # they read nothing from this moment
                agents.events.append((now, m, frozenset()))
                agents.held[m] = frozenset()

        minimum = sum(len(agents.held.get(m, ())) for m in lost)
        await op("zone_loss", kill_zone, survivors, minimum)
    finally:
        await agents.stop()
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async def body(
        work: Path, kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"members": args.members, "partitions": args.partitions}
        await embedded.create_topics(kafka.address, {TOPIC: args.partitions})
        for variant in args.variants.split(","):
            if variant == "ballast":
                ops = argparse.Namespace(**vars(args), ops=",".join(GROUP_OPS), ha=False)
                got = await fleet_ops.ballast_ops(ops, work, kafka, mqtt)
                got.pop("members"), got.pop("partitions")
            else:
                got = await group_variant(args, kafka.address, variant)
            out.update({f"{variant}_{k}": v for k, v in got.items()})
            print(f"{variant}: done", file=sys.stderr, flush=True)
        for variant in args.variants.split(","):
            for op in GROUP_OPS:
                ours = out.get(f"ballast_{op}_unavailable_p99_s")
                theirs = out.get(f"{variant}_{op}_unavailable_p99_s")
                if variant != "ballast" and ours and theirs is not None:
                    out[f"ratio_{variant}_{op}_unavailable_p99"] = round(theirs / ours, 2)
        return out

    return await with_brokers("ballast-group-ops-", args.broker, body, args.partitions)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--members", type=int, default=100)
    p.add_argument("--partitions", type=int, default=2_000)
    p.add_argument("--agents", type=int, default=3, help="fleet processes (a multiple of 3)")
    p.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--restart", type=float, default=2.0, help="a member's restart time (s)")
    p.add_argument("--delay", type=float, default=0.5, help="Ballast's rebalance.delay (s)")
    p.add_argument(
        "--leave-grace", type=float, default=10.0,
        help="Ballast's leave_grace and Kafka's session timeout (s)",
    )  # fmt: skip
    p.add_argument("--handoff-timeout", type=float, default=15.0)
    p.add_argument(
        "--leave",
        choices=("immediate", "handoff"),
        default="immediate",
        help="how Ballast's scale-in members leave: stopping first, as a consumer of the "
        "group protocol does (close(leave=True)), or reading on until their partitions "
        "are granted elsewhere (hand_off)",
    )
    p.add_argument("--log-dir", help="keep Ballast's controller logs here")
    p.add_argument("--json", action="store_true", help="one JSON line")
    args = p.parse_args()
    if args.agents % len(ZONES):
        p.error("--agents must be a multiple of 3 (one zone per process)")
    if args.partitions < args.members:
        p.error("--partitions must be at least --members")
    out = asyncio.run(run(args))
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>48}  {v}")


if __name__ == "__main__":
    main()
