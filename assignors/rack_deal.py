"""A fresh placement that is rack aware from the start (KIP-881), for groups whose members
can all take every partition.

Aligning a rack-blind deal by swaps costs a few index updates per misplaced partition,
and with replicas on two of three zones a third of all partitions start misplaced.
Instead, the member counts are kept as the rack-blind deal gives them (balance and every
count unchanged), each rack gets the sum of its members' counts as slots, and a maximum
flow from replica *layouts* (the set of racks a partition's replicas are on) to racks
decides how many partitions of each layout each rack takes. The graph has a node per
layout and per rack, not per partition: a cluster has a handful of each.

No assignment with these counts keeps more partitions local, so no count-neutral swap
can improve the result: the engine's alignment has nothing left to do. What the flow
cannot route fills the racks' remaining slots and the members without a rack. Within a
rack partitions are dealt round robin, as the rack-blind deal deals them, in array passes.

Partitions are named here by their place in the rack-blind deal's order (*rank*).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

Ranks = NDArray[np.int64]


def layout_flow(
    supply: Sequence[int], reach: Sequence[Sequence[int]], slots: Sequence[int]
) -> list[dict[int, int]]:
    """A maximum flow from layouts (``supply[i]`` partitions, allowed on the racks
    ``reach[i]``) to racks (``slots[j]`` places each): per layout, how many partitions
    each rack takes. Edmonds-Karp: shortest augmenting paths, whose number does not
    depend on the capacities."""
    n_layouts, n_racks = len(supply), len(slots)
    source, sink = n_layouts + n_racks, n_layouts + n_racks + 1
    residual: list[dict[int, int]] = [{} for _ in range(sink + 1)]

    def edge(a: int, b: int, capacity: int) -> None:
        residual[a][b] = residual[a].get(b, 0) + capacity
        residual[b].setdefault(a, 0)

    for i, n in enumerate(supply):
        if n and reach[i]:
            edge(source, i, n)
            for j in reach[i]:
                edge(i, n_layouts + j, n)
    for j, n in enumerate(slots):
        if n:
            edge(n_layouts + j, sink, n)
    while True:
        parent = {source: source}
        queue = deque([source])
        while queue and sink not in parent:
            a = queue.popleft()
            for b, capacity in residual[a].items():
                if capacity and b not in parent:
                    parent[b] = a
                    queue.append(b)
        if sink not in parent:
            break
        path, b = [], sink
        while b != source:
            path.append((parent[b], b))
            b = parent[b]
        pushed = min(residual[a][b] for a, b in path)
        for a, b in path:
            residual[a][b] -= pushed
            residual[b][a] += pushed
    # The flow on layout -> rack edges is what the reverse edges hold.
    return [
        {j: residual[n_layouts + j][i] for j in reach[i] if residual[n_layouts + j].get(i)}
        for i in range(n_layouts)
    ]


def spread(n: int, amounts: Sequence[int]) -> NDArray[np.intp]:
    """``amounts[k]`` labels ``k`` (summing to ``n``) spread evenly over ``n`` places, so
    that each label gets heavy and light places alike."""
    kept = [k for k, a in enumerate(amounts) if a]
    keys = np.concatenate([(np.arange(amounts[k]) + 0.5) / amounts[k] for k in kept])
    labels = np.repeat(np.asarray(kept, dtype=np.intp), [amounts[k] for k in kept])
    assert len(labels) == n
    return labels[np.argsort(keys, kind="stable")]


def deal_by_rack(
    members: Sequence[str],
    rack_of: Mapping[str, str],
    layout: NDArray[np.int64],
    layouts: Sequence[frozenset[str]],
) -> tuple[dict[str, Ranks], Ranks]:
    """Ranks per member (ascending), and the ranks placed off their replicas' racks.

    ``layout[rank]`` indexes ``layouts`` (-1: no replica rack known). Each member gets
    the count the round-robin deal over ``members`` gives it."""
    total, n = len(layout), len(members)
    counts = [len(range(i, total, n)) for i in range(n)]
    racks = sorted({rack_of[m] for m in members if m in rack_of})
    rack_index = {r: j for j, r in enumerate(racks)}
    # Group -1 holds the members without a rack: they take only what no rack can.
    groups: dict[int, list[int]] = {}
    for k, m in enumerate(members):
        groups.setdefault(rack_index.get(rack_of.get(m, ""), -1), []).append(k)
    slots = [sum(counts[k] for k in groups.get(j, ())) for j in range(len(racks))]
    reach = [sorted(rack_index[r] for r in named if r in rack_index) for named in layouts]
    by_layout = np.argsort(layout, kind="stable")
    bounds = np.searchsorted(layout[by_layout], np.arange(-1, len(layouts) + 1))
    flow = layout_flow(np.diff(bounds)[1:].tolist(), reach, slots)

    local: dict[int, list[Ranks]] = {j: [] for j in range(len(racks))}
    pool: list[Ranks] = [by_layout[bounds[0] : bounds[1]]]
    for i in range(len(layouts)):
        segment = by_layout[bounds[i + 1] : bounds[i + 2]]
        if not len(segment):
            continue
        targets = list(flow[i])
        amounts = [flow[i][j] for j in targets]
        amounts.append(len(segment) - sum(amounts))
        labels = spread(len(segment), amounts)
        for k, j in enumerate(targets):
            local[j].append(segment[labels == k])
        pool.append(segment[labels == len(targets)])
    left = np.sort(np.concatenate(pool))
    holders = [j for j in range(len(racks)) if slots[j] > sum(map(len, local[j]))]
    wanted = [slots[j] - sum(map(len, local[j])) for j in holders]
    if -1 in groups:
        holders.append(-1)
        wanted.append(sum(counts[k] for k in groups[-1]))
    labels = spread(len(left), wanted) if len(left) else np.empty(0, dtype=np.intp)
    filled = {j: left[labels == h] for h, j in enumerate(holders)}
    misplaced = [filled[j] for j in holders if j >= 0]

    out: dict[str, Ranks] = {}
    for j, group in groups.items():
        mine = np.sort(np.concatenate([*local.get(j, []), filled.get(j, left[:0])]))
        out.update(_deal(mine, [members[k] for k in group], [counts[k] for k in group]))
    return out, np.concatenate(misplaced) if misplaced else left[:0]


def _deal(ranks: Ranks, members: list[str], counts: list[int]) -> dict[str, Ranks]:
    """``ranks`` round robin over ``members`` so that each gets exactly its count (they
    differ by at most one): the members with one more go first."""
    n = len(members)
    base = len(ranks) // n
    extra = [m for m, c in zip(members, counts, strict=True) if c > base]
    rest = [m for m, c in zip(members, counts, strict=True) if c <= base]
    assert len(extra) == len(ranks) - base * n, "counts must differ by at most one"
    return {m: ranks[i::n] for i, m in enumerate(extra + rest)}
