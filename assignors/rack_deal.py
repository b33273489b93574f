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
from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .placement import sort_key

Ranks = NDArray[np.int64]


def layout_flow(
    supply: Sequence[int],
    reach: Sequence[Sequence[int]],
    slots: Sequence[int],
    extra: Sequence[int] = (),
    extras: int = 0,
) -> tuple[list[dict[int, int]], list[int]]:
    """A maximum flow from layouts (``supply[i]`` partitions, allowed on the racks
    ``reach[i]``) to racks (``slots[j]`` places each, and up to ``extra[j]`` more, of
    ``extras`` more in all): per layout, how many partitions each rack takes, and how
    many of its extra places each rack used. Edmonds-Karp: shortest augmenting paths,
    whose number does not depend on the capacities."""
    n_layouts, n_racks = len(supply), len(slots)
    spare, source, sink = n_layouts + n_racks, n_layouts + n_racks + 1, n_layouts + n_racks + 2
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
    if extras:
        for j, n in enumerate(extra):
            if n:
                edge(n_layouts + j, spare, n)
        edge(spare, sink, extras)
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
    # The flow on an edge is what its reverse edge holds.
    flows = [
        {j: residual[n_layouts + j][i] for j in reach[i] if residual[n_layouts + j].get(i)}
        for i in range(n_layouts)
    ]
    used = [residual[spare].get(n_layouts + j, 0) for j in range(n_racks)]
    return flows, used


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
) -> tuple[list[Share], Ranks]:
    """The shares of the racks (and of the members without a rack), and the ranks
    placed off their replicas' racks.

    ``layout[rank]`` indexes ``layouts`` (-1: no replica rack known). Every member gets
    ``total // n`` partitions or one more (KIP-54); which members get the one more is
    part of the flow, so that no balanced assignment holds fewer partitions off their
    racks. A member without a rack holds nothing off its rack (Kafka's count): the flow
    routes any layout to those members, and they take the extras first."""
    total, n = len(layout), len(members)
    base, extras = divmod(total, n)
    racks = sorted({rack_of[m] for m in members if m in rack_of})
    rack_index = {r: j for j, r in enumerate(racks)}
    # Group -1 holds the members without a rack; in the flow it is the last node.
    groups: dict[int, list[int]] = {}
    for k, m in enumerate(members):
        groups.setdefault(rack_index.get(rack_of.get(m, ""), -1), []).append(k)
    nodes = [*range(len(racks)), -1]
    sizes = [len(groups.get(j, ())) for j in nodes]
    anywhere = [len(racks)] if sizes[-1] else []
    reach = [
        [*sorted(rack_index[r] for r in named if r in rack_index), *anywhere] for named in layouts
    ]
    by_layout = np.argsort(sort_key(layout, len(layouts)), kind="stable")
    bounds = np.searchsorted(layout[by_layout], np.arange(-1, len(layouts) + 1))
    supply = np.diff(bounds).tolist()  # layout -1 last, where only ``anywhere`` reaches
    supply = [*supply[1:], supply[0]]
    flow, used = layout_flow(
        supply,
        [*reach, anywhere],
        [size * base for size in sizes],
        [min(size, extras) for size in sizes],
        extras,
    )
    # Extras the flow left unused: to the members without a rack first (no count off a
    # rack there), then rack by rack.
    more = extras - sum(used)
    for g in [len(racks), *range(len(racks))]:
        take = min(more, sizes[g] - used[g])
        used[g] += take
        more -= take
    slots = [size * base + e for size, e in zip(sizes, used, strict=True)]

    local: list[list[Ranks]] = [[] for _ in nodes]
    pool: list[Ranks] = []
    for i in range(len(layouts) + 1):
        lo, hi = (bounds[i + 1], bounds[i + 2]) if i < len(layouts) else (bounds[0], bounds[1])
        segment = by_layout[lo:hi]
        if not len(segment):
            continue
        targets = list(flow[i])
        amounts = [flow[i][j] for j in targets]
        amounts.append(len(segment) - sum(amounts))
        labels = spread(len(segment), amounts)
        for k, j in enumerate(targets):
            local[j].append(segment[labels == k])
        pool.append(segment[labels == len(targets)])
    left = np.sort(np.concatenate(pool)) if pool else layout[:0]
    holders = [g for g in range(len(nodes)) if slots[g] > sum(map(len, local[g]))]
    wanted = [slots[g] - sum(map(len, local[g])) for g in holders]
    labels = spread(len(left), wanted) if len(left) else np.empty(0, dtype=np.intp)
    filled = {g: left[labels == h] for h, g in enumerate(holders)}
    misplaced = [filled[g] for g in holders if nodes[g] >= 0]

    shares: list[Share] = []
    for g, j in enumerate(nodes):
        group = groups.get(j)
        if group:  # its first ``used[g]`` members take one more
            shares.append(
                Share(np.sort(np.concatenate([*local[g], filled.get(g, left[:0])])), group)
            )
    return shares, np.concatenate(misplaced) if misplaced else left[:0]


class Share(NamedTuple):
    """The ranks (ascending) that ``members`` (indexes) share round robin, as the
    rack-blind deal deals: member ``members[i]`` takes ``ranks[i::len(members)]``."""

    ranks: Ranks
    members: list[int]

    def dealt(self, values: NDArray[Any], names: Sequence[str]) -> Iterator[tuple[str, list[Any]]]:
        """Each member's name and its ranks' ``values``: one gather, then list slices."""
        mine, n = values[self.ranks].tolist(), len(self.members)
        cuts = map(slice, range(n), repeat(None), repeat(n))
        return zip(map(names.__getitem__, self.members), map(mine.__getitem__, cuts), strict=True)
