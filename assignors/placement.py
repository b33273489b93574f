"""Fresh placements used when there is nothing to be sticky to.

``greedy_place`` is KIP-49's fair assignor (and, with lag, the heterogeneous start of
``lagsticky``); ``deal_uniform`` is the fast path when every member can take every
partition.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from .spec import GroupSpec
from .types import Assignment, TopicPartition


def greedy_place(spec: GroupSpec, lag: Mapping[TopicPartition, int] | None = None) -> Assignment:
    """Each partition to the least-loaded eligible member, most constrained topics first.

    Topics with the fewest subscribers go first (ties: more partitions first, then name),
    so the flexible choices stay open longest. Load is the partition count; with ``lag``
    ties are broken by the member's total lag and partitions of a topic go in decreasing
    lag order, which makes it a longest-processing-time placement within count balance.
    """
    out = spec.empty_assignment()
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
        partitions = spec.partitions(topic)
        if lag:
            partitions.sort(key=lambda tp: -lag.get(tp, 0))
        for tp in partitions:
            c, weight, member = heap[0]
            weight += lag.get(tp, 0)
            heapq.heapreplace(heap, (c + 1, weight, member))
            out[member].append(tp)
            count[member] = c + 1
            total[member] = weight
    return {m: sorted(parts) for m, parts in out.items()}


def deal_uniform(
    members: list[str],
    partitions: list[TopicPartition],
    lag: Mapping[TopicPartition, int] | None = None,
) -> Assignment:
    """Deal partitions over members who can all take any of them; counts differ by <= 1.

    Without lag differences this is a plain round-robin deal (Kafka's result for identical
    subscriptions). With lag, partitions go in decreasing lag in a snake order
    (left-to-right, then right-to-left), which keeps row sums close before local search.
    """
    out: Assignment = {m: [] for m in members}
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
        return {m: sorted(parts) for m, parts in out.items()}
    for i, member in enumerate(members):
        out[member] = partitions[i::n]
    return out


def _varies(lag: Mapping[TopicPartition, int], partitions: list[TopicPartition]) -> bool:
    if not partitions:
        return False
    first = lag.get(partitions[0], 0)
    return any(lag.get(tp, 0) != first for tp in partitions)
