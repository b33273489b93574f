"""The assignor core at fleet scale, beside Apache Kafka's own assignors in the same run.

Every path a user meets: the stateless ``assign`` (fresh, and with ``current`` after one
member leaves or joins, like Kafka's harness: from the implementation's own fresh result),
and the engine's public API (build, one leave or join, a lag update, a rebuild from its
own assignment as at a takeover and the first events after it). Kafka's
``UniformAssignor`` and client ``StickyAssignor`` run on identical inputs through
``kafka_peer``. Run through ``assignors_bench.py --scale``.

Inputs are built, then frozen out of the garbage collector (``gc.freeze``) before anything
is timed, so that a collection of the harness's own million ``TopicPartition`` objects is not
billed to whichever call it happens to interrupt. Ballast's objects are created after the
freeze and stay collectable.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Any

import kafka_peer

from assignors import IncrementalAssignor, LagUpdated, MemberJoined, MemberLeft, TopicPartition
from assignors import assign as ballast_assign
from assignors.partition_lists import topic_partitions
from assignors.quality import evaluate


@dataclass(frozen=True)
class Scenario:
    name: str
    members: int
    partitions: int
    topics: int
    mixed: bool
    #: Kafka implementations that finish this scenario in reasonable time.
    kafka: tuple[str, ...]
    #: Availability zones: members spread over them, two replicas of each partition on
    #: two of them (Kafka's rack tests' layout). 0: no racks.
    zones: int = 0
    #: Mixed pod sizes: member capacities cycle over these (empty: none declared).
    capacities: tuple[float, ...] = ()


SCENARIOS = (
    Scenario("identical 10k x 100k", 10_000, 100_000, 10, False, ("kafka-uniform", "kafka-sticky")),
    Scenario("identical 10k x 1M", 10_000, 1_000_000, 10, False, ("kafka-uniform", "kafka-sticky")),
    Scenario(
        "mixed 1k x 10k, 50 topics", 1_000, 10_000, 50, True, ("kafka-uniform", "kafka-sticky")
    ),
    # Kafka's client sticky needs minutes per call here; its uniform assignor runs.
    Scenario("mixed 10k x 100k, 100 topics", 10_000, 100_000, 100, True, ("kafka-uniform",)),
    # Kafka's figures for this group are the rack-blind "identical 10k x 100k" rows above:
    # the peer's driver passes no racks.
    Scenario("identical 10k x 100k, 3 zones", 10_000, 100_000, 10, False, (), zones=3),
    Scenario("mixed 10k x 100k, 100 topics, 3 zones", 10_000, 100_000, 100, True, (), zones=3),
    # Kafka has no capacities: its figures are the plain "identical 10k x 100k" rows.
    Scenario(
        "identical 10k x 100k, capacities 1/2/4",
        10_000,
        100_000,
        10,
        False,
        (),
        capacities=(1, 2, 4),
    ),
)
QUICK = (
    Scenario("identical 1k x 10k", 1_000, 10_000, 10, False, ("kafka-uniform", "kafka-sticky")),
    Scenario("mixed 500 x 5k, 20 topics", 500, 5_000, 20, True, ("kafka-uniform", "kafka-sticky")),
    Scenario("identical 1k x 10k, 3 zones", 1_000, 10_000, 10, False, (), zones=3),
    Scenario(
        "identical 1k x 10k, capacities 1/2/4", 1_000, 10_000, 10, False, (), capacities=(1, 2, 4)
    ),
)


def racks(s: Scenario, ppt: Mapping[str, int], members: list[str]) -> dict[str, Any]:
    """``member_racks`` and ``partition_racks`` keyword arguments for ``s`` (none without
    zones; ``member_capacities`` with capacities). Replicas of partition p sit in zones p
    and p + 1 (mod zones)."""
    if s.capacities:
        sizes = s.capacities
        return {"member_capacities": {m: sizes[i % len(sizes)] for i, m in enumerate(members)}}
    if not s.zones:
        return {}
    zone = [f"az-{z}" for z in range(s.zones)]
    return {
        "member_racks": {m: zone[i % s.zones] for i, m in enumerate(members)},
        "partition_racks": {
            TopicPartition(t, p): (zone[p % s.zones], zone[(p + 1) % s.zones])
            for t, n in ppt.items()
            for p in range(n)
        },
    }


def group(
    s: Scenario, seed: int = 1
) -> tuple[dict[str, int], dict[str, list[str]], dict[TopicPartition, int], list[str]]:
    """Partitions spread evenly over the topics, random lag 0-5 000, 20 distinct victims."""
    rng = random.Random(seed)
    names = [f"topic-{i:03d}" for i in range(s.topics)]
    ppt = {
        t: s.partitions // s.topics + (1 if i < s.partitions % s.topics else 0)
        for i, t in enumerate(names)
    }
    members = [f"member-{i:05d}" for i in range(s.members)]
    if s.mixed:
        subs = {m: sorted(rng.sample(names, rng.randint(1, s.topics))) for m in members}
        for i, t in enumerate(names):  # every topic has a subscriber
            m = members[i % s.members]
            subs[m] = sorted({*subs[m], t})
    else:
        subs = {m: list(names) for m in members}
    lag = {TopicPartition(t, p): rng.randint(0, 5_000) for t, n in ppt.items() for p in range(n)}
    return ppt, subs, lag, rng.sample(members, 20)


def _ms(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1000


def _row(s: Scenario, op: str, impl: str, times: list[float], **extra: Any) -> dict[str, Any]:
    return {
        "scenario": s.name,
        "op": op,
        "impl": impl,
        "median_ms": round(statistics.median(times), 3),
        "max_ms": round(max(times), 3),
        "runs": len(times),
        **extra,
    }


def ballast(s: Scenario, repeat: int) -> list[dict[str, Any]]:
    ppt, subs, lag, victims = group(s)
    placed = racks(s, ppt, list(subs))
    gc.collect()
    gc.freeze()
    rows: list[dict[str, Any]] = []
    big = s.partitions > 200_000
    fresh_runs = 3 if big else 5
    built, collected = floor(ppt, list(subs))
    rows.append(_row(s, "fresh", "floor: build the result's objects", built))
    rows.append(
        _row(s, "fresh", "floor: build them, and the collector's pass over them", collected)
    )
    for strategy, weights in (("sticky", None), ("lagsticky", lag)):
        times = []
        result: dict[str, list[TopicPartition]] = {}
        for _ in range(fresh_runs):
            result, ms = _ms(lambda: ballast_assign(strategy, ppt, subs, lag=weights, **placed))  # noqa: B023
            times.append(ms)
        rows.append(
            _row(s, "fresh", f"assign {strategy}", times, **_cross(placed, ppt, subs, result))
        )
        if strategy == "sticky" and not placed:
            rows.append(
                _row(s, "fresh", "assign sticky, topics not seen before", unseen(ppt, subs))
            )
        leave_t, join_t = [], []
        for v in victims[10 : 10 + (3 if big else repeat)]:
            left = {m: t for m, t in subs.items() if m != v}
            current = {m: p for m, p in result.items() if m != v}
            leave = partial(ballast_assign, strategy, ppt, left, current=current, lag=weights)
            after, ms = _ms(partial(leave, **_without(placed, v)))
            leave_t.append(ms)
            join = partial(ballast_assign, strategy, ppt, subs, current={**after, v: []})
            _, ms = _ms(partial(join, lag=weights, **placed))
            join_t.append(ms)
        rows.append(_row(s, "leave", f"assign {strategy}, current", leave_t))
        rows.append(_row(s, "join", f"assign {strategy}, current", join_t))
    for label, weights in (("engine build", None), ("engine build, lag", lag)):
        times = [
            _ms(lambda: IncrementalAssignor.from_snapshot(ppt, subs, lag=weights, **placed))[1]  # noqa: B023
            for _ in range(fresh_runs)
        ]
        rows.append(_row(s, "fresh", label, times))
    rows += engine_events(s, ppt, subs, lag, victims, placed)
    gc.unfreeze()
    return rows


def unseen(ppt: Mapping[str, int], subs: Mapping[str, list[str]], runs: int = 5) -> list[float]:
    """Fresh ``sticky`` calls whose topics no call named before, renamed outside the
    timing: what a first call pays to build its partitions, where repeated calls copy
    whole topics' lists from ``partition_lists``' cache. A call with ``current`` cannot
    use that cache (it reads the caller's claims), so this is the fresh call it is
    compared with, beside the cached one."""
    times = []
    for run in range(runs):
        names = {t: f"{t}~{run}" for t in ppt}
        renamed = {names[t]: n for t, n in ppt.items()}
        members = {m: [names[t] for t in topics] for m, topics in subs.items()}
        times.append(_ms(partial(ballast_assign, "sticky", renamed, members))[1])
    return times


def _without(placed: dict[str, Any], member: str) -> dict[str, Any]:
    """``placed`` without ``member``'s rack or capacity."""
    return {
        key: {m: v for m, v in per_member.items() if m != member}
        if key.startswith("member_")
        else per_member
        for key, per_member in placed.items()
    }


def _cross(
    placed: dict[str, Any],
    ppt: Mapping[str, int],
    subs: Mapping[str, list[str]],
    result: Mapping[str, list[TopicPartition]],
) -> dict[str, Any]:
    """The result's cross-rack count, or its distance from the capacity shares, as a
    row's extra column (nothing without racks or capacities)."""
    if not placed:
        return {}
    q = evaluate(result, ppt, subs, **placed)
    if "member_capacities" in placed:
        return {"share_error": round(q.share_error, 3), "balanced": q.balanced}
    return {"cross_rack": q.cross_rack}


def floor(
    ppt: Mapping[str, int], members: list[str], runs: int = 5
) -> tuple[list[float], list[float]]:
    """What any fresh result costs in Python: every ``TopicPartition`` built the fastest
    way this project knows, dealt into one list per member, with the cyclic collector
    paused as ``assign`` pauses it. Nothing decided.

    Returned twice: building alone, and building plus the collector's first pass over the
    new objects. A ``TopicPartition`` is a tracked container, so that pass (a generation-0
    collection, here run by hand; ``assign`` triggers it when it re-enables the collector)
    is part of what a result of a million of them costs, in any implementation."""
    built, collected = [], []
    n = len(members)
    for _ in range(runs):
        gc.disable()
        t0 = time.perf_counter()
        every = list(chain.from_iterable(map(topic_partitions, ppt, ppt.values())))
        out = {m: every[i::n] for i, m in enumerate(members)}
        t1 = time.perf_counter()
        gc.enable()
        gc.collect(0)
        t2 = time.perf_counter()
        built.append((t1 - t0) * 1000)
        collected.append((t2 - t0) * 1000)
        del every, out
    return built, collected


def engine_events(
    s: Scenario,
    ppt: Mapping[str, int],
    subs: Mapping[str, list[str]],
    lag: Mapping[TopicPartition, int],
    victims: list[str],
    placed: dict[str, Any],
) -> list[dict[str, Any]]:
    """One leave, then the same member back, per victim; the first event right after the
    build (no collection in between) is reported on its own. Then lag updates touching 1 %
    of the partitions. The harness's results so far are frozen first, like its inputs."""
    gc.collect()
    gc.freeze()
    eng, _ = IncrementalAssignor.from_snapshot(ppt, subs, lag=lag, **placed)
    rack_of = placed.get("member_racks", {})
    leave_t, join_t = [], []
    first = 0.0
    for i, v in enumerate(victims):
        _, ms = _ms(lambda: eng.apply([MemberLeft(v)]))  # noqa: B023
        if i == 0:
            first = ms
        if i >= 10:
            leave_t.append(ms)
        back = MemberJoined(v, frozenset(subs[v]), *_placement_of(v, placed))
        _, ms = _ms(lambda: eng.apply([back]))  # noqa: B023
        if i >= 10:
            join_t.append(ms)
    rng = random.Random(5)
    keys = list(lag)
    readings = max(1, s.partitions // 100)
    lag_t = []
    lag_now = dict(lag)
    for _ in range(5):
        update = {tp: rng.randint(0, 5_000) for tp in rng.sample(keys, readings)}
        lag_t.append(_ms(lambda: eng.apply([LagUpdated(update)]))[1])  # noqa: B023
        lag_now.update(update)
    cross = {"cross_rack": eng.cross_rack()} if rack_of else {}
    return [
        _row(s, "leave", "engine", leave_t, first_after_build_ms=round(first, 3)),
        _row(s, "join", "engine", join_t, **cross),
        _row(s, f"lag update, {readings} readings", "engine", lag_t),
        *recovery(s, eng, ppt, subs, lag_now, victims, placed),
    ]


def recovery(
    s: Scenario,
    eng: IncrementalAssignor,
    ppt: Mapping[str, int],
    subs: Mapping[str, list[str]],
    lag: Mapping[TopicPartition, int],
    victims: list[str],
    placed: dict[str, Any],
) -> list[dict[str, Any]]:
    """What a controller pays at takeover: an engine built from the published assignment
    (``current``) and the lag ``eng`` holds, and its first leave and join right after,
    with no collection in between (the issue's "first event after a recovery")."""
    current = eng.assignment()
    gc.collect()
    gc.freeze()
    builds, leaves, joins = [], [], []
    moved = 0
    for v in victims[:3]:
        (rec, change), ms = _ms(
            partial(IncrementalAssignor.from_snapshot, ppt, subs, current, lag, **placed)
        )
        builds.append(ms)
        moved += change.moved
        leaves.append(_ms(partial(rec.apply, [MemberLeft(v)]))[1])
        back = MemberJoined(v, frozenset(subs[v]), *_placement_of(v, placed))
        joins.append(_ms(partial(rec.apply, [back]))[1])
        del rec
        gc.collect()
    return [
        _row(s, "recovery", "engine from current, lag", builds, moved=moved),
        _row(s, "recovery", "engine, first leave after it", leaves),
        _row(s, "recovery", "engine, first join after it", joins),
    ]


def _placement_of(member: str, placed: dict[str, Any]) -> tuple[str | None, float | None]:
    """A rejoining member's rack and capacity, as the scenario declared them."""
    return (
        placed.get("member_racks", {}).get(member),
        placed.get("member_capacities", {}).get(member),
    )


def kafka(s: Scenario) -> list[dict[str, Any]]:
    if not s.kafka:
        return []
    ppt, subs, _, victims = group(s)
    out = []
    for r in kafka_peer.run(s.name, ppt, subs, victims, s.kafka):
        out.append(
            {
                "scenario": s.name,
                "op": r["op"],
                "impl": r["impl"],
                "median_ms": r["median_ms"],
                "max_ms": max(map(float, r["runs_ms"])) if r["runs_ms"] else r["median_ms"],
                "runs": r["n_runs"],
            }
        )
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """One line per scenario and operation: Kafka's medians, then each Ballast path with its
    median, worst, and ratio to Kafka's ``UniformAssignor``."""
    lines = [
        "| scenario | operation | Kafka Uniform | Kafka Sticky | Ballast path | median ms | "
        "worst ms | ÷ Uniform |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    keyed: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        keyed.setdefault((r["scenario"], r["op"]), {})[r["impl"]] = r
    for (scenario, op), impls in keyed.items():
        uni = impls.get("kafka-uniform")
        sticky = impls.get("kafka-sticky")
        ours = [r for name, r in impls.items() if not name.startswith("kafka-")]
        for r in ours:
            extra = ""
            if "first_after_build_ms" in r:
                extra = f" (first after build {r['first_after_build_ms']:g})"
            if "cross_rack" in r:
                extra += f" (cross-rack {r['cross_rack']})"
            ratio = f"{r['median_ms'] / uni['median_ms']:.2f}" if uni and uni["median_ms"] else ""
            lines.append(
                f"| {scenario} | {op} | {_cell(uni)} | {_cell(sticky)} | {r['impl']}{extra} "
                f"| {r['median_ms']:g} | {r['max_ms']:g} | {ratio} |"
            )
    return "\n".join(lines) + "\n"


def _cell(r: dict[str, Any] | None) -> str:
    return "" if r is None else f"{r['median_ms']:g}"
