"""Exact optima under count balance for small groups: the largest member lag, and the
fewest partitions held off their racks.

Integer programming through SciPy's HiGHS (the ``optimum`` extra); used by tests and
benchmarks to say how far a heuristic is from the best possible, never at run time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from .types import TopicPartition


def optimal_max_lag(
    members: Sequence[str],
    partitions: Sequence[TopicPartition],
    lag: Mapping[TopicPartition, int],
    *,
    time_limit: float = 60.0,
) -> int:
    """Smallest possible largest member lag when every member can take every partition and
    counts must differ by at most one (identical subscriptions)."""
    n, p = len(members), len(partitions)
    if n == 0 or p == 0:
        return 0
    q, r = divmod(p, n)
    lo, hi = q, q + (1 if r else 0)
    nx = n * p  # x[i, j] = partition j on member i, then z = the largest member lag
    c = np.zeros(nx + 1)
    c[-1] = 1.0
    a = lil_matrix((p + 2 * n, nx + 1))
    lower = np.empty(p + 2 * n)
    upper = np.empty(p + 2 * n)
    weights = [lag.get(tp, 0) for tp in partitions]
    for j in range(p):
        for i in range(n):
            a[j, i * p + j] = 1
        lower[j] = upper[j] = 1
    for i in range(n):
        row = p + i
        for j in range(p):
            a[row, i * p + j] = 1
        lower[row], upper[row] = lo, hi
        row = p + n + i
        for j in range(p):
            a[row, i * p + j] = weights[j]
        a[row, nx] = -1
        lower[row], upper[row] = -np.inf, 0
    integrality = np.ones(nx + 1)
    integrality[-1] = 0
    bounds = Bounds(np.zeros(nx + 1), np.r_[np.ones(nx), np.inf])
    res = milp(
        c,
        constraints=LinearConstraint(a.tocsr(), lower, upper),
        integrality=integrality,
        bounds=bounds,
        options={"time_limit": time_limit},
    )
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"exact optimum not found: {res.message}")
    best: float = res.fun
    return round(best)


def optimal_cross_rack(
    members: Mapping[str, str | None],
    partition_racks: Mapping[TopicPartition, Collection[str]],
    *,
    time_limit: float = 60.0,
) -> int:
    """Fewest partitions held off their replicas' racks (Kafka's count: only members
    with a rack count) over every KIP-54-balanced assignment of ``partition_racks``'s
    partitions to ``members`` (``{member: rack or None}``), every member able to take
    every partition: each member holds ``q`` or ``q + 1``."""
    names, parts = sorted(members), sorted(partition_racks)
    n, p = len(names), len(parts)
    if n == 0 or p == 0:
        return 0
    q, r = divmod(p, n)
    # x[i, j] = partition j on member i; its cost is 1 when member i is off j's racks.
    cost = np.array(
        [
            float(members[m] is not None and members[m] not in partition_racks[tp])
            for m in names
            for tp in parts
        ]
    )
    a = lil_matrix((p + n, n * p))
    for j in range(p):
        for i in range(n):
            a[j, i * p + j] = 1
    for i in range(n):
        for j in range(p):
            a[p + i, i * p + j] = 1
    lower = np.r_[np.ones(p), np.full(n, q)]
    upper = np.r_[np.ones(p), np.full(n, q + (1 if r else 0))]
    res = milp(
        cost,
        constraints=LinearConstraint(a.tocsr(), lower, upper),
        integrality=np.ones(n * p),
        bounds=Bounds(np.zeros(n * p), np.ones(n * p)),
        options={"time_limit": time_limit},
    )
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"exact optimum not found: {res.message}")
    least: float = res.fun
    return round(least)
