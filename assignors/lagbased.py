"""KAFKA-5337's lag-based assignor: spread each topic's lag evenly, count first."""

from __future__ import annotations

from collections.abc import Mapping

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
        count = dict.fromkeys(consumers, 0)
        total = dict.fromkeys(consumers, 0)
        partitions = sorted(spec.partitions(topic), key=lambda tp: (-lag.get(tp, 0), tp.partition))
        for tp in partitions:
            member = min(consumers, key=lambda m: (count[m], total[m], m))
            out[member].append(tp)
            count[member] += 1
            total[member] += lag.get(tp, 0)
    return {m: sorted(parts) for m, parts in out.items()}
