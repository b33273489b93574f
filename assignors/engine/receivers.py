"""Who takes a partition and who gives one.

Topics with exactly the same subscribers form a *topic group* (one group when
subscriptions are identical); each group keeps a lazy min-heap of its subscribers'
``take_key``: the receiver for a partition is the top valid entry of its topic's group.
Stale entries are skipped on read; a heap is rebuilt when stale entries outnumber live
ones. Groups are split when a subscription cuts across one, never merged. Donors come
from the top of the engine's member order, then from per-topic holder heaps."""

from __future__ import annotations

import heapq

from .member import Key, Member
from .state import EngineState

#: Donor candidates scanned from the top before falling back to per-topic holder heaps.
DONOR_SCAN = 8


class Receivers(EngineState):
    """Topic groups, their receiver heaps and the donor search."""

    def _refine(self, topics: frozenset[int]) -> None:
        """Split topic groups so that every member subscribes to all or none of each."""
        new = [t for t in sorted(topics) if t not in self._tgroup]
        if new:
            self._add_group(set(new), None)
        for g in sorted({self._tgroup[t] for t in topics}):
            inside = self._gtopics[g] & topics
            if inside != self._gtopics[g]:
                self._gtopics[g] -= inside
                self._add_group(inside, g)

    def _add_group(self, topics: set[int], parent: int | None) -> None:
        gid = len(self._gtopics)
        while gid in self._gtopics:
            gid += 1
        self._gtopics[gid] = topics
        for t in topics:
            self._tgroup[t] = gid
        if parent is not None and parent in self._gheap:
            # The split-off part has the same subscribers so far: share the heap's content.
            self._gheap[gid] = list(self._gheap[parent])
            self._glimit[gid] = self._glimit[parent]
        self._gversion += 1

    def _add_subscriber(self, topic: int, name: str) -> None:
        subs = self._subs.setdefault(topic, set())
        if not subs:
            self._orphans.update(self._topic_pids(topic))
        subs.add(name)

    def _min_subscriber(self, topic: int) -> Key | None:
        g = self._tgroup.get(topic)
        return None if g is None else self._min_in_group(g)

    def _min_in_group(self, g: int) -> Key | None:
        """The least-loaded subscriber of topic group ``g`` (all of its topics alike)."""
        heap = self._gheap.get(g)
        if heap is None:
            self._build_heaps()
            heap = self._gheap[g]
        members = self._members
        while heap:
            key = heap[0]
            m = members.get(key[2])
            if m is not None and m.take_key() == key and g in self._groups_of(m):
                return key
            heapq.heappop(heap)
        return None

    def _build_heaps(self) -> None:
        """Build every missing topic-group heap in one pass over the members: a member's
        key is made once, not once per group it belongs to."""
        heaps: dict[int, list[Key]] = {g: [] for g in self._gtopics if g not in self._gheap}
        for m in self._members.values():
            key = m.take_key()
            for g in self._groups_of(m):
                if g in heaps:
                    heaps[g].append(key)
        for g, heap in heaps.items():
            heapq.heapify(heap)
            self._gheap[g] = heap
            self._glimit[g] = 4 * len(heap) + 64

    def _groups_of(self, m: Member) -> tuple[int, ...]:
        if m.groups_version != self._gversion:
            # Members with one subscription share one answer (and usually one tids object).
            if self._groups_cache_version != self._gversion:
                self._groups_cache.clear()
                self._groups_cache_version = self._gversion
            groups = self._groups_cache.get(m.tids)
            if groups is None:
                groups = self._groups_cache[m.tids] = tuple({self._tgroup[t] for t in m.tids})
            m.groups = groups
            m.groups_version = self._gversion
        return m.groups

    def _max_holder(self, topic: int) -> Key | None:
        if self._hheap is None:
            heaps: dict[int, list[Key]] = {}
            for member in self._members.values():
                for t in member.holding():
                    key = member.key()
                    heaps.setdefault(t, []).append((-key[0], -key[1], member.name))
            for built in heaps.values():
                heapq.heapify(built)
            self._hheap = heaps
            self._hheap_size = sum(map(len, heaps.values()))
        heap = self._hheap.get(topic)
        while heap:
            c, lag, name = heap[0]
            m = self._members.get(name)
            if m is not None and m.holding().get(topic):
                give, load, _ = m.key()
                if give == -c and load == -lag:
                    return heap[0]
            heapq.heappop(heap)
        return None

    def _receiver_for(self, a: Member) -> Member | None:
        """A member ``a`` may give a partition to (2+ fewer partitions than ``a`` when no
        capacity is declared) that could take one of ``a``'s."""
        limit = a.key()[0]
        # Without capacities the least ``take`` is the least ``give`` + 2: nobody qualifies.
        if not self._donors or (not self._weighted and self._donors[0][0] + 2 >= limit):
            return None
        best: Key | None = None
        tgroup = self._tgroup
        for g in {tgroup[t] for t in a.holding()}:  # a topic group answers for its topics
            key = self._min_in_group(g)
            if key is not None and key[0] < limit and (best is None or key < best):
                best = key
        return None if best is None else self._members[best[2]]

    def _find_donor(self, b: Member, limit: float | None = None) -> Member | None:
        """The fullest member that may give ``b`` a partition (2+ more partitions than
        ``b`` when no capacity is declared) and holds one ``b`` may take; with ``limit``,
        as if ``b``'s receiver score were that.

        The fullest few members are tried first (with identical subscriptions the first
        always qualifies); past them, per-topic heaps of holders answer directly.
        """
        if limit is None:
            limit = b.take_key()[0]
        if not self._donors or self._donors[-1][0] <= limit:
            return None
        for i, (score, _lag, name) in enumerate(reversed(self._donors)):
            if score <= limit:
                return None
            a = self._members[name]
            if not b.tids.isdisjoint(a.holding()):
                return a
            if i >= DONOR_SCAN:
                break
        best: Key | None = None
        for t in b.tids:
            top = self._max_holder(t)
            if top is not None and -top[0] > limit and (best is None or top < best):
                best = top
        return None if best is None else self._members[best[2]]
