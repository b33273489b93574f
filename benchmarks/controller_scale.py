"""The controller's logic at fleet scale, in process: every tick costs what changed.

Drives ``GroupState`` (membership, coalescing, lag smoothing, the incremental engine and
the handoff reconciler) with a simulated clock and a simulated fleet, no brokers, so the
figures are the controller's own CPU work and nothing else:

1. cold start: every member announces itself at t = 0; the fleet acks each record after
   50-500 ms; until every partition is granted and every grant acknowledged;
2. churn: ``--events`` membership events (joins of new members, clean leaves, crashes that
   wait out leave grace and handoff timeout), one every ``--spacing`` seconds, while every
   partition's lag is read every ``--lag-interval`` seconds (like ``lag.source: poll``).

A *tick* is one wake of the group's loop: the observations handled since the previous
wake (presence, acks, lag readings) plus ``tick()`` and ``commit()`` of its plan. The
records' encoding is timed apart (``encode_*``), as the daemon's histograms do.

    python benchmarks/controller_scale.py --members 1000 --partitions 100000 --events 200 --json
    python benchmarks/controller_scale.py --members 10000 --partitions 1000000 --events 100 --json

``--phases`` also prints where the slowest 2 % of the churn's ticks go, by part of the
engine and the reconciler (the thread's CPU time inside each, averaged over those ticks).

Targets (issue 16): 1 000 x 100 000 tick p99 <= 5 ms, max <= 20 ms; 10 000 x 1 000 000
tick p99 <= 50 ms, peak RSS <= 2 GiB.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from promscrape import pct

from assignors import TopicPartition
from controller.core.group import GroupState
from controller.core.handoff import Outgoing, Plan
from controller.core.plan_records import encode_plan
from controller.core.rebalance import GroupTuning
from controller.runtime import collector_policy
from controller.wire.records import Presence

GROUP = "fleet"
TUNING = GroupTuning(rebalance_delay=1.0, leave_grace=10.0, handoff_timeout=15.0)
GRANT_BATCH = 0.02  # rebalance.grant_batch: the loop's pause before a step


@dataclass
class Member:
    name: str
    topics: list[str]
    instance: str
    generation: int = -1
    applied: frozenset[TopicPartition] = frozenset()
    alive: bool = True


@dataclass(frozen=True)
class Ack:
    member: Member
    generation: int
    record: Outgoing


@dataclass(frozen=True)
class Join:
    member: Member | None  # None: a new member


@dataclass(frozen=True)
class Leave:
    member: Member
    crash: bool


@dataclass(frozen=True)
class Readings:
    #: A range, not a list: a churn queues every interval's readings up front, and a
    #: hundred lists of 100 000 ints would be walked by the collector in some tick,
    #: a cost of this harness that no daemon has.
    indexes: range


Happening = Ack | Join | Leave | Readings


@dataclass(order=True)
class _At:
    time: float
    seq: int
    what: Happening = field(compare=False)


@dataclass
class Timings:
    ticks: list[float] = field(default_factory=list)
    encode: list[float] = field(default_factory=list)
    lag_readings: int = 0
    records: int = 0


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.rng = random.Random(args.seed)
        self.args = args
        per_topic, extra = divmod(args.partitions, args.topics)
        self.ppt = {f"t{i:03d}": per_topic + (i < extra) for i in range(args.topics)}
        self.tps = [TopicPartition(t, p) for t, n in self.ppt.items() for p in range(n)]
        self.state = GroupState(GROUP, TUNING, self.ppt)
        self.waves = collector_policy.Waves()
        self.fleet: dict[str, Member] = {}
        self.queue: list[_At] = []
        self.seq = itertools.count()
        self.now = 0.0
        self.pending_cost = 0.0  # observation work since the last tick
        self.tick_at: float | None = None
        self.t = Timings()
        self.lag_base = [self.rng.randrange(0, 5000) for _ in self.tps]
        self.names = itertools.count()
        self.phases: Phases | None = None

    # ------------------------------------------------------------------ the fleet

    def at(self, when: float, what: Happening) -> None:
        heapq.heappush(self.queue, _At(when, next(self.seq), what))

    def new_member(self) -> Member:
        i = next(self.names)
        m = Member(f"m{i:06d}", sorted(self.ppt), f"i{i}")
        self.fleet[m.name] = m
        return m

    def presence(self, m: Member, state: str = "active") -> Presence:
        return Presence(
            group=GROUP,
            member=m.name,
            topics=m.topics,
            instance=m.instance,
            generation=m.generation,
            partitions=sorted(m.applied),
            state=state,  # type: ignore[arg-type]
        )

    def observe(self, fn: Callable[[], None]) -> None:
        """Time one observation (decoding is the wire's, done before: not counted)."""
        start = time.perf_counter()
        fn()
        self.pending_cost += time.perf_counter() - start
        if self.tick_at is None:
            self.tick_at = self.now + GRANT_BATCH

    def deliver(self, plan: Plan) -> None:
        start = time.perf_counter()
        encode_plan(
            GROUP,
            1,
            plan.generation,
            plan.records,
            self.state.engine.topics_of,
            issued_at=1.0,
            wall_clock=float,
        )
        self.t.encode.append(time.perf_counter() - start)
        self.t.records += len(plan.records)
        for rec in plan.records:
            m = self.fleet.get(rec.member)
            if m is not None and m.alive:
                self.at(self.now + self.rng.uniform(0.05, 0.5), Ack(m, plan.generation, rec))

    # ------------------------------------------------------------------ the loop

    def run_until(self, end: float, done: Callable[[], bool] | None = None) -> None:
        while True:
            wake = self.state.next_wakeup()
            candidates = [x for x in (wake, self.tick_at) if x is not None]
            if self.queue:
                candidates.append(self.queue[0].time)
            if not candidates:
                return
            self.now = max(self.now, min(candidates))
            if self.now > end:
                return
            if self.queue and self.queue[0].time <= self.now:
                self.handle(heapq.heappop(self.queue).what)
                continue
            self.tick()
            if done is not None and done():
                return

    def tick(self) -> None:
        """As ``GroupLoop.step``: tick, commit, then the heap policy; encoding apart."""
        self.tick_at = None
        start = time.perf_counter()
        _, plan = self.state.tick(self.now)
        if plan is not None:
            self.state.reconciler.commit(plan)
        self.waves.stepped(
            0 if plan is None else len(plan.records),
            self.state.engine.member_count(),
            self.state.settled(),
        )
        self.t.ticks.append(self.pending_cost + time.perf_counter() - start)
        if self.phases is not None:
            self.phases.ended(self.t.ticks[-1])
        self.pending_cost = 0.0
        if plan is not None:
            self.deliver(plan)
            self.tick_at = self.now + GRANT_BATCH  # the loop steps again after publishing

    def handle(self, what: Happening) -> None:
        state, now = self.state, self.now
        if isinstance(what, Ack):
            m = what.member
            if not m.alive or self.fleet.get(m.name) is not m or what.generation <= m.generation:
                return  # gone, or a newer record overtook this one (applied in order)
            issued_to_me = what.record.instance in (None, m.instance)
            m.applied = (what.record.partitions or frozenset()) if issued_to_me else frozenset()
            m.generation = what.generation
            p = self.presence(m)
            self.observe(lambda: state.on_presence(p, now))
        elif isinstance(what, Join):
            m = what.member or self.new_member()
            p = self.presence(m)
            self.observe(lambda: state.on_presence(p, now))
        elif isinstance(what, Leave):
            m = what.member
            m.alive = False
            del self.fleet[m.name]
            if what.crash:
                self.observe(lambda: state.on_gone(m.name, now))
            else:
                p = self.presence(m, "leaving")
                self.observe(lambda: state.on_presence(p, now))
        else:
            lag = self.lag_base
            tps = self.tps
            rand = self.rng.randrange
            readings = {tps[i]: lag[i] + rand(0, 500) for i in what.indexes}
            self.t.lag_readings += len(readings)
            self.observe(lambda: state.on_lag(readings, now))

    # ------------------------------------------------------------------ phases

    def complete(self) -> bool:
        r = self.state.reconciler
        return (
            len(r.owner) == len(self.tps)
            and not r.releasing
            and all(r.acked.get(m, -1) >= 0 for m in r.granted)
            and all(m.applied == r.granted.get(name) for name, m in self.fleet.items())
        )

    def cold_start(self) -> dict[str, float]:
        for _ in range(self.args.members):
            self.at(0.0, Join(self.new_member()))
        wall = time.perf_counter()
        self.run_until(float("inf"), self.complete)
        took = time.perf_counter() - wall
        ticks, self.t.ticks = self.t.ticks, []
        self.t.encode = []
        return {
            "cold_start_sim_s": round(self.now, 3),
            "cold_start_cpu_s": round(took, 3),
            "cold_start_ticks": len(ticks),
            "cold_start_max_tick_ms": round(max(ticks) * 1000, 3),
        }

    def scale(self, name: str, act: Callable[[], None]) -> dict[str, float]:
        """One fleet operation at once (``act`` queues its events), until settled: the
        ticks it cost, apart from the churn's."""
        saved, self.t.ticks = self.t.ticks, []
        began, records = self.now, self.t.records
        act()
        wall = time.perf_counter()
        self.run_until(
            float("inf"), lambda: not self.queue and self.state.settled() and self.complete()
        )
        took = time.perf_counter() - wall
        ticks, self.t.ticks = self.t.ticks, saved
        return {
            f"{name}_sim_s": round(self.now - began, 3),
            f"{name}_cpu_s": round(took, 3),
            f"{name}_ticks": len(ticks),
            f"{name}_records": self.t.records - records,
            f"{name}_tick_p99_ms": round(pct(ticks, 0.99) * 1000, 3),
            f"{name}_tick_max_ms": round(max(ticks, default=0.0) * 1000, 3),
        }

    def scale_in_and_out(self) -> dict[str, float]:
        """Half the fleet leaves cleanly at once, then as many new members join at once
        (``fleet_ops.py``'s scale-in and scale-out, without brokers)."""
        leaving = sorted(self.fleet.values(), key=lambda m: m.name)[len(self.fleet) // 2 :]
        count = len(leaving)

        def leave() -> None:
            for m in leaving:
                self.at(self.now, Leave(m, crash=False))

        def join() -> None:
            for _ in range(count):
                self.at(self.now, Join(None))

        return {**self.scale("scale_in", leave), **self.scale("scale_out", join)}

    def churn(self) -> None:
        start = self.now
        spacing = self.args.spacing
        end = start + self.args.events * spacing + TUNING.leave_grace + TUNING.handoff_timeout
        chunks = max(1, self.args.lag_chunks)
        for k in range(int((end - start) / self.args.lag_interval) + 1):
            base = start + k * self.args.lag_interval
            for c in range(chunks):
                when = base + c * self.args.lag_interval / chunks
                self.at(when, Readings(range(c, len(self.tps), chunks)))
        leavers = sorted(self.fleet.values(), key=lambda m: m.name)  # each leaves once
        for i in range(self.args.events):
            when = start + (i + 1) * spacing
            kind = self.rng.choice(("join", "leave", "crash"))
            if kind == "join" or len(leavers) < 2:
                self.at(when, Join(None))
            else:
                victim = leavers.pop(self.rng.randrange(len(leavers)))
                self.at(when, Leave(victim, crash=kind == "crash"))
        self.run_until(end)


#: What ``--phases`` times, by the group state's attribute that holds it ("": itself):
#: the engine's step and its parts, the reconciler's calls.
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("", ("tick",)),
    (
        "engine",
        ("apply", "_settle", "_place_orphans", "_repair", "_rebalance_lag", "_align", "_diff"),
    ),
    ("reconciler", ("update_target", "plan", "commit")),
)


class Phases:
    """CPU time per phase and tick (``PHASES``), for the split of the slowest ticks. It
    wraps the methods of one ``GroupState``'s objects, not their classes."""

    def __init__(self, state: GroupState) -> None:
        self.tick: defaultdict[str, float] = defaultdict(float)
        self.ticks: list[tuple[float, dict[str, float]]] = []
        for attr, names in PHASES:
            obj = getattr(state, attr) if attr else state
            for name in names:
                label = f"{type(obj).__name__}.{name}"
                setattr(obj, name, self._timed(getattr(obj, name), label))

    def _timed(self, fn: Callable[..., object], label: str) -> Callable[..., object]:
        def timed(*args: object, **kwargs: object) -> object:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.tick[label] += time.thread_time() - start

        return timed

    def ended(self, seconds: float) -> None:
        self.ticks.append((seconds, self.tick))
        self.tick = defaultdict(float)

    def slowest(self, share: float = 0.02) -> dict[str, float]:
        """The phases' mean ms over the slowest ``share`` of ticks."""
        top = sorted(self.ticks, key=lambda t: -t[0])[: max(1, int(len(self.ticks) * share))]
        total: defaultdict[str, float] = defaultdict(float)
        for _, tick in top:
            for label, seconds in tick.items():
                total[label] += seconds
        out = {"ticks_ms": round(sum(t for t, _ in top) / len(top) * 1000, 3)}
        for label, seconds in sorted(total.items(), key=lambda kv: -kv[1]):
            out[label] = round(seconds / len(top) * 1000, 3)
        return out


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--members", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=100_000)
    p.add_argument("--topics", type=int, default=10)
    p.add_argument("--events", type=int, default=200, help="membership events in the churn")
    p.add_argument("--spacing", type=float, default=0.5, help="seconds between events")
    p.add_argument("--lag-interval", type=float, default=5.0, help="every partition, every …")
    p.add_argument(
        "--lag-chunks", type=int, default=1, help="readings of one interval arrive in N batches"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--scale", action="store_true", help="also half the fleet leaving, then joining, at once"
    )
    p.add_argument("--json", action="store_true", help="one JSON line")
    p.add_argument("--phases", action="store_true", help="also where the churn's slowest ticks go")
    args = p.parse_args()
    collector_policy.configure()  # as ``ballast run`` does
    bench = Bench(args)
    out: dict[str, object] = {"members": args.members, "partitions": args.partitions}
    out.update(bench.cold_start())
    if args.scale:
        out.update(bench.scale_in_and_out())
    phases = Phases(bench.state) if args.phases else None
    bench.phases = phases
    bench.churn()
    t = bench.t
    out.update(
        {
            "events": args.events,
            "ticks": len(t.ticks),
            "tick_p50_ms": round(pct(t.ticks, 0.5) * 1000, 3),
            "tick_p99_ms": round(pct(t.ticks, 0.99) * 1000, 3),
            "tick_max_ms": round(max(t.ticks, default=0.0) * 1000, 3),
            "encode_p99_ms": round(pct(t.encode, 0.99) * 1000, 3),
            "encode_max_ms": round(max(t.encode, default=0.0) * 1000, 3),
            "records": t.records,
            "lag_readings": t.lag_readings,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )
    if phases is not None:
        out["slowest_ticks_phases_ms"] = phases.slowest()
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>24}  {v}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
