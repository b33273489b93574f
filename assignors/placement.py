"""Fresh placements used when there is nothing to be sticky to.

``greedy_place`` is KIP-49's fair assignor (and, with lag, the heterogeneous start of
``lagsticky``); ``deal_uniform`` is the fast path when every member can take every
partition; ``level_place`` is that greedy start brought to KIP-54 balance, in array passes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from itertools import chain, repeat
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from .ids import Claims, runs
from .spec import GroupSpec
from .types import Assignment, TopicPartition

#: A partition as the caller names it: a ``TopicPartition``, or the engine's int id.
P = TypeVar("P", TopicPartition, int)
T = TypeVar("T")


def greedy_place(spec: GroupSpec, lag: Mapping[TopicPartition, int] | None = None) -> Assignment:
    """KIP-49's fair assignment of ``spec``'s partitions (see ``greedy_place_of``)."""
    return greedy_place_of(spec, spec.partitions, lag)


def greedy_place_of(
    spec: GroupSpec,
    partitions_of: Callable[[str], Sequence[P]],
    lag: Mapping[P, int] | None = None,
) -> dict[str, list[P]]:
    """Each partition to the least-loaded eligible member, most constrained topics first.

    Topics with the fewest subscribers go first (ties: more partitions first, then name),
    so the flexible choices stay open longest. Load is the partition count; with ``lag``
    ties are broken by the member's total lag and partitions of a topic go in decreasing
    lag order, which makes it a longest-processing-time placement within count balance.
    """
    out: dict[str, list[P]] = {m: [] for m in spec.members}
    count = dict.fromkeys(spec.members, 0)
    total = dict.fromkeys(spec.members, 0)
    lag = lag or {}
    subscribers = spec.subscribers()
    order = sorted(
        spec.topics,
        key=lambda t: (len(subscribers[t]), -spec.partitions_per_topic[t], t),
    )
    for topic in order:
        heap = [(count[m], total[m], m) for m in subscribers[topic]]
        heapq.heapify(heap)
        for tp in heaviest_first(partitions_of(topic), lag):
            c, weight, member = heap[0]
            weight += lag.get(tp, 0)
            heapq.heapreplace(heap, (c + 1, weight, member))
            out[member].append(tp)
            count[member] = c + 1
            total[member] = weight
    return {m: sorted(parts) for m, parts in out.items()}


def subscriber_indexes(spec: GroupSpec) -> list[NDArray[np.int64]]:
    """Per topic of ``spec.topics`` (in its order), the indexes in ``spec.members`` of its
    subscribers, ascending: every subscription in a few C-level passes and one sort."""
    column = {t: i for i, t in enumerate(spec.topics)}
    chosen = list(map(spec.topics_of.__getitem__, spec.members))
    lengths = np.fromiter(map(len, chosen), np.int64, len(chosen))
    flat = chain.from_iterable(chosen)
    topic = np.fromiter(map(column.get, flat, repeat(-1)), np.int64, int(lengths.sum()))
    member = np.repeat(np.arange(len(chosen), dtype=np.int64), lengths)
    known = topic >= 0  # topics without partitions have no column
    topic, member = topic[known], member[known]
    order = np.argsort(topic, kind="stable")  # members stay ascending within a topic
    ends = np.cumsum(np.bincount(topic, minlength=len(column)))
    return np.split(member[order], ends[:-1])


def level_place(
    subscribers: Sequence[NDArray[np.int64]],
    offsets: NDArray[np.int64],
    members: int,
    kept: NDArray[np.int64] | None = None,
    max_sweeps: int = 64,
) -> tuple[NDArray[np.int64], bool]:
    """KIP-49's greedy placement brought to balance as KIP-54 defines it (no member holds
    a partition that a subscriber of its topic with two fewer partitions could take), in
    array passes.

    Returns the member index of every partition, topic after topic (topic ``t`` at
    ``offsets[t] .. offsets[t+1] - 1``; ``subscribers[t]`` its subscribers, ascending), and
    whether it is balanced. ``kept``, in the same layout, is a sticky start: the member
    keeping each partition, or -1. The first sweep is ``greedy_place`` without lag,
    exactly, over what nobody keeps: topics most constrained first, each one's partitions
    in order to the least loaded subscriber (ties: lowest index), which is a
    water-filling of them onto the loads so far (the least loaded rise to a common level
    L, the lowest indexes to L + 1).
    Then only topics whose rule is broken are refilled onto their subscribers' loads from
    the other topics (those already holding more keep the L + 1 places) and re-dealt with
    the least movement; after that every holder of the topic has at most one partition
    more than any subscriber of it. A refill that changes anything lowers the sum of
    squared loads, so the sweeps end; ``max_sweeps`` is only a guard.

    A hundred topics over ten thousand members take a few passes per topic, where
    repairing the greedy start partition by partition took a second.
    """
    owner = np.full(int(offsets[-1]), -1, dtype=np.int64) if kept is None else kept.copy()
    load = np.bincount(owner[owner >= 0], minlength=members)
    order = sorted(
        (t for t, subs in enumerate(subscribers) if len(subs) and offsets[t + 1] > offsets[t]),
        key=lambda t: (len(subscribers[t]), offsets[t] - offsets[t + 1], t),
    )
    for t in order:
        subs, loads = subscribers[t], load[subscribers[t]]
        mine = owner[offsets[t] : offsets[t + 1]]
        free = np.flatnonzero(mine < 0)
        if not len(free):
            continue
        filled = _water_fill(loads, np.zeros_like(loads), len(free))
        # Partition k goes where greedy's k-th pick lands: slots by (load then, index).
        taker = np.repeat(subs, filled)
        first = np.repeat(np.cumsum(filled) - filled, filled)
        level = np.repeat(loads, filled) + np.arange(len(taker)) - first
        mine[free] = taker[np.lexsort((taker, level))]
        load[subs] += filled
    for _ in range(max_sweeps):
        changed = False
        for t in order:
            subs, mine = subscribers[t], owner[offsets[t] : offsets[t + 1]]
            # Counts per subscriber in O(partitions of the topic), not O(members).
            held = np.bincount(np.searchsorted(subs, mine), minlength=len(subs))
            loads = load[subs]
            if loads[held > 0].max() <= loads.min() + 1:
                continue
            filled = _water_fill(loads - held, held, len(mine))
            _redeal(mine, subs, held, filled)
            load[subs] += filled - held
            changed = True
        if not changed:
            return owner, True
    return owner, False


def grouped(owner: NDArray[np.int64], members: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """``owner``'s places grouped by member (ascending within each), and each member's end
    in that order."""
    order = np.argsort(sort_key(owner, members), kind="stable")
    return order, np.cumsum(np.bincount(owner, minlength=members))


def sort_key(values: NDArray[np.int64], bound: int) -> NDArray[np.signedinteger[Any]]:
    """``values`` (all below ``bound``) in 16 bits when they fit: numpy sorts those
    stably by radix in linear time, where 64-bit keys take a merge sort."""
    return values.astype(np.int16) if bound < 1 << 15 else values


def _water_fill(
    others: NDArray[np.int64], before: NDArray[np.int64], size: int
) -> NDArray[np.int64]:
    """``size`` units over members loaded ``others``: raise the least loaded to a level
    L, then L + 1 for the remainder, those holding more ``before`` first (then lowest
    index), so that an already level filling is kept as it is."""
    ranked = np.sort(others)
    prefix = np.cumsum(ranked)
    need = np.arange(1, len(ranked) + 1) * ranked - prefix  # lift the k lowest to ranked[k-1]
    k = int(np.searchsorted(need, size, side="right"))
    level = (size + int(prefix[k - 1])) // k
    filled = np.maximum(level - others, 0)
    spare = size - int(filled.sum())
    if spare:
        at_level = np.flatnonzero(others <= level)
        keeps = before[at_level] > filled[at_level]
        filled[np.concatenate((at_level[keeps], at_level[~keeps]))[:spare]] += 1
    return filled


def _redeal(
    owner: NDArray[np.int64],
    subs: NDArray[np.int64],
    before: NDArray[np.int64],
    after: NDArray[np.int64],
) -> None:
    """One topic's ``owner`` (a view) from counts ``before`` to ``after`` with the least
    movement: members losing give up their highest partitions, and those gaining take
    them lowest first, in member order."""
    grouped = np.argsort(owner, kind="stable")
    held_by = owner[grouped]
    rank = np.arange(len(owner)) - np.searchsorted(held_by, held_by, side="left")
    freed = np.sort(grouped[rank >= after[np.searchsorted(subs, held_by)]])
    owner[freed] = np.repeat(subs, np.maximum(after - before, 0))


def deal_uniform(
    members: list[str],
    partitions: list[P],
    lag: Mapping[P, int] | None = None,
) -> dict[str, list[P]]:
    """Deal partitions over members who can all take any of them; counts differ by <= 1.

    Without lag differences this is a plain round-robin deal (Kafka's result for identical
    subscriptions). With lag, partitions go in decreasing lag in a snake order
    (left-to-right, then right-to-left), which keeps row sums close before local search.
    """
    n = len(members)
    if n == 0:
        return {}
    order = heaviest_first_order(list(map(lag.get, partitions, repeat(0)))) if lag else None
    if order is None:
        return {m: partitions[i::n] for i, m in enumerate(members)}
    dealt = snake(list(map(partitions.__getitem__, order)), n)
    return {m: sorted(parts) for m, parts in zip(members, dealt, strict=True)}


def heaviest_first(partitions: Sequence[P], lag: Mapping[P, int] | None) -> Sequence[P]:
    """``partitions`` by decreasing lag, ties in their order (as given without lag)."""
    if lag:
        heavy = heaviest_first_order(list(map(lag.get, partitions, repeat(0))))
        if heavy is not None:
            return list(map(partitions.__getitem__, heavy))
    return partitions


def heaviest_first_order(weights: list[int]) -> list[int] | None:
    """Indexes of ``weights`` by decreasing weight, ties in index order; ``None`` when all
    weights are equal (there is nothing to order)."""
    order = heaviest_first_array(weight_array(weights))
    return None if order is None else order.tolist()


def heaviest_first_array(weights: NDArray[Any]) -> NDArray[np.intp] | None:
    """``heaviest_first_order`` on an array: NumPy's stable sort, about four times faster
    than Python's at a million partitions."""
    if len(weights) == 0 or weights.min() == weights.max():
        return None
    return np.argsort(-weights, kind="stable")


def weight_array(weights: list[int]) -> NDArray[Any]:
    """Lags as int64 when they fit (with room to negate), else as Python ints."""
    return np.asarray(weights, dtype=np.int64 if max(weights, default=0) < 2**62 else object)


def snake(ordered: list[T], n: int) -> list[list[T]]:
    """``ordered`` dealt over ``n`` members in rows, left to right then right to left."""
    return [ordered[a] + ordered[b] for a, b in map(snake_places, range(n), repeat(n))]


def snake_places(i: int, n: int) -> tuple[slice, slice]:
    """Where member ``i`` of ``n`` takes from a snake deal: places ``i`` and ``2n-1-i`` of
    every ``2n``."""
    return slice(i, None, 2 * n), slice(2 * n - 1 - i, None, 2 * n)


def keep_uniform(
    members: Sequence[str], claims: Claims, unowned: NDArray[np.int64]
) -> dict[str, list[int]]:
    """Balance with the least movement when every member can take every partition.

    The ``total % n`` larger quotas go to the members holding most (ties: name), each
    member over its quota gives up its highest partitions, and the freed and unowned
    partitions, lowest first, each go to the member under quota that holds fewest (ties:
    name), as KIP-54 places them. Only the members whose holding changes are returned,
    with their new partitions ascending. Movement equals
    ``quality.minimal_movement_uniform``.

    All in array passes: a member under quota taking partitions one by one, fewest first,
    fills the slots *(its count, …, its quota - 1)*, so the pool sorted ascending meets the
    slots of every such member sorted by (level, name). The cost is a few passes over the
    claims and Python work only for the members that change.
    """
    n = len(members)
    if n == 0:
        return {}
    k = len(claims)
    if k == n:  # claimants are a sorted subset of members: here all of them
        at = np.arange(n, dtype=np.intp)
    else:
        position = dict(zip(members, range(n), strict=True))
        at = np.fromiter(map(position.__getitem__, claims.members), np.intp, k)
    held = np.diff(claims.ends, prepend=0)
    counts = np.zeros(n, dtype=np.int64)
    counts[at] = held
    q, r = divmod(int(counts.sum()) + len(unowned), n)
    quota = np.full(n, q, dtype=np.int64)
    if r:
        quota[np.argsort(-counts, kind="stable")[:r]] += 1
    extra = np.maximum(held - quota[at], 0)
    owner = np.repeat(np.arange(k, dtype=np.intp), held)
    from_end = claims.ends[owner] - np.arange(len(claims.pids))
    freed = from_end <= extra[owner]
    pool = np.sort(np.concatenate((unowned, claims.pids[freed])))
    deficit = np.maximum(quota - counts, 0)
    short = np.flatnonzero(deficit)
    need = deficit[short]
    slot_member = np.repeat(short, need)
    slot_level = (
        np.repeat(counts[short], need)
        + np.arange(len(slot_member))
        - np.repeat(np.cumsum(need) - need, need)
    )
    receiver = slot_member[np.lexsort((slot_member, slot_level))]
    changes = np.zeros(n, dtype=bool)
    changes[short] = True
    changes[at[extra > 0]] = True
    stays = ~freed & changes[at[owner]]
    holder = np.concatenate((at[owner[stays]], receiver))
    pids = np.concatenate((claims.pids[stays], pool))
    order = np.lexsort((pids, holder))
    changed = np.flatnonzero(changes)
    ends = np.searchsorted(holder[order], changed, side="right")
    chunks = runs(pids[order], ends)
    return dict(zip(map(members.__getitem__, changed.tolist()), chunks, strict=True))
