"""Kafka's RangeAssignor and RoundRobinAssignor, result for result."""

from __future__ import annotations

from .spec import GroupSpec
from .types import Assignment


def range_assign(spec: GroupSpec) -> Assignment:
    """Per topic, sorted subscribers take contiguous ranges; the first ``P % C`` take one more.
    Topics go in name order, so every member's list comes out sorted."""
    out = spec.empty_assignment()
    for topic, consumers in spec.subscribers().items():
        partitions = spec.partitions(topic)
        per, extra = divmod(len(partitions), len(consumers))
        for i, member in enumerate(consumers):
            start = per * i + min(i, extra)
            out[member].extend(partitions[start : start + per + (1 if i < extra else 0)])
    return out


def roundrobin_assign(spec: GroupSpec) -> Assignment:
    """All partitions by (topic, partition), dealt circularly over sorted members.

    Like Kafka's ``CircularIterator``, the cursor skips members not subscribed to the
    partition's topic, then advances past the member that took it.
    """
    out = spec.empty_assignment()
    members = spec.members
    if not members:
        return out
    cursor = 0
    for topic in spec.topics:
        for tp in spec.partitions(topic):
            while topic not in spec.topics_of[members[cursor]]:
                cursor = (cursor + 1) % len(members)
            out[members[cursor]].append(tp)
            cursor = (cursor + 1) % len(members)
    return out
