"""Member counts chosen for rack locality, on a fresh placement with mixed subscriptions.

With mixed subscriptions KIP-54 balance allows many count vectors, and which one a
placement uses decides how many partitions can sit on their racks: a member without a
rack may take a topic's partitions that racked members would hold off their racks, if
two racked members each hold one fewer. Swaps, single moves and chains of moves
(``engine/rack_chains.py``) change at most two members' counts; some groups need several
changed at once.

Here a count vector is judged exactly: with counts fixed, balance is a matter of which
topics a member may hold (a member holding ``c`` may hold topic ``t`` iff every
subscriber of ``t`` holds at least ``c - 1``), and the fewest partitions off their racks
is a transportation problem from partition *classes* (topic, replica racks) to member
*nodes* (topics, rack, count), solved by a min-cost flow. The search judges the counts
the members hold (their best placement is often most of the gain), then walks count
vectors one trade (one member gives a count, another takes it) at a time, over trades
that keep the cost (a plateau, breadth first) until one lowers it, within a budget of
work. Pure: partitions and topics are integers, racks strings.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

#: Work (arcs built and looked at by the flows) of one placement's search: a small
#: group's plateau is searched through within it, in a few milliseconds; a larger
#: group's best placement for its own counts is judged whatever it costs, then as many
#: trades as the rest allows.
MAX_WORK = 15_000
#: A flow this large (partition classes x member nodes, a node per kind of member and
#: count) is not judged at all: a group with hundreds of subscription sets keeps what
#: the chains found.
MAX_ARCS = 3_000

#: A partition class: its topic and its replicas' racks (empty when none are known).
PartClass = tuple[int, frozenset[str]]
#: A member kind: its topics and its rack.
Kind = tuple[frozenset[int], str | None]
#: How many members of each kind hold each count: a multiset per kind, sorted.
State = tuple[tuple[int, ...], ...]


class Group(NamedTuple):
    """What the search reads: partitions by class, members by kind."""

    classes: dict[PartClass, list[int]]
    kinds: list[Kind]
    #: Each kind's members, and what each holds now.
    members: list[list[str]]
    held: Mapping[str, Sequence[int]]


def off_rack(kind: Kind, layout: frozenset[str]) -> int:
    """Kafka's count: a member without a rack is never off one."""
    rack = kind[1]
    return int(rack is not None and rack not in layout)


def retarget(group: Group, max_work: int = MAX_WORK) -> dict[int, str] | None:
    """Moves (partition to its new member) to counts whose best placement leaves fewer
    partitions off their racks than the members' holdings do now; none when no such
    counts were found within the budget; None when the flow is too large to judge."""
    judge = _Judge(group)
    start: State = tuple(
        tuple(sorted(len(group.held[n]) for n in names)) for names in group.members
    )
    if len(judge.classes) * len(_nodes(start)) > MAX_ARCS:
        return None
    now, bound = _cost_now(group), judge.lower_bound()
    if now <= bound:
        return {}
    best = _search(judge, start, now, bound, max_work)
    if best is None:
        return {}
    state, flows = best
    return _deal(group, judge.classes, state, flows)


def _cost_now(group: Group) -> int:
    layout = {p: c[1] for c, ps in group.classes.items() for p in ps}
    return sum(
        off_rack(kind, layout[p])
        for kind, names in zip(group.kinds, group.members, strict=True)
        for name in names
        for p in group.held[name]
    )


#: A count vector and the flow (class, node) -> partitions that places best with it.
Judged = tuple[State, dict[tuple[int, int], int]]


class _Judge:
    """Count vectors judged by their best placement; ``spent`` counts the flows' work."""

    def __init__(self, group: Group) -> None:
        self.kinds = group.kinds
        self.classes = list(group.classes)
        self.supply = [len(group.classes[c]) for c in self.classes]
        self.spent = 0

    def lower_bound(self) -> int:
        """Partitions no subscriber can hold on their racks, whatever the counts."""
        return sum(
            n
            for (t, layout), n in zip(self.classes, self.supply, strict=True)
            if not any(t in k[0] and not off_rack(k, layout) for k in self.kinds)
        )

    def __call__(
        self, state: State, ceiling: int | None = None
    ) -> tuple[int, dict[tuple[int, int], int]] | None:
        """The fewest partitions off their racks with these counts (KIP-54 balance read
        as which topics each count may hold), and the flow that has it; None when no
        placement has these counts, or (a bound read off the arcs shows it) none has
        ``ceiling`` or fewer off their racks."""
        kinds, supply = self.kinds, self.supply
        nodes = _nodes(state)
        demand = [c * state[k].count(c) for k, c in nodes]
        least: dict[int, int] = {}
        for k, c in nodes:
            for t in kinds[k][0]:
                least[t] = min(least.get(t, c), c)
        arcs: list[tuple[int, int, int]] = []
        local_in, local_out = [0] * len(nodes), [0] * len(supply)
        for i, (t, layout) in enumerate(self.classes):
            for j, (k, c) in enumerate(nodes):
                if t in kinds[k][0] and c <= least[t] + 1 and demand[j]:
                    off = off_rack(kinds[k], layout)
                    arcs.append((i, j, off))
                    if not off:
                        local_in[j] += supply[i]
                        local_out[i] += demand[j]
        self.spent += len(arcs) + len(nodes)
        if ceiling is not None:
            total = sum(supply)
            into = total - sum(map(min, demand, local_in))
            out_of = total - sum(map(min, supply, local_out))
            if max(into, out_of) > ceiling:
                return None
        solved = _min_cost_flow(supply, demand, arcs)
        if solved is None:
            return None
        cost, flows, work = solved
        self.spent += work
        return cost, flows


def _nodes(state: State) -> list[tuple[int, int]]:
    """A flow's member nodes: (kind, count) for each count some member of a kind holds."""
    return sorted({(k, c) for k, counts in enumerate(state) for c in counts})


def _search(judge: _Judge, start: State, now: int, bound: int, work: int) -> Judged | None:
    """Breadth first over trades that keep the cost, restarted from each that lowers it,
    until the cost reaches ``bound`` or the work is spent."""
    best: Judged | None = None
    cost = now
    judged = judge(start)
    if judged is not None and judged[0] < now:  # the holdings are not the best for them
        best, cost = (start, judged[1]), judged[0]
        if cost <= bound:
            return best
    frontier: deque[State] = deque([start])
    seen = {start}
    while frontier and judge.spent < work:
        for nxt in _trades(frontier.popleft()):
            if nxt in seen:
                continue
            seen.add(nxt)
            judged = judge(nxt, cost)
            if judged is not None and judged[0] < cost:
                best, cost = (nxt, judged[1]), judged[0]
                if cost <= bound:
                    return best
                frontier, seen = deque([nxt]), {nxt}
                break
            if judged is not None and judged[0] == cost:
                frontier.append(nxt)
            if judge.spent >= work:
                break
    return best


def _trades(state: State) -> Iterator[State]:
    """Each count vector one member's count away from ``state``, given to another."""
    for a, counts_a in enumerate(state):
        for ca in sorted(set(counts_a)):
            if ca == 0:
                continue
            for b, counts_b in enumerate(state):
                for cb in sorted(set(counts_b)):
                    if a == b and (cb == ca - 1 or (cb == ca and counts_a.count(ca) < 2)):
                        continue  # the same multiset, or one member giving to itself
                    nxt = list(state)
                    nxt[a] = _swap_one(nxt[a], ca, ca - 1)
                    nxt[b] = _swap_one(nxt[b], cb, cb + 1)
                    yield tuple(nxt)


def _swap_one(counts: tuple[int, ...], old: int, new: int) -> tuple[int, ...]:
    out = list(counts)
    out.remove(old)
    out.append(new)
    return tuple(sorted(out))


class _Flow:
    """A min-cost flow from classes to nodes by the primal-dual method: shortest
    distances (Bellman-Ford queue: reverse arcs cost -1), then a blocking flow (Dinic)
    over the arcs those distances make tight, until every class's supply is sent. Costs
    are 0 or 1, so there are a few distance rounds, not one per augmenting path.
    ``work`` counts the arcs looked at."""

    def __init__(self, supply: list[int], demand: list[int]) -> None:
        n_c, n_n = len(supply), len(demand)
        self.source, self.sink = n_c + n_n, n_c + n_n + 1
        self.size = n_c + n_n + 2
        self.total = sum(supply)
        # Edges as parallel lists; edge e's reverse is e ^ 1.
        self.to: list[int] = []
        self.cap: list[int] = []
        self.cost: list[int] = []
        self.out: list[list[int]] = [[] for _ in range(self.size)]
        self.work = 0
        for i, n in enumerate(supply):
            self.edge(self.source, i, n, 0)
        for j, n in enumerate(demand):
            self.edge(n_c + j, self.sink, n, 0)

    def edge(self, a: int, b: int, capacity: int, cost: int) -> int:
        for frm, dst, c, k in ((a, b, capacity, cost), (b, a, 0, -cost)):
            self.out[frm].append(len(self.to))
            self.to.append(dst)
            self.cap.append(c)
            self.cost.append(k)
        return len(self.to) - 2

    def run(self) -> int | None:
        """The least cost of sending everything, or None when it cannot all be sent."""
        sent = spent = 0
        while sent < self.total:
            dist = self._distances()
            if dist[self.sink] > self.size:
                return None
            while sent < self.total and (level := self._levels(dist))[self.sink] >= 0:
                at = [0] * self.size
                while pushed := self._augment(dist, level, at):
                    sent += pushed
                    spent += pushed * dist[self.sink]
        return spent

    def _distances(self) -> list[int]:
        to, cap, cost, out = self.to, self.cap, self.cost, self.out
        far = self.size + 1
        dist = [far] * self.size
        dist[self.source] = 0
        queue, queued = deque([self.source]), [False] * self.size
        while queue:
            u = queue.popleft()
            queued[u] = False
            self.work += len(out[u])
            for e in out[u]:
                v = to[e]
                if cap[e] and dist[u] + cost[e] < dist[v]:
                    dist[v] = dist[u] + cost[e]
                    if not queued[v]:
                        queued[v] = True
                        queue.append(v)
        return dist

    def _levels(self, dist: list[int]) -> list[int]:
        """Hops from the source over tight arcs with room (-1: not reached)."""
        to, cap, cost, out = self.to, self.cap, self.cost, self.out
        level = [-1] * self.size
        level[self.source] = 0
        queue = deque([self.source])
        while queue:
            u = queue.popleft()
            self.work += len(out[u])
            du, lu = dist[u], level[u] + 1
            for e in out[u]:
                v = to[e]
                if level[v] < 0 and cap[e] and dist[v] == du + cost[e]:
                    level[v] = lu
                    queue.append(v)
        return level

    def _augment(self, dist: list[int], level: list[int], at: list[int]) -> int:
        """One augmenting path of the level graph (``at``: each node's next arc to try),
        its bottleneck sent; 0 when the level graph is blocked."""
        to, cap, cost, out = self.to, self.cap, self.cost, self.out
        stack: list[int] = [self.source]
        path: list[int] = []
        while stack:
            u = stack[-1]
            if u == self.sink:
                push = min(cap[e] for e in path)
                for e in path:
                    cap[e] -= push
                    cap[e ^ 1] += push
                return push
            arcs, i, du, lu = out[u], at[u], dist[u], level[u] + 1
            while i < len(arcs):
                e = arcs[i]
                v = to[e]
                if level[v] == lu and cap[e] and dist[v] == du + cost[e]:
                    stack.append(v)
                    path.append(e)
                    break
                i += 1
            self.work += i - at[u] + 1
            at[u] = i
            if i == len(arcs):  # a dead end: the arc into it is not tried again this round
                stack.pop()
                if path:
                    at[to[path.pop() ^ 1]] += 1
        return 0


def _min_cost_flow(
    supply: list[int], demand: list[int], arcs: list[tuple[int, int, int]]
) -> tuple[int, dict[tuple[int, int], int], int] | None:
    """Every class's supply sent and every node's demand met at the least cost: the
    cost, the flow on each (class, node) arc, and the work it took; None when no flow
    meets them."""
    if sum(supply) != sum(demand):
        return None
    flow = _Flow(supply, demand)
    n_c = len(supply)
    arc_edges = [(i, j, flow.edge(i, n_c + j, flow.total, c)) for i, j, c in arcs]
    cost = flow.run()
    if cost is None:
        return None
    sent = {(i, j): flow.cap[e ^ 1] for i, j, e in arc_edges if flow.cap[e ^ 1]}
    return cost, sent, flow.work


def _deal(
    group: Group, classes: list[PartClass], state: State, flows: dict[tuple[int, int], int]
) -> dict[int, str]:
    """Partitions to members so that each holds its node's count and each node what the
    flow sends it; members keep what they hold where the flow allows."""
    nodes = _nodes(state)
    quota: dict[int, Counter[int]] = defaultdict(Counter)  # node -> class -> partitions
    for (i, j), n in flows.items():
        quota[j][i] = n
    where = {p: i for i, c in enumerate(classes) for p in group.classes[c]}
    pool: dict[int, list[int]] = defaultdict(list)  # class -> partitions given up
    wants: list[tuple[str, int, int]] = []  # (member, class, how many)
    for k, names in enumerate(group.members):
        # Members who held the most take the largest counts: fewest moves.
        by_load = sorted(names, key=lambda n: (-len(group.held[n]), n))
        for name, count in zip(by_load, sorted(state[k], reverse=True), strict=True):
            left = quota[nodes.index((k, count))]
            need = count
            for p in group.held[name]:
                i = where[p]
                if need and left[i]:
                    left[i] -= 1
                    need -= 1
                else:
                    pool[i].append(p)
            for i in sorted(left):  # a node's quota sums to its members' counts
                take = min(need, left[i])
                if take:
                    left[i] -= take
                    need -= take
                    wants.append((name, i, take))
    return {pool[i].pop(): name for name, i, n in wants for _ in range(n)}


def by_class(
    pids: Sequence[int], topic_of: Callable[[int], int], layout_of: Callable[[int], frozenset[str]]
) -> dict[PartClass, list[int]]:
    classes: dict[PartClass, list[int]] = defaultdict(list)
    for p in pids:
        classes[(topic_of(p), layout_of(p))].append(p)
    return dict(classes)
