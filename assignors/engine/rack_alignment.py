"""Rack alignment: count-neutral swaps that bring partitions onto a rack holding one of
their replicas, and the count of those still off their racks (Kafka's count)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..ids import topic_of
from ..rack_index import Misplaced
from ..racks import Racks
from ..replica_layouts import ReplicaLayouts
from .member import Member
from .repair import Repair


class RackAlignment(Repair):
    """Rack alignment after a step's moves."""

    def _align(self, candidates: set[int]) -> None:
        """Swap misplaced ``candidates`` onto a replica's rack (``rack_index.py``), until
        no swap helps. Only what the step moved or re-racked is looked at; misplaced
        partitions stay indexed, so a later step's misplaced partition finds them."""
        racks, owner, members, plag = self._racks, self._owner, self._members, self._plag
        cap: float | None = None  # per unit of capacity
        if self.lag_aware and self._by_load:
            policy = self.policy
            mean = self._mean_lag()
            cap = max(self._by_load[-1][0], math.floor(policy.target_ratio * mean), policy.min_lag)
        todo = sorted(pid for pid in candidates if racks.misplaced(owner.get(pid), pid))
        moved = Misplaced()  # this step's, whose swaps cost no movement: tried first
        for p in todo:  # indexed first, so that two of them can pair up
            racks.note(p, owner[p])
            racks.note(p, owner[p], moved)
        while todo:
            left: dict[int, None] = {}
            swapped = False
            for p in todo:
                a_name = owner.get(p)
                if a_name is None or not racks.misplaced(a_name, p):
                    continue
                a = members[a_name]
                if p in a.pinned:
                    continue
                w_p = plag.get(p, 0) if cap is not None else 0

                def fits(b_name: str, q: int, a: Member = a, p: int = p, w_p: int = w_p) -> bool:
                    b = members[b_name]
                    if topic_of(q) not in a.tids or topic_of(p) not in b.tids:
                        return False
                    if q in b.pinned:
                        return False
                    if self._unbalances(a, q) or self._unbalances(b, p):
                        return False
                    if cap is None:
                        return True
                    d = plag.get(q, 0) - w_p
                    return a.share(a.lag + d) <= cap and b.share(b.lag - d) <= cap

                q = racks.partner(a_name, p, owner.get, fits, self._pids_of, moved=moved)
                if q is None:
                    left[p] = None
                    continue
                b_name = owner[q]
                self._move(p, b_name)
                self._move(q, a_name)
                self._rack_moved.update((p, q))
                swapped = True
                if racks.misplaced(a_name, q):
                    left[q] = None
                    racks.note(q, a_name)
                    racks.note(q, a_name, moved)
            if not swapped:
                break
            todo = sorted(left)

    def _unbalances(self, m: Member, pid: int) -> bool:
        """Whether ``m`` taking ``pid`` in a count-neutral swap would leave it a partition
        that a less loaded subscriber of its topic could take (KIP-54's rule; with mixed
        subscriptions a swap can hand a member a topic it had no share of)."""
        taker = self._min_subscriber(topic_of(pid))
        return taker is not None and taker[2] != m.name and taker[0] < m.key()[0]

    def _adopt_racks(self, racks: Racks, misplaced: list[int], *, align: bool) -> None:
        """Take a snapshot's racks and the partitions it holds off them: indexed, for
        later steps to pair with, and aligned unless the placement is already as local
        as it can be."""
        for name in self._members:
            self._racks.set_member(name, racks.member.get(name))
        # Every partition in ``racks`` exists; an empty set reads as no racks known.
        assert isinstance(racks.partition, ReplicaLayouts), "build_racks reads a table"
        self._racks.replicas.update(zip(*racks.partition.by_pid(self._ids), strict=True))
        if align:  # indexed and counted by the alignment, in its order
            self._rack_work.update(misplaced)
            return
        owner, note = self._owner, self._racks.note
        for p in misplaced:
            note(p, owner[p])
        self._cross_rack.update(misplaced)

    def _recount_cross_rack(self, pids: Iterable[int]) -> None:
        """Only partitions a step moved or re-racked can have changed side."""
        misplaced, owner, cross = self._racks.misplaced, self._owner.get, self._cross_rack
        for pid in pids:
            if misplaced(owner(pid), pid):
                cross.add(pid)
            else:
                cross.discard(pid)
