"""Kafka's rack-aware ``RangeAssignor`` (KIP-881), result for result.

Per topic the quotas are range's own (``P // C`` each, the first ``P % C`` one more),
so balance and co-partitioning are never traded for locality. Before plain ranges are
laid out, a first pass hands each member, in member order, the lowest-numbered
partitions with a replica on its rack, up to its quota. Topics with the same
subscribers and the same partition count are *co-partitioned*: partition ``p`` of all
of them goes to one member, the first whose rack holds a replica of every one. A member
without a rack matches everything, as in Kafka.

Each pass takes partitions in ascending order, so a cursor per rack (and one for all)
skips what is taken once: O(partitions x replication) per topic instead of Kafka's
O(partitions x members).
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from .partition_lists import topic_partitions
from .racks import Racks, use_rack_aware
from .spec import GroupSpec
from .types import Assignment


class _Topic:
    """One topic's range state: quotas, what is taken, and which replicas are where."""

    def __init__(self, topic: str, count: int, members: list[str], racks: Racks) -> None:
        self.topic = topic
        self.members = members
        self.rack = {m: racks.member.get(m) for m in members}
        self.per, self.extra = divmod(count, len(members))
        self.held = dict.fromkeys(members, 0)
        self.parts = topic_partitions(topic, count)
        self.taken = [False] * count
        self.cursor = 0
        member_racks = {r for r in self.rack.values() if r is not None}
        # Kafka reads replica racks only when a subscriber of the topic has a rack.
        self.replicas = [racks.replicas(tp) for tp in self.parts] if member_racks else []
        on_racks = set().union(*self.replicas) if self.replicas else set()
        self.needs = use_rack_aware(member_racks, on_racks, self.replicas)
        by_rack: dict[str, list[int]] = defaultdict(list)
        for p, replicas in enumerate(self.replicas):
            for r in replicas:
                by_rack[r].append(p)
        self.by_rack = dict(by_rack)
        self.rack_cursor = dict.fromkeys(by_rack, 0)

    def room(self, member: str) -> int:
        return max(0, self.per + (1 if self.extra > 0 else 0) - self.held[member])

    def matches(self, member: str, p: int) -> bool:
        rack = self.rack[member]
        return rack is None or rack in self.replicas[p]

    def take(self, member: str, p: int, out: Assignment) -> None:
        self._take_all(member, [p], out)

    def take_first(self, member: str, n: int, out: Assignment) -> None:
        """The ``n`` lowest untaken partitions (or as many as remain)."""
        taken = self.taken
        p, end = self.cursor, len(taken)
        got: list[int] = []
        while p < end and len(got) < n:
            if not taken[p]:
                got.append(p)
            p += 1
        while p < end and taken[p]:
            p += 1
        self.cursor = p
        self._take_all(member, got, out)

    def take_on_rack(self, member: str, rack: str, n: int, out: Assignment) -> None:
        """The ``n`` lowest untaken partitions with a replica on ``rack``."""
        order = self.by_rack.get(rack, [])
        taken = self.taken
        i, end = self.rack_cursor.get(rack, 0), len(order)
        got: list[int] = []
        while i < end and len(got) < n:
            if not taken[order[i]]:
                got.append(order[i])
            i += 1
        if order:
            self.rack_cursor[rack] = i
        self._take_all(member, got, out)

    def _take_all(self, member: str, got: list[int], out: Assignment) -> None:
        # Kafka counts a batch at once: a member uses up an extra slot once.
        if not got:
            return
        for p in got:
            self.taken[p] = True
            out[member].append(self.parts[p])
        before = self.held[member]
        self.held[member] = before + len(got)
        if before + len(got) > self.per:
            self.extra -= 1

    def ranges(self, out: Assignment, *, rack_only: bool) -> None:
        """Kafka's ``assignRanges``: members in order, each up to its room."""
        for member in self.members:
            if self.cursor >= len(self.taken):
                return
            room = self.room(member)
            if room == 0:
                continue
            rack = self.rack[member]
            if rack_only and rack is not None:
                self.take_on_rack(member, rack, room, out)
            else:
                self.take_first(member, room, out)


def rack_range_assign(spec: GroupSpec, racks: Racks) -> Assignment:
    out = spec.empty_assignment()
    subscribers = spec.subscribers()
    states = [
        _Topic(t, spec.partitions_per_topic[t], subscribers[t], racks)
        for t in spec.topics
        if subscribers[t]
    ]
    if any(s.needs for s in states):
        groups: dict[tuple[tuple[str, str | None], ...], dict[int, list[_Topic]]] = {}
        for s in states:
            # Kafka keys by the size of the replica-rack map: 0 when no subscriber has a
            # rack, so such topics are never co-partitioned by rack.
            count = len(s.parts) if s.replicas else 0
            groups.setdefault(tuple(s.rack.items()), {}).setdefault(count, []).append(s)
        for by_count in groups.values():
            for count, same in by_count.items():
                if len(same) > 1:
                    _co_partitioned(same, count, out)
                elif same[0].needs:
                    same[0].ranges(out, rack_only=True)
    for s in states:
        s.ranges(out, rack_only=False)
    return {m: sorted(parts) for m, parts in out.items()}


def _co_partitioned(states: list[_Topic], count: int, out: Assignment) -> None:
    """Partition ``p`` of every topic to the first member (in order) whose rack holds a
    replica of each and who has room in each; a member with no room anywhere drops out."""
    first = states[0]
    order = {m: i for i, m in enumerate(first.members)}
    rackless: list[int] = []
    on_rack: dict[str, list[int]] = defaultdict(list)
    for m, i in order.items():
        rack = first.rack[m]
        (rackless if rack is None else on_rack[rack]).append(i)  # already in order: heaps
    remaining = len(order)
    dropped: set[int] = set()

    def usable(i: int) -> bool:
        member = first.members[i]
        return all(s.room(member) > 0 for s in states)

    for p in range(count):
        common: set[str] | None = None
        for s in states:
            replicas = s.replicas[p] if s.replicas else frozenset()
            common = set(replicas) if common is None else common & replicas
        best: int | None = None
        for heap in (rackless, *(on_rack[r] for r in sorted(common or ()) if r in on_rack)):
            # Room only shrinks, so a member without room for p never has room again.
            while heap and not usable(heap[0]):
                heapq.heappop(heap)
            if heap and (best is None or heap[0] < best):
                best = heap[0]
        if best is None:
            continue
        member = first.members[best]
        for s in states:
            s.take(member, p, out)
        if best not in dropped and all(s.room(member) == 0 for s in states):
            dropped.add(best)
            remaining -= 1
            if remaining == 0:
                return
