"""The array form of the least-movement rebalance equals its rule applied one partition at
a time."""

from __future__ import annotations

import heapq

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors.ids import Claims
from assignors.placement import keep_uniform


def one_by_one(
    members: list[str], kept: dict[str, list[int]], unowned: list[int]
) -> dict[str, list[int]]:
    """``keep_uniform``'s rule as KIP-54 states it: larger quotas to the members holding
    most (ties: name); members over quota give up their highest; the pool, lowest first,
    each to the member under quota holding fewest (ties: name)."""
    counts = {m: len(kept.get(m, [])) for m in members}
    q, r = divmod(sum(counts.values()) + len(unowned), len(members))
    larger = sorted(members, key=lambda m: (-counts[m], m))[:r]
    quota = {m: q + (m in larger) for m in members}
    pool = list(unowned)
    changed: dict[str, list[int]] = {}
    for m in members:
        extra = counts[m] - quota[m]
        if extra > 0:
            pool += kept[m][-extra:]
            changed[m] = kept[m][:-extra]
    heap = [(counts[m], m) for m in members if counts[m] < quota[m]]
    heapq.heapify(heap)
    for pid in sorted(pool):
        count, m = heapq.heappop(heap)
        changed[m] = [*changed.get(m, kept.get(m, [])), pid]
        if count + 1 < quota[m]:
            heapq.heappush(heap, (count + 1, m))
    return {m: sorted(parts) for m, parts in changed.items()}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_keep_uniform_in_arrays_equals_the_rule_one_partition_at_a_time(
    data: st.DataObject,
) -> None:
    members = sorted(data.draw(st.sets(st.sampled_from([f"m{i}" for i in range(9)]), min_size=1)))
    total = data.draw(st.integers(0, 40))
    order = data.draw(st.permutations(range(total)))
    owners = data.draw(st.lists(st.sampled_from([*members, None]), min_size=total, max_size=total))
    kept: dict[str, list[int]] = {}
    for pid, owner in zip(order, owners, strict=True):
        if owner is not None:
            kept.setdefault(owner, []).append(pid)
    kept = {m: sorted(kept[m]) for m in sorted(kept)}
    unowned = sorted(p for p, o in zip(order, owners, strict=True) if o is None)
    lists = list(kept.values())
    claims = Claims(
        list(kept),
        np.array([p for parts in lists for p in parts], dtype=np.int64),
        np.cumsum([len(parts) for parts in lists], dtype=np.intp),
        {},
    )
    got = keep_uniform(members, claims, np.array(unowned, dtype=np.int64))
    assert got == one_by_one(members, kept, unowned)
