"""Rack alignment: count-neutral swaps that bring partitions onto a rack holding one of
their replicas (on a fresh placement also moves between members that trade counts, then
the count search of ``rack_counts.py`` or chains of moves), and the count of those still
off their racks (Kafka's count)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import islice

from ..ids import topic_of
from ..rack_counts import MAX_ARCS, Group, Kind, by_class, retarget
from ..rack_index import Misplaced
from ..racks import Racks
from ..replica_layouts import ReplicaLayouts
from .member import Member
from .rack_chains import RackChains

#: Members of a rack tried as receivers of one misplaced partition.
_MOVE_SCAN = 64
_NO_RACKS: frozenset[str] = frozenset()


class RackAlignment(RackChains):
    """Rack alignment after a step's moves."""

    def _align(self, candidates: set[int], *, moves: bool = False) -> None:
        """Swap misplaced ``candidates`` onto a replica's rack (``rack_index.py``), until
        no swap helps. Only what the step moved or re-racked is looked at; misplaced
        partitions stay indexed, so a later step's misplaced partition finds them.

        With ``moves`` (a fresh ``sticky`` placement: nothing was owned, no lag rounds
        follow) a partition that no swap places also moves to a member on its racks
        that holds fewer (``_rack_move``): which members take the extra partitions then
        follows the racks; what is left goes by the count search (``rack_counts.py``),
        or by chains of moves (``rack_chains.py``) where its flow would be large.
        After events that would move partitions a count-neutral swap does not, so
        steps keep the rack-blind counts."""
        racks, owner, members, plag = self._racks, self._owner, self._members, self._plag
        cap: float | None = None  # per unit of capacity
        if self.lag_aware and self._by_load:
            policy = self.policy
            mean = self._mean_lag()
            cap = max(self._by_load[-1][0], math.floor(policy.target_ratio * mean), policy.min_lag)
        todo = sorted(pid for pid in candidates if racks.misplaced(owner.get(pid), pid))
        moved = Misplaced()  # this step's, whose swaps cost no movement: tried first
        movable = moves and not (self._weighted or self._caps)
        # (topic, count, racks) of partitions no member took by a move: another such
        # partition from a member holding as many meets the same members, until a move
        # succeeds.
        unmoved: set[tuple[int, int, frozenset[str] | None]] = set()
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
                    tried = (topic_of(p), a.count, racks.replicas.get(p))
                    if movable and tried not in unmoved and self._rack_move(a, p):
                        swapped = True
                        unmoved.clear()
                    else:
                        unmoved.add(tried)
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
        if movable:
            off = [p for p in todo if racks.misplaced(owner.get(p), p)]
            if off and (self._pins or not self._retarget_counts()):
                self._rack_chains(off)

    def _retarget_counts(self) -> bool:
        """The best placement for the counts, and counts traded among several members at
        once where that places more (``rack_counts.py``), on a fresh placement without
        pins. Whether it was judged: not where the flow would be large (hundreds of
        subscription sets); the chains of moves are tried there."""
        racks, members = self._racks, self._members
        kinds: dict[Kind, list[str]] = {}
        for name in sorted(members):
            kinds.setdefault((members[name].tids, racks.member.get(name)), []).append(name)
        nodes = sum(len({members[n].count for n in names}) for names in kinds.values())
        topics = len({t for tids, _ in kinds for t in tids})
        if topics * racks.layout_count() * nodes > MAX_ARCS:
            return False
        layout = racks.replicas.get
        group = Group(
            by_class(list(self._owner), topic_of, lambda p: layout(p, _NO_RACKS)),
            list(kinds),
            list(kinds.values()),
            {name: list(self._pids_of(name)) for name in members},
        )
        moves = retarget(group)
        if moves is None:
            return False
        for p, name in moves.items():
            self._move(p, name)
            self._rack_moved.add(p)
            racks.note(p, name)  # if misplaced there: a later step's swap may pair it
        return True

    def _rack_move(self, a: Member, p: int) -> bool:
        """Move ``p`` from ``a`` to a member that holds fewer partitions, on one of its
        replicas' racks or without a rack (where nothing counts as off a rack), when
        KIP-54 balance still holds after it; whether it moved. The two members trade
        counts. Without lag (``moves`` is asked of a lag-aware engine only when it knows no
        lag): no lag cap."""
        racks, members = self._racks, self._members
        t, limit = topic_of(p), a.key()[0]
        wanted = [racks.on_rack.get(s, {}) for s in sorted(racks.replicas.get(p, ()))]
        for group in [*wanted, racks.rackless]:
            for b_name in islice(group, _MOVE_SCAN):
                b = members[b_name]
                if t not in b.tids or b.take_key()[0] > limit:
                    continue
                if not self._keeps_balance(a, b, t):
                    continue
                self._move(p, b_name)
                self._rack_moved.add(p)
                return True
        return False

    def _keeps_balance(self, a: Member, b: Member, t: int) -> bool:
        """Whether ``b`` (holding fewer) taking a partition of topic ``t`` from ``a``
        leaves KIP-54 balance, read from the indexes before the move: a move tried
        and undone costs a dozen index updates. Members of capacity 1 without caps."""
        # b, one more: no subscriber of a topic it then holds may hold two fewer than it.
        above = 2 * b.count + 1
        tgroup = self._tgroup
        for g in {tgroup[u] for u in (*b.holding(), t)}:
            key = self._min_in_group(g)
            if key is not None and key[0] < above:
                return False
        # a, one fewer: nobody holding one of its topics may hold two more than it.
        return self._find_donor(a, 2 * a.count - 1) is None

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
        self._racks.adopt_partitions(*racks.partition.by_pid(self._ids))
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
