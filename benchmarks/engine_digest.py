"""One digest of the engine's results over seeded random scenarios, to show that a
change meant to be faster changes no result: run it on two trees and compare.

Each scenario joins members in waves (1 to 50 at once), makes a third of them leave now
and then, and, by seed, adds lag (spread or with many ties), capacities, racks on members
and replicas, and shared partition objects (``intern_partitions``, as the controller).
Every ``Change`` (lists, deltas, counts of moves), every assignment and the cross-rack
count go into the digest.

    PYTHONPATH=/path/to/other/tree python benchmarks/engine_digest.py --scenarios 40
    python benchmarks/engine_digest.py --scenarios 40
"""

from __future__ import annotations

import argparse
import hashlib
import random
import time
from collections.abc import Callable

from assignors import (
    Change,
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    TopicPartition,
)

ZONES = ("a", "b", "c")


def scenario(seed: int, update: Callable[[bytes], object]) -> float:
    """Feed one scenario's results to ``update`` (a digest's); the seconds ``apply`` took."""
    rng = random.Random(seed)
    topics = {f"t{i}": rng.randint(5, 400) for i in range(rng.randint(1, 6))}
    lag_mode = seed % 3  # 0: no lag, 1: spread, 2: many ties
    capacities, racked = seed % 5 == 4, seed % 4 == 1
    replicas = (
        {TopicPartition(t, p): rng.sample(ZONES, 2) for t, n in topics.items() for p in range(n)}
        if racked
        else None
    )
    eng, _ = IncrementalAssignor.from_snapshot(
        topics, {}, lag_aware=lag_mode > 0, partition_racks=replicas
    )
    if seed % 2 == 0:
        eng.intern_partitions()
    joined, spent = 0, 0.0
    for step in range(12):
        events: list[MemberJoined | MemberLeft | LagUpdated] = []
        for _ in range(rng.choice((1, 2, 5, 20, 50))):
            if rng.random() < 0.75 or joined < 3:
                events.append(
                    MemberJoined(
                        f"m{joined:04d}",
                        frozenset(topics),
                        capacity=rng.choice((1, 2, 4)) if capacities else None,
                        rack=rng.choice(ZONES) if racked else None,
                    )
                )
                joined += 1
        members = list(eng.members)
        if step % 3 == 2 and len(members) > 4:
            events += map(MemberLeft, rng.sample(members, rng.randint(1, len(members) // 3)))
        if lag_mode:
            events.append(
                LagUpdated(
                    {
                        TopicPartition(t, p): rng.choice((0, 0, 100, 100, 5000))
                        if lag_mode == 2
                        else rng.randrange(0, 10_000)
                        for t, n in topics.items()
                        for p in range(n)
                        if rng.random() < 0.5
                    }
                )
            )
        began = time.perf_counter()
        change = eng.apply(events)
        spent += time.perf_counter() - began
        feed(update, change)
        update(repr((eng.cross_rack(), sorted(eng.assignment().items()))).encode())
    return spent


def feed(update: Callable[[bytes], object], change: Change) -> None:
    deltas = sorted((n, sorted(d.gained), sorted(d.lost)) for n, d in change.deltas.items())
    update(repr(sorted(change.assignments.items())).encode())
    update(repr(deltas).encode())
    update(
        repr(
            (sorted(change.removed), change.moved, change.moved_for_lag, change.moved_for_rack)
        ).encode()
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scenarios", type=int, default=40)
    args = p.parse_args()
    digest = hashlib.sha256()
    spent = sum(scenario(seed, digest.update) for seed in range(args.scenarios))
    print(f"{digest.hexdigest()}  apply {spent:.3f} s")


if __name__ == "__main__":
    main()
