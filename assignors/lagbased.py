"""KAFKA-5337's lag-based assignor: spread each topic's lag evenly, count first."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from .placement import heaviest_first
from .spec import GroupSpec
from .types import Assignment, TopicPartition


def lag_assign(spec: GroupSpec, lag: Mapping[TopicPartition, int]) -> Assignment:
    """Per topic, partitions by decreasing lag go to the member with the fewest partitions
    of that topic, ties by least lag assigned from that topic, then member id.

    The reference implementation keeps both tallies per topic, so a member's load on
    other topics does not influence this topic's placement.
    """
    out = spec.empty_assignment()
    for topic, consumers in spec.subscribers().items():
        # The reference scans every consumer per partition; a heap of the same keys
        # (count, lag, id) gives the same choice in O(log consumers).
        heap = [(0, 0, m) for m in consumers]
        for tp in heaviest_first(spec.partitions(topic), lag):
            count, total, member = heap[0]
            out[member].append(tp)
            heapq.heapreplace(heap, (count + 1, total + lag.get(tp, 0), member))
    return {m: sorted(parts) for m, parts in out.items()}
