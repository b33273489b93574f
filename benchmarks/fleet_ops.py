"""Fleet operations, partition by partition: a rolling deploy, a scale-in and a scale-out,
a lost zone and a controller takeover in the middle of a rolling deploy, on real brokers
(Tansu or Apache Kafka, and Mosquitto) and ``ballast run``, with the simulated fleet
split over ``--agents`` processes (``fleet_agent.py``) so that the fleet is not what is
measured.

Every agent reports each change of what a member holds, stamped with the wall clock.
For each operation, replayed in time order:

- **moved**: partitions whose reader became another member, against the minimum the
  operation requires (0 for a rolling deploy; what the leavers held for a scale-in or a
  lost zone; what the new members hold at the end for a scale-out);
- **unavailable**: per partition, the time from its reader stopping to a reader holding
  it again, summed over the operation (p50, p99, max over the partitions it touched);
- **read_twice**: partitions that two members held at the same moment (the simulated
  members process no records: a double holding is where records could be read twice);
- **settled**: from the operation's first action until the controller is settled and
  every partition is held exactly once; and the controller replicas' CPU meanwhile.

    python benchmarks/fleet_ops.py --members 100 --partitions 10000 --json
    python benchmarks/fleet_ops.py --members 1000 --partitions 100000 --agents 4 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from load_soak import controller_settled, proc_status, with_brokers
from promscrape import pct, scrape

from controller.tools import apache_kafka, embedded

GROUP = "ops"
TOPIC = "ops-data"
ZONES = ("zone-a", "zone-b", "zone-c")
OPS = ("rolling", "scale_in", "scale_out", "zone_loss", "takeover")
HERE = Path(__file__).parent


@dataclass
class Agents:
    """The fleet's processes: commands out, holdings in."""

    procs: list[asyncio.subprocess.Process]
    #: (wall time, member, partitions held after the change)
    events: list[tuple[float, str, frozenset[int]]] = field(default_factory=list)
    held: dict[str, frozenset[int]] = field(default_factory=dict)
    _acks: dict[int, asyncio.Future[None]] = field(default_factory=dict)
    _next: int = 0
    _readers: list[asyncio.Task[None]] = field(default_factory=list)

    def start_reading(self) -> None:
        self._readers = [asyncio.create_task(self._read(p)) for p in self.procs]

    def replace(self, i: int, proc: asyncio.subprocess.Process) -> None:
        """Agent ``i`` is a new process (its predecessor was killed)."""
        self.procs[i] = proc
        self._readers.append(asyncio.create_task(self._read(proc)))

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            body = json.loads(line)
            if "id" in body:
                self._acks.pop(body["id"]).set_result(None)
                continue
            held = frozenset(body["held"])
            self.events.append((body["t"], body["m"], held))
            self.held[body["m"]] = held

    def agent_of(self, name: str) -> int:
        return int(name[1:]) % len(self.procs)

    async def send(self, op: str, names: list[str], racks: list[str] | None = None) -> None:
        """``op`` for ``names``, each on its agent; returns once every agent has done it."""
        waits = []
        for i, proc in enumerate(self.procs):
            mine = [k for k, n in enumerate(names) if self.agent_of(n) == i]
            if not mine:
                continue
            self._next += 1
            body: dict[str, Any] = {"id": self._next, "op": op, "names": [names[k] for k in mine]}
            if racks is not None:
                body["racks"] = [racks[k] for k in mine]
            done = self._acks[self._next] = asyncio.get_running_loop().create_future()
            assert proc.stdin is not None
            proc.stdin.write((json.dumps(body) + "\n").encode())
            await proc.stdin.drain()
            waits.append(done)
        await asyncio.gather(*waits)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs if p.returncode is None)

    def fleet_settled(self, total: int, members: Iterable[str]) -> bool:
        held = [self.held.get(m, frozenset()) for m in members]
        return sum(map(len, held)) == total and len(frozenset().union(*held)) == total

    async def stop(self) -> None:
        for p in self.procs:
            if p.stdin is not None:
                p.stdin.close()
        for p in self.procs:
            try:
                async with asyncio.timeout(30):
                    await p.wait()
            except TimeoutError:
                p.kill()
        for r in self._readers:
            r.cancel()


def rack_of(name: str) -> str:
    return ZONES[int(name[1:]) % len(ZONES)]


def op_stats(
    events: list[tuple[float, str, frozenset[int]]], t0: float, t1: float, minimum: int
) -> dict[str, Any]:
    """One operation's figures from the events, replayed in time order."""
    ordered = sorted(events)
    holders: dict[int, set[str]] = {}
    held: dict[str, frozenset[int]] = {}

    def change(member: str, now: frozenset[int]) -> tuple[frozenset[int], frozenset[int]]:
        before = held.get(member, frozenset())
        held[member] = now
        for p in before - now:
            holders[p].discard(member)
        for p in now - before:
            holders.setdefault(p, set()).add(member)
        return before - now, now - before

    i = 0
    while i < len(ordered) and ordered[i][0] < t0:
        change(ordered[i][1], ordered[i][2])
        i += 1
    owner = {p: next(iter(h)) for p, h in holders.items() if len(h) == 1}
    empty_since: dict[int, float] = {}
    unavailable: dict[int, float] = {}
    twice: set[int] = set()
    moved = 0
    for t, member, now in ordered[i:]:
        if t > t1:
            break
        lost, gained = change(member, now)
        for p in lost:
            if not holders[p]:
                empty_since[p] = t
        for p in gained:
            if p in empty_since:
                unavailable[p] = unavailable.get(p, 0.0) + t - empty_since.pop(p)
            if len(holders[p]) > 1:
                twice.add(p)
            if owner.get(p) != member:
                moved += p in owner
                owner[p] = member
    for p, since in empty_since.items():  # never held again within the operation
        unavailable[p] = unavailable.get(p, 0.0) + t1 - since
    gaps = list(unavailable.values())
    return {
        "moved": moved,
        "min_moved": minimum,
        "unavailable_p50_s": round(pct(gaps, 0.5), 3),
        "unavailable_p99_s": round(pct(gaps, 0.99), 3),
        "unavailable_max_s": round(max(gaps, default=0.0), 3),
        "unavailable_partitions": len(gaps),
        "read_twice": len(twice),
        "settled_s": round(t1 - t0, 2),
    }


@dataclass
class Controllers:
    """``ballast run`` replicas (one, or two with HA), each its own process."""

    work: Path
    kafka: embedded.BrokerProcess
    mqtt: embedded.BrokerProcess
    ha: bool
    args: argparse.Namespace
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    def start(self, replica: str) -> None:
        port = self.ports.setdefault(replica, embedded.free_port())
        a = self.args
        config = self.work / f"{replica}.yaml"
        ha = f"ha: {{enabled: true, replica_id: {replica}}}\n" if self.ha else ""
        config.write_text(
            f"kafka: {json.dumps(apache_kafka.kafka_settings(a.broker, self.kafka.address))}\n"
            f"mqtt: {{port: {self.mqtt.port}, keepalive: 5}}\n"
            f"rebalance: {{delay: {a.delay}s, leave_grace: {a.leave_grace}s, "
            f"handoff_timeout: {a.handoff_timeout}s}}\n"
            "lag: {source: none}\n"
            f"groups: [{{name: {GROUP}}}]\n"
            "signing: {required: false}\n"
            f"http: {{port: {port}}}\n"
            f"{ha}"
            f"logging: {{format: json, level: {'info' if a.log_dir else 'warning'}}}\n"
        )
        logs = Path(a.log_dir) if a.log_dir else self.work
        logs.mkdir(parents=True, exist_ok=True)
        self.procs[replica] = subprocess.Popen(
            [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
            stderr=(logs / f"{replica}.log").open("ab"),
        )

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the replicas used so far; a killed one counts what
        it had used when last asked (what it used after that is not known)."""
        for replica, proc in self.procs.items():
            if proc.poll() is None:
                self.cpu[replica] = cpu_seconds(proc.pid)
        return sum(self.cpu.values())

    def work_done(self) -> tuple[str | None, dict[str, float]]:
        """The leader, and its publication and handoff totals (counts and seconds) so far:
        an operation's share is the difference across it (all of the new leader's after
        a takeover)."""
        leader = self.leader()
        if leader is None:
            return None, {}
        got = scrape(self.ports[leader])
        return leader, {
            name: got.get(f'ballast_{metric}_seconds_{part}{{group="{GROUP}"}}', 0.0)
            for metric, short in (("publish_duration", "publish"), ("handoff_duration", "handoff"))
            for part, name in (("count", f"{short}_count"), ("sum", f"{short}_s"))
        }

    def leader(self) -> str | None:
        for replica, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            try:
                if GROUP in led_groups(self.ports[replica]):
                    return replica
            except OSError:
                continue
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)


def cpu_seconds(pid: int) -> float:
    """A process's CPU time (user + system) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listen_overflows() -> int:
    """Connections this network namespace's listening sockets had no room for (Linux's
    ``TcpExt: ListenOverflows``). A client whose handshake was dropped retries it a
    second later: members of a burst of joins can reach the controller a second late."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=True))
            return int(table.get("ListenOverflows", 0))
    return 0


def led_groups(port: int) -> set[str]:
    """The groups a replica leads now (``/v1/leadership``: cheap enough to poll, where a
    scrape of ``/metrics`` every 100 ms took the controller 4 s of CPU in a run)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/leadership", timeout=10) as r:
        return set(json.loads(r.read())["groups"])


async def settled(ctl: Controllers, agents: Agents, members: list[str], total: int) -> float:
    """Wall time once the leading controller is settled with ``members`` and the fleet
    holds every partition exactly once."""
    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        leader = await asyncio.to_thread(ctl.leader)
        if (
            leader is not None
            and await asyncio.to_thread(controller_settled, ctl.ports[leader], GROUP, len(members))
            and agents.fleet_settled(total, members)
        ):
            return time.time()
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{GROUP} not settled with {len(members)} members")


async def rolling(agents: Agents, members: list[str], restart: float, batch: int) -> None:
    """Every member restarted once, ``batch`` at a time: a Deployment's ``maxUnavailable``
    (each new process starts ``restart`` seconds after the old one stopped)."""
    for i in range(0, len(members), batch):
        names = members[i : i + batch]
        await agents.send("stop", names)
        await asyncio.sleep(restart)
        await agents.send("join", names, [rack_of(n) for n in names])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    return await with_brokers(
        "ballast-ops-", args.broker, lambda w, k, m: ballast_ops(args, w, k, m), args.partitions
    )


async def ballast_ops(
    args: argparse.Namespace,
    work: Path,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
) -> dict[str, Any]:
    total = args.partitions
    await embedded.create_topics(kafka.address, {TOPIC: total})
    ctl = Controllers(work, kafka, mqtt, ha=args.ha, args=args)
    for replica in ("r0", "r1") if args.ha else ("r0",):
        ctl.start(replica)
    for replica in ctl.procs:
        await embedded.wait_until_ready(ctl.ports[replica], 120, proc=ctl.procs[replica])
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "fleet_agent.py"), "--bootstrap", kafka.address,
            "--mqtt-port", str(mqtt.port), "--group", GROUP, "--topic", TOPIC,
            "--slot", f"{i}/{args.agents}",  # as ``Agents.agent_of`` splits the fleet
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        for i in range(args.agents)
    ]  # fmt: skip
    agents = Agents(procs)
    agents.start_reading()
    everyone = [f"m{i:05d}" for i in range(args.members)]
    half = everyone[: args.members // 2]
    batch = max(1, math.ceil(args.members * 0.1))
    result: dict[str, Any] = {"members": args.members, "partitions": total}
    try:
        began = time.monotonic()
        for i in range(0, len(everyone), 100):  # cold start in waves, each settled
            names = everyone[i : i + 100]
            await agents.send("join", names, [rack_of(n) for n in names])
            await settled(ctl, agents, everyone[: i + 100], total)
        result["cold_start_s"] = round(time.monotonic() - began, 1)

        async def op(name: str, act: Any, members_after: list[str], minimum: int | None) -> None:
            """``minimum`` None: what ``members_after`` hold once settled (a scale-out)."""
            overflows0 = listen_overflows()
            cpu0, fleet0, work0, t0 = (
                ctl.cpu_seconds(),
                agents.cpu_seconds(),
                await asyncio.to_thread(ctl.work_done),
                time.time(),
            )
            await act()
            t1 = await settled(ctl, agents, members_after, total)
            if minimum is None:
                minimum = sum(len(agents.held.get(m, ())) for m in members_after[len(half) :])
            for key, value in op_stats(agents.events, t0, t1, minimum).items():
                result[f"{name}_{key}"] = value
            result[f"{name}_controller_cpu_s"] = round(ctl.cpu_seconds() - cpu0, 1)
            result[f"{name}_fleet_cpu_s"] = round(agents.cpu_seconds() - fleet0, 1)
            result[f"{name}_listen_overflows"] = listen_overflows() - overflows0
            leader, work = await asyncio.to_thread(ctl.work_done)
            before = work0[1] if work0[0] == leader else {}
            for key in ("publish_count", "publish_s", "handoff_count", "handoff_s"):
                result[f"{name}_{key}"] = round(work.get(key, 0.0) - before.get(key, 0.0), 2)

        if "rolling" in args.ops:
            await op("rolling", lambda: rolling(agents, everyone, args.restart, batch), everyone, 0)
        if "scale_in" in args.ops:
            leaving = everyone[len(half) :]
            minimum = sum(len(agents.held.get(m, ())) for m in leaving)
            how = "handoff" if args.leave == "handoff" else "leave"
            result["scale_in_leave"] = args.leave
            await op("scale_in", lambda: agents.send(how, leaving), half, minimum)
        if "scale_out" in args.ops:
            joining = everyone[len(half) :]
            await op(
                "scale_out",
                lambda: agents.send("join", joining, [rack_of(n) for n in joining]),
                everyone,
                None,
            )
        if "zone_loss" in args.ops:
            lost = [m for m in everyone if rack_of(m) == ZONES[0]]
            survivors = [m for m in everyone if m not in lost]
            minimum = sum(len(agents.held.get(m, ())) for m in lost)
            await op("zone_loss", lambda: agents.send("crash", lost), survivors, minimum)
            await agents.send("join", lost, [rack_of(n) for n in lost])  # the zone comes back
            await settled(ctl, agents, everyone, total)
        if "takeover" in args.ops and args.ha:

            async def deploy_with_takeover() -> None:
                middle = len(everyone) // 2
                await rolling(agents, everyone[:middle], args.restart, batch)
                victim = ctl.leader()
                if victim is not None:
                    ctl.cpu_seconds()  # its last reading
                    ctl.procs[victim].kill()
                    result["takeover_killed"] = victim
                await rolling(agents, everyone[middle:], args.restart, batch)

            await op("takeover", deploy_with_takeover, everyone, 0)
        result["peak_rss_mib"] = round(
            max(proc_status(p.pid).get("VmHWM", 0) for p in ctl.procs.values() if p.poll() is None)
            / 2**20,
            1,
        )
        # Ticks are measured in process at scale by controller_scale.py --json.
        result["tick_p99_ms"] = None
    finally:
        await agents.stop()
        ctl.stop()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=100)
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--agents", type=int, default=2, help="fleet processes")
    p.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="tansu")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated, of " + ", ".join(OPS))
    p.add_argument("--ha", action="store_true", help="two replicas (needed for takeover)")
    p.add_argument("--restart", type=float, default=2.0, help="a member's restart time (s)")
    p.add_argument("--delay", type=float, default=0.5, help="rebalance.delay (s)")
    p.add_argument("--leave-grace", type=float, default=10.0, help="rebalance.leave_grace (s)")
    p.add_argument("--handoff-timeout", type=float, default=15.0)
    p.add_argument(
        "--leave",
        choices=("handoff", "immediate"),
        default="handoff",
        help="how scale-in members leave: reading on until their partitions are granted "
        "elsewhere (hand_off), or stopping first (close(leave=True))",
    )
    p.add_argument("--json", action="store_true", help="one JSON line")
    p.add_argument("--log-dir", help="keep the controllers' logs (level info) in this directory")
    args = p.parse_args()
    args.ops = {o for o in args.ops.split(",") if o}
    if unknown := args.ops - set(OPS):
        p.error(f"unknown operations {sorted(unknown)}")
    result = asyncio.run(run(args))
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
