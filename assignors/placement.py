"""Fresh placements used when there is nothing to be sticky to.

``greedy_place`` is KIP-49's fair assignor (and, with lag, the heterogeneous start of
``lagsticky``); ``deal_uniform`` is the fast path when every member can take every
partition.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

from .spec import GroupSpec
from .types import Assignment, TopicPartition

#: A partition as the caller names it: a ``TopicPartition``, or the engine's int id.
P = TypeVar("P", bound=Hashable)


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
        partitions: Sequence[P] = partitions_of(topic)
        if lag:
            partitions = sorted(partitions, key=lambda tp: -lag.get(tp, 0))
        for tp in partitions:
            c, weight, member = heap[0]
            weight += lag.get(tp, 0)
            heapq.heapreplace(heap, (c + 1, weight, member))
            out[member].append(tp)
            count[member] = c + 1
            total[member] = weight
    return {m: sorted(parts) for m, parts in out.items()}  # type: ignore[type-var]


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
    out: dict[str, list[P]] = {m: [] for m in members}
    n = len(members)
    if n == 0:
        return out
    if lag and _varies(lag, partitions):
        ordered = sorted(partitions, key=lambda tp: -lag.get(tp, 0))
        for start in range(0, len(ordered), n):
            row = ordered[start : start + n]
            targets = members if (start // n) % 2 == 0 else members[::-1]
            for member, tp in zip(targets, row, strict=False):
                out[member].append(tp)
        return {m: sorted(parts) for m, parts in out.items()}  # type: ignore[type-var]
    for i, member in enumerate(members):
        out[member] = partitions[i::n]
    return out


def _varies(lag: Mapping[Any, int], partitions: list[Any]) -> bool:
    if not partitions:
        return False
    first = lag.get(partitions[0], 0)
    return any(lag.get(tp, 0) != first for tp in partitions)


def keep_uniform(
    members: Sequence[str], kept: Mapping[str, list[int]], unowned: list[int]
) -> dict[str, list[int]]:
    """Balance with the least movement when every member can take every partition.

    The ``total % n`` larger quotas go to the members holding most (ties: name), each
    member over its quota gives up its highest partitions, and the freed and unowned
    partitions, lowest first, each go to the member under quota that holds fewest (ties:
    name), as KIP-54 places them. Only the members whose holding changes are returned,
    with their new partitions ascending. Movement equals
    ``quality.minimal_movement_uniform``.
    """
    n = len(members)
    if n == 0:
        return {}
    q, r = divmod(sum(map(len, kept.values())) + len(unowned), n)
    quota = dict.fromkeys(members, q)
    if r:
        larger = sorted(members, key=lambda m: (-len(kept.get(m, ())), m))[:r]
        quota.update(dict.fromkeys(larger, q + 1))
    pool = list(unowned)
    changed: dict[str, list[int]] = {}
    for m, parts in kept.items():
        extra = len(parts) - quota[m]
        if extra > 0:
            pool.extend(parts[-extra:])
            changed[m] = parts[:-extra]
    pool.sort()
    short = [
        (len(mine), m) for m in members if len(mine := changed.get(m, kept.get(m, []))) < quota[m]
    ]
    heapq.heapify(short)
    gained: dict[str, list[int]] = {}
    for pid in pool:
        count, m = short[0]
        gained.setdefault(m, []).append(pid)
        if count + 1 < quota[m]:
            heapq.heapreplace(short, (count + 1, m))
        else:
            heapq.heappop(short)
    for m, new in gained.items():
        changed[m] = sorted(changed.get(m, kept.get(m, [])) + new)
    return changed
