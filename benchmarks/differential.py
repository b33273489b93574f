"""The engine checked against the stateless API and exact solvers, event by event.

A seeded run drives ``IncrementalAssignor`` through random joins, leaves, resubscriptions,
repartitions, lag, racks, capacities and constraints on small groups, and after every
event checks what must hold (validity, balance, pins and caps, the change record,
``cross_rack()``), and measures what should (cross-rack partitions against a rack-blind
engine built from the same state and given the same event; a fresh build against the
exact optimum of ``assignors.optimum``). The suite runs a short seeded run (tests/assignors/
test_differential.py); this script runs a long one and reports:

    python benchmarks/differential.py --runs 400 --events 150
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))
from assignors import (
    ConstraintsChanged,
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionRacksChanged,
    PartitionsChanged,
    SubscriptionChanged,
    TopicPartition,
    assign,
)
from assignors.constraints import Constraints
from assignors.optimum import optimal_cross_rack
from assignors.quality import imbalances, movement, problems
from assignors.racks import Racks, cross_rack

TOPICS = ["t0", "t1", "t2"]
RACKS = ["a", "b", "c"]


@dataclass
class Report:
    """What a run found. ``failures`` are broken invariants; the rest are measurements."""

    events: int = 0
    failures: list[str] = field(default_factory=list)
    #: Fresh identical-subscription builds with racks, and those above the exact optimum.
    fresh_racked: int = 0
    fresh_misses: int = 0
    #: Events compared with a rack-blind step from the same state (without pins or caps,
    #: which a twin built from the state could not share); those after which the racked
    #: engine held more partitions off their racks (``sticky``: a failure; ``lagsticky``:
    #: counted, as its lag moves come before racks), and those after which it held fewer.
    blind_steps: int = 0
    worse_than_blind: int = 0
    better_than_blind: int = 0
    #: Fresh mixed-subscription groups with racks: above the exact optimum over every
    #: KIP-54-balanced assignment, above the best placement with ``sticky``'s own
    #: member counts, and ``lagsticky`` with no lag known above the optimum.
    mixed_racked: int = 0
    mixed_misses: int = 0
    mixed_misses_given_counts: int = 0
    mixed_lagsticky_misses: int = 0
    #: Stateless ``assign`` from the engine's state, unbalanced or invalid.
    stateless_failures: int = 0
    #: ``lagsticky`` with racks and lag fed its own result (same lag): groups checked, and
    #: those where it moved something (not a fixed point).
    fixed_point_checked: int = 0
    fixed_point_moves: int = 0

    def merge(self, other: Report) -> None:
        """Add ``other``'s counts and failures to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def _event(rng: random.Random, members: list[str]) -> Any:
    member = rng.choice(members)
    some = frozenset(rng.sample(TOPICS, rng.randint(1, len(TOPICS))))
    kind = rng.choices(
        ["join", "leave", "sub", "parts", "lag", "racks", "constraints"],
        weights=[5, 3, 1, 1, 3, 1, 1],
    )[0]
    if kind == "join":
        rack = rng.choice([None, *RACKS])
        capacity = rng.choice([None, None, None, 2, 0.5])
        return MemberJoined(member, some, rack, capacity)
    if kind == "leave":
        return MemberLeft(member)
    if kind == "sub":
        return SubscriptionChanged(member, some)
    if kind == "parts":
        return PartitionsChanged(rng.choice(TOPICS), rng.randint(0, 9))
    if kind == "lag":
        return LagUpdated(
            {
                TopicPartition(t, p): rng.randint(0, 10_000)
                for t in some
                for p in range(9)
                if rng.random() < 0.4
            }
        )
    if kind == "racks":
        return PartitionRacksChanged(
            {
                TopicPartition(t, p): rng.sample(RACKS, rng.randint(0, 2))
                for t in some
                for p in range(9)
            }
        )
    pins = (
        {TopicPartition(rng.choice(TOPICS), rng.randint(0, 4)): member}
        if rng.random() < 0.5
        else {}
    )
    caps = {rng.choice(members): rng.randint(1, 6)} if rng.random() < 0.5 else {}
    return ConstraintsChanged(pins=pins, max_partitions=caps)


def _cross(
    eng: IncrementalAssignor,
    assignment: dict[str, list[TopicPartition]],
    replicas: dict[TopicPartition, frozenset[str]],
) -> int:
    racks = {m: r for m in eng.members if (r := eng.rack_of(m)) is not None}
    return cross_rack(assignment, Racks(racks, replicas))


def _blind_twin(eng: IncrementalAssignor, lag_aware: bool) -> IncrementalAssignor | None:
    """A rack-blind engine in ``eng``'s state, or None when building it moved something
    (the state is not one a build keeps whole)."""
    before = eng.assignment()
    capacities = {m: c for m in eng.members if (c := eng.capacity_of(m)) is not None}
    twin, change = IncrementalAssignor.from_snapshot(
        eng.partitions_per_topic,
        eng.members,
        current=before,
        lag=eng.lag(),
        member_capacities=capacities,
        lag_aware=lag_aware,
    )
    return None if change.moved else twin


def run(seed: int, events: int, *, lag_aware: bool) -> Report:
    """One seeded run: every event applied to an engine with racks, the invariants
    checked after each, and each compared with the same event applied rack-blind to the
    same state."""
    rng = random.Random(seed)
    members = [f"m{i}" for i in range(rng.randint(2, 7))]
    report = Report()
    eng = IncrementalAssignor({t: 6 for t in TOPICS}, lag_aware=lag_aware)
    replicas: dict[TopicPartition, frozenset[str]] = {}
    pins: dict[TopicPartition, str] = {}
    caps: dict[str, int] = {}
    for step in range(events):
        event = _event(rng, members)
        where = f"seed {seed} event {step} {event!r}"
        if isinstance(event, PartitionRacksChanged):
            replicas.update({tp: frozenset(r) for tp, r in event.racks.items()})
            mirrored: Any = None
        elif isinstance(event, MemberJoined):
            mirrored = MemberJoined(event.member, event.topics, None, event.capacity)
        else:
            mirrored = event
        if isinstance(event, ConstraintsChanged):
            pins, caps = dict(event.pins), dict(event.max_partitions)
        before = eng.assignment()
        blind = (
            _blind_twin(eng, lag_aware) if mirrored is not None and not pins and not caps else None
        )
        change = eng.apply([event])
        if blind is not None:
            blind.apply([mirrored])
        report.events += 1
        after, subs, ppt = eng.assignment(), eng.members, eng.partitions_per_topic
        capacities = {m: c for m in subs if (c := eng.capacity_of(m)) is not None}
        live = {tp: replicas[tp] for tp in replicas if tp.partition < ppt.get(tp.topic, 0)}
        rules = Constraints(
            {
                tp: m
                for tp, m in pins.items()
                if m in subs and tp.topic in subs[m] and tp.partition < ppt.get(tp.topic, 0)
            },
            {m: c for m, c in caps.items() if m in subs},
        )
        left = eng.unassigned()
        unowned = {f"{tp!r} has subscribers but no owner" for tp in left}
        failures = [
            *(f"{where}: invalid: {p}" for p in problems(after, ppt, subs) if p not in unowned),
            *(
                f"{where}: {tp} unassigned while {m} has room"
                for tp in left
                for m, topics in subs.items()
                if tp.topic in topics and len(after[m]) < rules.caps.get(m, len(after[m]) + 1)
            ),
            *(f"{where}: unbalanced {i}" for i in imbalances(after, subs, capacities, rules)),
            *(f"{where}: constraint broken: {v}" for v in eng.violations()),
        ]
        if eng.cross_rack() != _cross(eng, after, live):
            failures.append(
                f"{where}: cross_rack() {eng.cross_rack()} != {_cross(eng, after, live)}"
            )
        if change.moved != movement(before, after, subs):
            failures.append(f"{where}: moved {change.moved} != {movement(before, after, subs)}")
        if blind is not None:
            racked, unracked = _cross(eng, after, live), _cross(eng, blind.assignment(), live)
            report.blind_steps += 1
            report.worse_than_blind += racked > unracked
            report.better_than_blind += racked < unracked
            if racked > unracked and not lag_aware:
                failures.append(f"{where}: cross-rack {racked} > {unracked} of a rack-blind step")
        report.failures += failures
        try:
            again = assign(
                "lagsticky" if lag_aware else "sticky",
                ppt,
                subs,
                current=after,
                lag=eng.lag(),
                member_capacities=capacities,
            )
        except Exception as e:  # counted, with its message: the run goes on
            report.failures.append(f"{where}: stateless assign raised {e!r}")
            continue
        if not rules and (problems(again, ppt, subs) or imbalances(again, subs, capacities)):
            report.stateless_failures += 1
    return report


def fresh(seed: int) -> tuple[int, int]:
    """A fresh identical-subscription group with racks: (cross-rack of ``sticky``, the
    exact optimum over every KIP-54-balanced assignment)."""
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    ppt = {t: rng.randint(1, 5) for t in TOPICS[: rng.randint(1, 3)]}
    members: dict[str, str | None] = {f"m{i}": rng.choice([None, *RACKS]) for i in range(n)}
    replicas = {
        TopicPartition(t, p): sorted(rng.sample(RACKS, rng.randint(0, 2)))
        for t, c in ppt.items()
        for p in range(c)
    }
    subs = {m: list(ppt) for m in members}
    got = assign("sticky", ppt, subs, member_racks=members, partition_racks=replicas)
    racks = Racks(
        {m: r for m, r in members.items() if r is not None},
        {tp: frozenset(r) for tp, r in replicas.items()},
    )
    return cross_rack(got, racks), optimal_cross_rack(members, replicas)


def fresh_mixed(seed: int) -> tuple[int, int, int, int]:
    """A fresh mixed-subscription group with racks: (cross-rack of ``sticky``, the exact
    optimum, the exact optimum with ``sticky``'s member counts, cross-rack of
    ``lagsticky`` with no lag known)."""
    rng = random.Random(seed)
    members: dict[str, str | None] = {
        f"m{i}": rng.choice([None, *RACKS]) for i in range(rng.randint(2, 6))
    }
    subs = {m: sorted(rng.sample(TOPICS, rng.randint(1, 3))) for m in members}
    ppt = {t: rng.randint(1, 5) for t in sorted(set().union(*map(set, subs.values())))}
    replicas = {
        TopicPartition(t, p): sorted(rng.sample(RACKS, rng.randint(0, 2)))
        for t, c in ppt.items()
        for p in range(c)
    }
    got = assign("sticky", ppt, subs, member_racks=members, partition_racks=replicas)
    racks = Racks(
        {m: r for m, r in members.items() if r is not None},
        {tp: frozenset(r) for tp, r in replicas.items()},
    )
    counts = {m: len(held) for m, held in got.items()}
    lagged = assign("lagsticky", ppt, subs, member_racks=members, partition_racks=replicas)
    return (
        cross_rack(got, racks),
        optimal_cross_rack(members, replicas, subs),
        optimal_cross_rack(members, replicas, subs, counts=counts),
        cross_rack(lagged, racks),
    )


def moves_when_fed_back(seed: int) -> int:
    """``lagsticky`` with racks and lag, called again with its own result and the same
    lag: the partitions that move (0 at a fixed point)."""
    rng = random.Random(seed)
    ppt = {t: rng.randint(1, 6) for t in TOPICS}
    members: dict[str, str | None] = {
        f"m{i}": rng.choice([None, *RACKS]) for i in range(rng.randint(2, 6))
    }
    subs = {m: sorted(rng.sample(TOPICS, rng.randint(1, 3))) for m in members}
    replicas = {
        TopicPartition(t, p): rng.sample(RACKS, rng.randint(0, 2))
        for t, c in ppt.items()
        for p in range(c)
    }
    lag = {tp: rng.choice([0, rng.randint(0, 100), rng.randint(0, 100_000)]) for tp in replicas}
    kw: dict[str, Any] = {"lag": lag, "member_racks": members, "partition_racks": replicas}
    first = assign("lagsticky", ppt, subs, **kw)
    return movement(first, assign("lagsticky", ppt, subs, current=first, **kw), subs)


def check(runs: int, events: int, fresh_groups: int, seed: int = 0) -> Report:
    report = Report()
    for i in range(runs):
        report.merge(run(seed + i, events, lag_aware=i % 2 == 1))
    for i in range(fresh_groups):
        report.fixed_point_checked += 1
        report.fixed_point_moves += moves_when_fed_back(seed + i) > 0
        got, best = fresh(seed + i)
        report.fresh_racked += 1
        if got > best:
            report.fresh_misses += 1
            report.failures.append(f"fresh seed {seed + i}: cross-rack {got} > optimum {best}")
        got, best, given_counts, lagged = fresh_mixed(seed + i)
        report.mixed_racked += 1
        report.mixed_misses += got > best
        report.mixed_misses_given_counts += got > given_counts
        report.mixed_lagsticky_misses += lagged > best
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--events", type=int, default=150)
    parser.add_argument("--fresh", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    report = check(args.runs, args.events, args.fresh, args.seed)
    summary = {
        **asdict(report),
        "failures": report.failures[:20],
        "failure_count": len(report.failures),
    }
    summary["seconds"] = round(time.perf_counter() - started, 1)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
