"""What operator constraints cost the engine: the same 10 000 members x 100 000
partitions (10 topics, identical subscriptions, no lag) built and churned without
constraints and with 100 pins and 10 caps, side by side in one run. Usage:

    python benchmarks/constraints_cost.py
"""

from __future__ import annotations

import statistics
import time

from assignors import (
    ConstraintsChanged,
    IncrementalAssignor,
    MemberJoined,
    MemberLeft,
    TopicPartition,
)

PPT = {f"t{i}": 10_000 for i in range(10)}
SUBS = {f"m{i:05d}": list(PPT) for i in range(10_000)}
CASES = {
    "none": ({}, {}),
    "100 pins, 10 caps": (
        {TopicPartition("t0", i * 7): f"m{i:05d}" for i in range(100)},
        {f"m{9000 + i:05d}": 3 for i in range(10)},
    ),
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main() -> None:
    print(
        "| constraints | build ms | leave median / max ms | join median / max ms | "
        "ConstraintsChanged ms | violations |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, (pins, caps) in CASES.items():
        began = time.perf_counter()
        eng, _ = IncrementalAssignor.from_snapshot(
            PPT, SUBS, lag_aware=False, pins=pins, max_partitions=caps
        )
        build = time.perf_counter() - began
        leaves, joins = [], []
        for k in range(20):  # the first event after the build included
            member = f"m{k * 37:05d}"
            began = time.perf_counter()
            eng.apply([MemberLeft(member)])
            leaves.append(time.perf_counter() - began)
            began = time.perf_counter()
            eng.apply([MemberJoined(member, frozenset(PPT))])
            joins.append(time.perf_counter() - began)
        began = time.perf_counter()
        eng.apply(
            [ConstraintsChanged({**pins, TopicPartition("t1", 5): "m00001"}, {**caps, "m00002": 1})]
        )
        changed = time.perf_counter() - began
        print(
            f"| {label} | {_ms(build)} | {_ms(statistics.median(leaves))} / {_ms(max(leaves))} "
            f"| {_ms(statistics.median(joins))} / {_ms(max(joins))} | {_ms(changed)} "
            f"| {len(eng.violations())} |"
        )


if __name__ == "__main__":
    main()
