"""What operator constraints cost the engine: the same group (by default 10 000 members x
100 000 partitions over 10 topics, identical subscriptions, no lag) built and churned
without constraints and with pins (one per 100 members, at most 100) and 10 caps, side
by side in one run. Usage:

    python benchmarks/constraints_cost.py [--members 10000 --partitions 100000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from assignors import (
    ConstraintsChanged,
    IncrementalAssignor,
    MemberJoined,
    MemberLeft,
    TopicPartition,
)

TOPICS = 10


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=100_000)
    args = parser.parse_args()
    if args.members < 100 or args.partitions < 10 * TOPICS:
        parser.error("--members must be at least 100 and --partitions at least 100")
    per_topic = args.partitions // TOPICS
    ppt = {f"t{i}": per_topic for i in range(TOPICS)}
    subs = {f"m{i:05d}": list(ppt) for i in range(args.members)}
    pins = {
        TopicPartition("t0", i * 7 % per_topic): f"m{i:05d}" for i in range(args.members // 100)
    }
    first_capped = args.members * 9 // 10
    caps = {f"m{first_capped + i:05d}": 3 for i in range(10)}
    print(
        "| constraints | build ms | leave median / max ms | join median / max ms | "
        "ConstraintsChanged ms | violations |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    cases = {"none": ({}, {}), f"{len(pins)} pins, {len(caps)} caps": (pins, caps)}
    for label, (pinned, capped) in cases.items():
        began = time.perf_counter()
        eng, _ = IncrementalAssignor.from_snapshot(
            ppt, subs, lag_aware=False, pins=pinned, max_partitions=capped
        )
        build = time.perf_counter() - began
        leaves, joins = [], []
        for k in range(20):  # the first event after the build included
            member = f"m{k * 37 % args.members:05d}"
            began = time.perf_counter()
            eng.apply([MemberLeft(member)])
            leaves.append(time.perf_counter() - began)
            began = time.perf_counter()
            eng.apply([MemberJoined(member, frozenset(ppt))])
            joins.append(time.perf_counter() - began)
        began = time.perf_counter()
        eng.apply(
            [
                ConstraintsChanged(
                    {**pinned, TopicPartition("t1", 5): "m00001"}, {**capped, "m00002": 1}
                )
            ]
        )
        changed = time.perf_counter() - began
        print(
            f"| {label} | {_ms(build)} | {_ms(statistics.median(leaves))} / {_ms(max(leaves))} "
            f"| {_ms(statistics.median(joins))} / {_ms(max(joins))} | {_ms(changed)} "
            f"| {len(eng.violations())} |"
        )


if __name__ == "__main__":
    main()
