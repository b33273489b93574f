"""Assignor benchmark: Ballast's sticky/lagsticky against kafka-python's StickyPartitionAssignor.

Shaped like Kafka's own assignor benchmarks: members x partitions-per-member x topics,
identical and mixed subscriptions, fresh and incremental (one member leaves; one joins).
Peers run on identical inputs in the same process and run, so ratios are meaningful on a
noisy machine. Usage:

    python benchmarks/assignors_bench.py                 # full grid (~10 min on 2 cores)
    python benchmarks/assignors_bench.py --quick         # small grid, a minute
    python benchmarks/assignors_bench.py --markdown out.md
    python benchmarks/assignors_bench.py --scale         # 10 000 x 1 000 000 beside Kafka's
                                                         # own assignors (~25 min)
    python benchmarks/assignors_bench.py --scale --only "10k x 100k"   # some of them
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import assignors_scale
import kafka_peer
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.structs import TopicPartition as KafkaTopicPartition

from assignors import IncrementalAssignor, MemberJoined, MemberLeft, TopicPartition, assign
from assignors.optimum import optimal_max_lag
from assignors.quality import imbalances, member_lag, minimal_movement_uniform, movement

# kafka-python needs ~25 s per call at 1 000 x 10 000 identical; with mixed subscriptions
# at that size one call ran for more than 9 minutes without finishing, so it is capped.
KAFKA_PYTHON_MAX_PARTITIONS = {"identical": 10_000, "mixed": 5_000}


@dataclass
class Row:
    members: int
    partitions: int
    topics: int
    subscriptions: str
    event: str
    impl: str
    ms_median: float
    ms_p90: float
    moved: int
    min_moved: int | None
    spread: int
    balanced: bool
    lag_skew: float


def build_group(
    members: int, per_member: int, topics: int, mixed: bool, seed: int
) -> tuple[dict[str, int], dict[str, list[str]], dict[TopicPartition, int]]:
    rng = random.Random(seed)
    total = members * per_member
    names = [f"topic-{i:03d}" for i in range(topics)]
    ppt = {t: total // topics + (1 if i < total % topics else 0) for i, t in enumerate(names)}
    if mixed:
        subs = {
            f"member-{i:05d}": sorted(rng.sample(names, rng.randint(1, topics)))
            for i in range(members)
        }
        for i, t in enumerate(names):  # every topic has a subscriber
            subs[f"member-{i % members:05d}"] = sorted({*subs[f"member-{i % members:05d}"], t})
    else:
        subs = {f"member-{i:05d}": list(names) for i in range(members)}
    lag = {
        TopicPartition(t, p): int(rng.paretovariate(1.2) * 100)
        for t, n in ppt.items()
        for p in range(n)
    }
    return ppt, subs, lag


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, list[float]]:
    out = None
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return out, times


def describe(
    result: Mapping[str, list[TopicPartition]],
    subs: Mapping[str, list[str]],
    lag: Mapping[TopicPartition, int],
) -> tuple[int, bool, float]:
    counts = [len(result.get(m, ())) for m in subs]
    totals = member_lag({m: result.get(m, []) for m in subs}, lag)
    mean = sum(totals.values()) / max(1, len(totals))
    skew = max(totals.values()) / mean if mean else 1.0
    return max(counts) - min(counts), not imbalances(result, subs), skew


# ------------------------------------------------------------------ kafka-python peer


class _KafkaMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    metadata: Any


class _Cluster:
    def __init__(self, ppt: Mapping[str, int]) -> None:
        self._ppt = ppt

    def topics(self) -> set[str]:
        return set(self._ppt)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self._ppt[topic]))


def kafka_python_sticky(
    ppt: Mapping[str, int],
    subs: Mapping[str, list[str]],
    current: Mapping[str, list[TopicPartition]] | None,
    generation: int,
) -> dict[str, list[TopicPartition]]:
    members = []
    for m, topics in subs.items():
        owned = (
            None
            if current is None
            else [KafkaTopicPartition(tp.topic, tp.partition) for tp in current.get(m, [])]
        )
        meta = StickyPartitionAssignor._metadata(topics, owned, generation)
        members.append(_KafkaMember(m, None, meta))
    out = StickyPartitionAssignor().assign(_Cluster(ppt), members)
    return {
        m: sorted(TopicPartition(t, p) for t, ps in a.assignment for p in ps)
        for m, a in out.items()
    }


# ------------------------------------------------------------------ scenarios


def run_config(members: int, per_member: int, topics: int, mixed: bool, repeat: int) -> list[Row]:
    ppt, subs, lag = build_group(members, per_member, topics, mixed, seed=members + topics)
    total = sum(ppt.values())
    kind = "mixed" if mixed else "identical"
    rows: list[Row] = []

    def add(event: str, impl: str, times: list[float], before: Any, result: Any, sub: Any) -> None:
        spread, balanced, skew = describe(result, sub, lag)
        min_moved = None
        if before is not None and not mixed:
            kept = {m: v for m, v in before.items() if m in sub}
            min_moved = minimal_movement_uniform(kept, list(sub), total)
        rows.append(
            Row(
                members,
                total,
                topics,
                kind,
                event,
                impl,
                round(statistics.median(times), 3),
                round(sorted(times)[max(0, int(len(times) * 0.9) - 1)], 3),
                movement(before, result, sub) if before is not None else 0,
                min_moved,
                spread,
                balanced,
                round(skew, 3),
            )
        )

    fresh_repeat = 3 if total <= 100_000 else 1
    for strategy in ("sticky", "lagsticky"):
        result, times = timed(partial(assign, strategy, ppt, subs, lag=lag), fresh_repeat)
        add("fresh", f"ballast {strategy}", times, None, result, subs)

    # Incremental: the engine the daemon keeps; one member leaves, then rejoins.
    engine, _ = IncrementalAssignor.from_snapshot(ppt, subs, lag=lag)
    rng = random.Random(7)
    leave_t: list[float] = []
    join_t: list[float] = []
    victims = sorted(subs)
    for _ in range(repeat):
        victim = rng.choice(victims)
        t0 = time.perf_counter()
        change = engine.apply([MemberLeft(victim)])
        leave_t.append((time.perf_counter() - t0) * 1000)
        assert mixed or change.moved == 0, "a leave must not move partitions of staying members"
        t0 = time.perf_counter()
        engine.apply([MemberJoined(victim, frozenset(subs[victim]))])
        join_t.append((time.perf_counter() - t0) * 1000)
    # One more pass of each event, kept whole for the quality columns.
    victim = rng.choice(victims)
    before = engine.assignment()
    engine.apply([MemberLeft(victim)])
    after_leave = engine.assignment()
    after_leave_subs = {m: v for m, v in subs.items() if m != victim}
    add("leave", "ballast engine", leave_t, before, after_leave, after_leave_subs)
    engine.apply([MemberJoined(victim, frozenset(subs[victim]))])
    add("join", "ballast engine", join_t, after_leave, engine.assignment(), subs)

    if total <= KAFKA_PYTHON_MAX_PARTITIONS[kind]:
        kp_fresh, times = timed(lambda: kafka_python_sticky(ppt, subs, None, -1), 1)
        add("fresh", "kafka-python sticky", times, None, kp_fresh, subs)
        kp_leave, times = timed(lambda: kafka_python_sticky(ppt, after_leave_subs, kp_fresh, 1), 1)
        add("leave", "kafka-python sticky", times, kp_fresh, kp_leave, after_leave_subs)
        kp_join, times = timed(lambda: kafka_python_sticky(ppt, subs, kp_leave, 2), 1)
        add("join", "kafka-python sticky", times, kp_leave, kp_join, subs)
    return rows


def lag_quality(seeds: int) -> list[dict[str, Any]]:
    """Largest member lag vs the exact count-balanced optimum on small identical groups.

    Instances whose optimum HiGHS cannot prove within the time limit are skipped (and
    counted in the report), never guessed."""
    out = []
    for seed in range(seeds):
        rng = random.Random(seed)
        m, p = rng.choice([3, 4, 5, 6]), rng.choice([12, 16, 20, 24])
        ppt = {"a": p // 2, "b": p - p // 2}
        subs = {f"m{i}": ["a", "b"] for i in range(m)}
        lag = {
            TopicPartition(t, i): int(rng.paretovariate(1.1) * 1000)
            for t, n in ppt.items()
            for i in range(n)
        }
        try:
            best = optimal_max_lag(list(subs), list(lag), lag, time_limit=60)
        except RuntimeError:
            out.append({"seed": seed, "members": m, "partitions": p, "optimum": None})
            continue
        row: dict[str, Any] = {"seed": seed, "members": m, "partitions": p, "optimum": best}
        for strategy in ("lagsticky", "lag", "sticky", "roundrobin"):
            got = max(member_lag(assign(strategy, ppt, subs, lag=lag), lag).values())
            row[strategy] = round(got / best, 4) if best else 1.0
        out.append(row)
    return out


def engine_rss(members: int, partitions: int) -> dict[str, float]:
    """Peak RSS of a fresh interpreter holding the engine. Read from VmHWM: ``ru_maxrss``
    survives fork and exec on Linux, so a child of this (large) process would report ours."""
    code = f"""
import json
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
from assignors import IncrementalAssignor
ppt = {{f"topic-{{i:03d}}": {partitions} // 10 for i in range(10)}}
subs = {{f"member-{{i:05d}}": list(ppt) for i in range({members})}}
before = hwm()
eng, _ = IncrementalAssignor.from_snapshot(ppt, subs)
peak = hwm()
print(json.dumps({{"peak_rss_mib": peak, "engine_mib": peak - before}}))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(res.stdout))


def markdown(rows: list[Row], lagq: list[dict[str, Any]], rss: dict[str, float]) -> str:
    lines = [
        "| members | partitions | topics | subs | event | implementation | median ms | p90 ms "
        "| moved | min moved | max-min | KIP-54 balanced | lag skew |",
        "|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.members} | {r.partitions} | {r.topics} | {r.subscriptions} | {r.event} | {r.impl} "
            f"| {r.ms_median:g} | {r.ms_p90:g} | {r.moved} | {'' if r.min_moved is None else r.min_moved} "
            f"| {r.spread} | {'yes' if r.balanced else 'NO'} | {r.lag_skew} |"
        )
    lines += [
        "",
        "Largest member lag / exact optimum (identical subscriptions, Pareto(1.1) lag):",
        "",
    ]
    lines += ["| strategy | mean ratio | worst ratio |", "|---|---:|---:|"]
    solved = [r for r in lagq if r["optimum"] is not None]
    for strategy in ("lagsticky", "lag", "sticky", "roundrobin"):
        vals = [r[strategy] for r in solved]
        lines.append(f"| {strategy} | {statistics.mean(vals):.4f} | {max(vals):.4f} |")
    lines += [
        "",
        f"{len(solved)} instances of 3-6 members x 12-24 partitions solved exactly; "
        f"{len(lagq) - len(solved)} skipped (optimum not proven within 60 s).",
    ]
    lines += [
        "",
        f"Engine at 10 000 members x 100 000 partitions: peak RSS {rss['peak_rss_mib']:.0f} MiB "
        f"(engine and its input {rss['engine_mib']:.0f} MiB).",
    ]
    return "\n".join(lines) + "\n"


def ratios(rows: list[Row]) -> list[str]:
    out = []
    by = {(r.members, r.partitions, r.topics, r.subscriptions, r.event, r.impl): r for r in rows}
    for key, r in by.items():
        if r.impl != "kafka-python sticky":
            continue
        ours = by.get((*key[:5], "ballast engine")) or by.get((*key[:5], "ballast sticky"))
        if ours:
            out.append(
                f"{key[0]} x {key[1]} ({key[2]} topics) {key[3]} {key[4]}: ballast {ours.ms_median:g} ms vs "
                f"kafka-python {r.ms_median:g} ms -> {r.ms_median / max(ours.ms_median, 1e-6):.0f}x; "
                f"moved {ours.moved} vs {r.moved}; max-min {ours.spread} vs {r.spread}"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small grid")
    parser.add_argument(
        "--repeat", type=int, default=21, help="incremental events per config (--scale: up to 10)"
    )
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    parser.add_argument(
        "--json", type=Path, help="write raw rows here (one per line, as they come)"
    )
    parser.add_argument("--report", type=Path, help="skip the grid: render rows saved by --json")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="instead of the grid: every path at up to 10 000 x 1 000 000, beside Kafka's own "
        "assignors (Java, same run); with --quick, small sizes",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="with --scale: run the scenarios whose name contains this (repeatable)",
    )
    args = parser.parse_args()
    if args.scale:
        scale(args)
        return
    if args.report:
        saved = [
            Row(**json.loads(line)) for line in args.report.read_text().splitlines() if line.strip()
        ]
        report(saved, args)
        return

    grid: list[tuple[int, int, int, bool]] = []
    member_sizes = (100, 1000) if args.quick else (100, 1000, 10_000)
    for members in member_sizes:
        for per_member in (10, 50):
            for topics in (10, 100):
                for mixed in (False, True):
                    grid.append((members, per_member, topics, mixed))
    rows: list[Row] = []
    sink = args.json.open("w") if args.json else None
    for members, per_member, topics, mixed in grid:
        started = time.perf_counter()
        new = run_config(members, per_member, topics, mixed, args.repeat)
        rows += new
        print(
            f"# {members} members x {per_member}/member, {topics} topics, "
            f"{'mixed' if mixed else 'identical'}: {time.perf_counter() - started:.1f}s",
            file=sys.stderr,
        )
        for r in new:
            print(json.dumps(asdict(r)), file=sys.stderr)
            if sink:
                sink.write(json.dumps(asdict(r)) + "\n")
                sink.flush()
    if sink:
        sink.close()
    report(rows, args)


def scale(args: argparse.Namespace) -> None:
    scenarios: tuple[assignors_scale.Scenario, ...] = (
        assignors_scale.QUICK if args.quick else assignors_scale.SCENARIOS
    )
    if args.only:
        scenarios = tuple(s for s in scenarios if any(part in s.name for part in args.only))
    why = kafka_peer.available()
    if why:
        print(f"# Kafka's assignors skipped: {why}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    sink = args.json.open("w") if args.json else None
    for s in scenarios:
        started = time.perf_counter()
        new = ([] if why else assignors_scale.kafka(s)) + assignors_scale.ballast(s, args.repeat)
        rows += new
        print(f"# {s.name}: {time.perf_counter() - started:.0f}s", file=sys.stderr)
        for r in new:
            print(json.dumps(r), file=sys.stderr)
            if sink:
                sink.write(json.dumps(r) + "\n")
                sink.flush()
    if sink:
        sink.close()
    members, partitions = (1_000, 10_000) if args.quick else (10_000, 1_000_000)
    rss = engine_rss(members, partitions)
    text = assignors_scale.markdown(rows) + (
        f"\nEngine at {members} members x {partitions} partitions: peak RSS "
        f"{rss['peak_rss_mib']:.0f} MiB (engine and its input {rss['engine_mib']:.0f} MiB).\n"
    )
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


def report(rows: list[Row], args: argparse.Namespace) -> None:
    lagq = lag_quality(8 if args.quick else 24)
    rss = engine_rss(10_000, 100_000)
    text = markdown(rows, lagq, rss)
    print(text)
    print("\n".join(ratios(rows)))
    print(
        f"\nmax RSS of this benchmark process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    if args.markdown:
        args.markdown.write_text(text + "\n" + "\n".join(ratios(rows)) + "\n")


if __name__ == "__main__":
    main()
