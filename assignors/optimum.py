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
    subscriptions: Mapping[str, Collection[str]] | None = None,
    *,
    counts: Mapping[str, int] | None = None,
    time_limit: float = 60.0,
) -> int:
    """Fewest partitions held off their replicas' racks (Kafka's count: only members
    with a rack count) over every KIP-54-balanced assignment of ``partition_racks``'s
    partitions to ``members`` (``{member: rack or None}``). Without ``subscriptions``
    every member may take every partition and holds ``q`` or ``q + 1``; with them, a
    member takes only its topics, and one that holds a partition of a topic holds at
    most one more than any other subscriber of it (KIP-54's rule, ``imbalances``).
    With ``counts``, each member holds exactly its count instead: the best placement
    for counts a heuristic chose."""
    names, parts = sorted(members), sorted(partition_racks)
    n, p = len(names), len(parts)
    if n == 0 or p == 0:
        return 0
    subs = subscriptions or {m: {tp.topic for tp in parts} for m in names}
    topics = sorted({tp.topic for tp in parts})
    # x[i, j] = partition j on member i (i * p + j), then y[i, t] = member i holds some
    # partition of topic t (n * p + i * len(topics) + t); a cost of 1 when i is off j's
    # racks.
    nx, ny = n * p, n * len(topics)
    cost = np.zeros(nx + ny)
    allowed = np.zeros(nx + ny)
    for i, m in enumerate(names):
        for j, tp in enumerate(parts):
            cost[i * p + j] = members[m] is not None and members[m] not in partition_racks[tp]
            allowed[i * p + j] = tp.topic in subs[m]
    allowed[nx:] = 1
    rows: list[tuple[dict[int, float], float, float]] = []
    for j in range(p):  # each partition held once
        rows.append(({i * p + j: 1.0 for i in range(n)}, 1, 1))
    if counts is not None:
        for i, m in enumerate(names):
            rows.append(({i * p + j: 1.0 for j in range(p)}, counts[m], counts[m]))
    elif subscriptions is None:
        q, r = divmod(p, n)
        for i in range(n):
            rows.append(({i * p + j: 1.0 for j in range(p)}, q, q + (1 if r else 0)))
    else:
        for i in range(n):
            for k, t in enumerate(topics):
                y = nx + i * len(topics) + k
                for j, tp in enumerate(parts):
                    if tp.topic == t:  # y >= x
                        rows.append(({y: 1.0, i * p + j: -1.0}, 0, np.inf))
                for o, other in enumerate(names):
                    if o != i and t in subs[other]:
                        # count_i - count_o <= 1 + p * (1 - y)
                        row = {i * p + j: 1.0 for j in range(p)}
                        for j in range(p):
                            row[o * p + j] = row.get(o * p + j, 0.0) - 1.0
                        row[y] = float(p)
                        rows.append((row, -np.inf, 1 + p))
    a = lil_matrix((len(rows), nx + ny))
    for r_, (row, _, _) in enumerate(rows):
        for col, v in row.items():
            a[r_, col] = v
    res = milp(
        cost,
        constraints=LinearConstraint(
            a.tocsr(), [lo for _, lo, _ in rows], [hi for _, _, hi in rows]
        ),
        integrality=np.ones(nx + ny),
        bounds=Bounds(np.zeros(nx + ny), allowed),
        options={"time_limit": time_limit},
    )
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"exact optimum not found: {res.message}")
    least: float = res.fun
    return round(least)
