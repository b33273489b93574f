"""Restoring validity and balance after events: pins and caps enforced, orphaned
partitions placed, then KIP-54's worklist over the members a step touched (or, for a
wide spread in identical groups, a rebalance in bulk)."""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable
from itertools import chain, islice, repeat, takewhile
from operator import neg

import numpy as np

from ..capacity import quotas
from ..ids import (
    as_entries,
    part_of,
    pid_of,
    topic_of,
    weight_of,
    with_rank,
)
from .lag_search import LagSearch
from .member import Member, by_lag_of, capacity_weight, name_of, slot_of
from .moves import REINDEX_SHARE

#: A count spread (fullest minus emptiest member) from which identical subscriptions are
#: rebalanced in bulk rather than partition by partition.
BULK_SPREAD = 8


class Repair(LagSearch):
    """Repair: every partition placed, constraints held, counts balanced."""

    def _place_stranded(self) -> None:
        """Partitions left unassigned because every subscriber was at its cap, placed
        as soon as a repair or a lag move has made room under a cap."""
        while self._stranded and (placed := self._place_orphans()):
            self._repair(placed)

    def _enforce_pins(self) -> list[str]:
        """Hand each pinned partition whose pin holds to its member and mark it there;
        release those whose pin stopped holding. Returns the members to repair."""
        touched: list[str] = []
        members, owner, pins = self._members, self._owner, self._pins
        for pid in sorted(self._pin_work):
            holder = owner.get(pid)
            name = pins.get(pid)
            m = members.get(name) if name is not None else None
            holds = (
                m is not None
                and topic_of(pid) in m.tids
                and part_of(pid) < self._pcount(topic_of(pid))
            )
            if not holds:
                if holder is not None and pid in members[holder].pinned:
                    self._unpin(members[holder], pid)
                    touched.append(holder)  # it may give the partition now
                continue
            assert m is not None
            if holder != m.name:
                self._move(pid, m.name)
                touched.extend(n for n in (holder, m.name) if n is not None)
            if pid not in m.pinned:
                if not m.pinned:
                    m.pinned = set()
                assert isinstance(m.pinned, set)
                m.pinned.add(pid)
                m.held = None
                self._hheap = None
        self._pin_work.clear()
        return touched

    def _shed_excess(self) -> None:
        """Unassign what a member holds above its cap when no subscriber had room for it
        (the lightest first); it is placed again once one has."""
        for name, cap in sorted(self._caps.items()):
            m = self._members.get(name)
            if m is None or m.count <= cap:
                continue
            pinned = m.pinned
            movable = [pid_of(e) for e in self._entries(m) if pid_of(e) not in pinned]
            for pid in movable[: m.count - cap]:
                self._move(pid, None)
                self._stranded.add(pid)

    def _place_orphans(self) -> list[str]:
        """Give each unowned partition of a subscribed topic to its least-loaded subscriber,
        heaviest first (longest-processing-time order evens lag). Partitions whose every
        subscriber is at its cap stay unassigned, and are tried again each step."""
        owner = self._owner
        pool = self._orphans | self._stranded if self._stranded else self._orphans
        self._stranded = set()
        orphans = [
            pid
            for pid in pool
            if pid not in owner
            and part_of(pid) < self._pcount(topic_of(pid))
            and self._subs.get(topic_of(pid))
        ]
        weights = self._plag.many(orphans) if self.lag_aware else [0] * len(orphans)
        if any(weights):
            heaviest = sorted(zip(map(neg, weights), orphans, strict=True))
            weights = [-w for w, _ in heaviest]
            orphans = [pid for _, pid in heaviest]
        else:
            orphans.sort()
        self._orphans.clear()
        plain = not (self._pins or self._caps or self._weighted)
        if plain and self._members and self._identical():
            return self._deal_orphans(orphans, weights)
        return self._place_one_by_one(orphans)

    def _place_one_by_one(self, orphans: list[int]) -> list[str]:
        """Each orphan to the least-loaded subscriber of its topic, through the
        topic-group heaps; the receivers, in order."""
        receivers: list[str] = []
        for pid in orphans:
            key = self._min_subscriber(topic_of(pid))
            if key is None:
                continue
            if key[0] == math.inf:
                self._stranded.add(pid)
                continue
            self._move(pid, key[2])
            receivers.append(key[2])
        return receivers

    def _identical(self) -> bool:
        """Identical subscriptions: every topic with subscribers has every member."""
        n = len(self._members)
        return all(len(subs) == n for subs in self._subs.values() if subs)

    def _deal_orphans(self, orphans: list[int], weights: list[int]) -> list[str]:
        """``_place_one_by_one`` where every member may take any partition and no
        capacity, pin or cap is declared (so ``_donors``'s order is the receivers' order
        too), with the indexes touched once per receiver instead of once per partition.
        Each orphan goes to the least-loaded member as that loop finds it: k orphans can
        only reach the k first members of ``_donors`` (one further down is least loaded
        only after every member before it took one), so those are dealt to from a small
        heap of their own."""
        members, before = self._members, self._before_owner
        # ``_donors`` holds (2c - 1, lag, name); a receiver's key is (2c + 1, lag, name).
        heap = [(give + 2, lag, name) for give, lag, name in islice(self._donors, len(orphans))]
        dealt: dict[str, list[tuple[int, int]]] = {}
        end = 0
        while end < len(orphans):
            start, weight = end, weights[end]
            while end < len(orphans) and weights[end] == weight:
                end += 1
            takers = []
            for _ in range(end - start):
                c2, lag, name = heap[0]
                heapq.heapreplace(heap, (c2 + 2, lag + weight, name))
                takers.append(name)
            if len(takers) == 1:  # with lag, most runs: nothing to group
                dealt.setdefault(name, []).append((orphans[start], weight))
                continue
            for name, pids in _hand_out(orphans[start:end], takers, before).items():
                dealt.setdefault(name, []).extend((pid, weight) for pid in pids)
        receivers: list[Member] = []
        # Many receivers (several members' partitions at once): one rebuild of the
        # member-wide indexes costs less than taking each receiver out and back in.
        bulk = len(dealt) * REINDEX_SHARE > len(members)
        for name, taken in dealt.items():
            m = members[name]
            if not bulk:
                self._detach(m)
            pids = [pid for pid, _ in taken]
            for pid in pids:
                before.setdefault(pid, None)
            self._insert_parts(m, pids, [weight for _, weight in taken])
            if not bulk:
                self._attach(m)
            receivers += repeat(m, len(taken))
        if bulk:
            self._reindex()
        self._hand_over([pid for taken in dealt.values() for pid, _ in taken], receivers)
        return list(dealt)

    def _hand_over(self, pids: list[int], receivers: list[Member]) -> None:
        """Record new holders in the owner map and in its array, together (the paths
        that move many partitions at once; ``_move`` writes both for one)."""
        self._owner.update(zip(pids, map(name_of, receivers), strict=True))
        slots = np.fromiter(map(slot_of, receivers), np.int64, len(receivers))
        self._holder_slots.put(np.fromiter(pids, np.int64, len(pids)), slots)

    def _repair(self, work: Iterable[str]) -> None:
        self._rebalance_in_bulk()
        stack = sorted(set(work), reverse=True)
        queued = set(stack)
        while stack:
            name = stack.pop()
            queued.discard(name)
            m = self._members.get(name)
            if m is None:
                continue
            donor = self._find_donor(m)
            if donor is None:
                found = self._receiver_for(m)
                if found is None:
                    continue
                donor = self._find_donor(found)
            # Move from the fullest donor to the emptiest receiver, whichever member the
            # violation was found at: under identical subscriptions that is what makes the
            # total movement exactly minimal.
            assert donor is not None
            receiver = self._receiver_for(donor)
            assert receiver is not None
            pid = self._pick(donor, receiver, (donor.lag - receiver.lag) / 2)
            assert pid is not None, "a donor always holds a partition its receiver may take"
            self._move(pid, receiver.name)
            for n in (name, donor.name, receiver.name):
                if n not in queued:
                    queued.add(n)
                    stack.append(n)

    def _rebalance_in_bulk(self) -> None:
        """Identical subscriptions and a wide count spread (members joined, a fleet's
        second wave): the repair loop's outcome, decided at once. The fullest members
        keep ``q + 1`` and every other member ``q`` (with capacities: their Sainte-Laguë
        counts, the larger ones at a tie to the members most over their share), so only
        the excess moves (KIP-54's minimum); each donor gives excess spread evenly over
        its lag order (with lag: the heaviest it need not keep to stay near its share of
        the group's lag, so a backlog goes to the members that join), dealt heaviest first
        to the receiver with the least lag. Indexes
        are updated once per member instead of once per partition: 50 000 moves cost
        tens of milliseconds, not seconds."""
        members = self._members
        load = self._donors
        n = len(members)
        # ``give`` is twice a count (over capacity), so this is a spread of BULK_SPREAD.
        # Pins and caps bound single members: the repair loop honours them move by move.
        if self._pins or self._caps or n < 2 or load[-1][0] - load[0][0] < 2 * BULK_SPREAD:
            return
        if not self._identical():
            return
        total = len(self._owner)
        if self._weighted:
            share = total / self._capacity_total
            order = sorted(members.values(), key=lambda m: (m.capacity * share - m.count, m.name))
            counts = quotas(total, list(map(capacity_weight, order)))
            quota = {m.name: c for m, c in zip(order, counts, strict=True)}
            short, q = order, 0
        else:
            q, r = divmod(total, n)
            # The r larger quotas go to the fullest members (ties: name). Only members
            # above q can give and only members below their quota receive: both are read
            # from the ends of the load index, not found by sorting every member.
            fullest = [members[k[2]] for k in takewhile(lambda k: k[0] > 2 * q - 1, reversed(load))]
            if len(fullest) >= r:
                order = sorted(fullest, key=lambda m: (-m.count, m.name))
                short = [members[k[2]] for k in takewhile(lambda k: k[0] < 2 * q - 1, load)]
            else:  # members holding q or less get a larger quota too: sort them all
                order = sorted(members.values(), key=lambda m: (-m.count, m.name))
                short = order
            quota = {m.name: q + (i < r) for i, m in enumerate(order)}
        gives: list[tuple[int, Member]] = []
        # A donor of one gives its lightest partition (a donor of more, with lag, its
        # backlog above its share): for stale lists (after a lag reading, most) found
        # together, without re-sorting each.
        ones: list[Member] = []
        lag_per_slot = sum(m.lag for m in members.values()) / total if self.lag_aware else 0.0
        for m in order:
            extra = m.count - quota[m.name]
            if extra == 1 and m.stale:
                ones.append(m)
            elif extra > 0:
                entries = self._entries(m)
                if extra == 1 or weight_of(entries[0]) == weight_of(entries[-1]):
                    step = len(entries) / extra
                    gives.extend((entries[int(i * step)], m) for i in range(extra))
                else:
                    kept = quota[m.name]
                    gives.extend((e, m) for e in _gives(entries, kept, kept * lag_per_slot))
        gives.extend(zip(self._lightest(ones), ones, strict=True))
        receivers = [m for m in short if m.count < quota.get(m.name, q)]
        touched = {m.name: m for _, m in gives} | {m.name: m for m in receivers}
        for m in touched.values():
            self._detach(m)
        need = {m.name: quota.get(m.name, q) - m.count for m in receivers}
        room = [(m.load(), m.name) for m in receivers]
        heapq.heapify(room)
        gave: dict[str, list[int]] = defaultdict(list)  # donor -> the entries it gave
        got: dict[str, list[int]] = {}
        moved: list[int] = []
        moved_to: list[Member] = []
        before = self._before_owner
        # Heaviest first, each to the receiver with the least lag. Partitions of equal lag
        # (a run) are interchangeable, so how many of a run each receiver takes is dealt
        # first and which ones after, donor by donor: a receiver takes its share from
        # one or two donors per run rather than a partition from each (every donor a
        # receiver waits on is one more revoke, grant and acknowledgement: a scale-out
        # 500 -> 1 000 published 12 100 records where 1 500 do), at the same lag balance.
        later = {m.name: len(order) - i for i, m in enumerate(order)}  # first donor: highest
        gives.sort(key=lambda g: with_rank(g[0], later[g[1].name]), reverse=True)
        end = 0
        while end < len(gives):
            start, weight = end, weight_of(gives[end][0])
            while end < len(gives) and weight_of(gives[end][0]) == weight:
                end += 1
            takes = _dealt(room, need, end - start, weight, members)
            for name, count in takes.items():
                b = members[name]
                chunk = gives[start : start + count]
                start += count
                entries = [entry for entry, _ in chunk]
                pids = list(map(pid_of, entries))
                b.by_lag += entries
                got.setdefault(name, []).extend(pids)
                moved += pids
                moved_to += repeat(b, count)
                for pid, (entry, donor) in zip(pids, chunk, strict=True):
                    before.setdefault(pid, donor.name)
                    gave[donor.name].append(entry)
                if weight:
                    for _, donor in chunk:
                        donor.lag -= weight
        self._hand_over(moved, moved_to)
        for m in touched.values():
            given = gave.get(m.name, [])
            if given and m.stale:  # by pid: a stale list's entries carry earlier weights
                dropped = set(map(pid_of, given))
                m.by_lag = [e for e in m.by_lag if pid_of(e) not in dropped]
            elif given:  # the very entries it holds
                dropped = set(given)
                m.by_lag = [e for e in m.by_lag if e not in dropped]
            elif not m.stale:
                m.by_lag.sort()
            if m.listed is not None:
                self._relist(m.listed, list(map(pid_of, given)), got.get(m.name, ()))
            m.held = None  # recounted on next need
            self._attach(m)

    def _lightest(self, ms: list[Member]) -> list[int]:
        """Each member's lightest entry by current weight (``_entries(m)[0]``: ties to
        the smaller pid), found for all of them in array passes instead of re-sorting
        each list. Every member holds a partition."""
        if not ms:
            return []
        lists = list(map(by_lag_of, ms))
        counts = np.fromiter(map(len, lists), np.intp, len(lists))
        pids = np.fromiter(map(pid_of, chain.from_iterable(lists)), np.int64, int(counts.sum()))
        weights = self._plag.exact_many(pids)
        if weights is None:  # a lag past 64 bits: one by one
            return [self._entries(m)[0] for m in ms]
        starts = np.cumsum(counts) - counts
        least = np.minimum.reduceat(weights, starts)
        at_least = weights == np.repeat(least, counts)
        first = np.minimum.reduceat(np.where(at_least, pids, np.iinfo(np.int64).max), starts)
        return as_entries(least.tolist(), first.tolist())

    def _violators(self) -> list[str]:
        """The repair worklist after a bulk load: every member that may be the short side
        of a KIP-54 violation (one the fullest member could give to: 2+ fewer partitions
        when no capacity is declared). Repairing them reaches every violation; any found
        later involves a member the repair itself changed."""
        if not self._donors:
            return []
        top = self._donors[-1][0]
        return sorted(n for n, m in self._members.items() if m.take_key()[0] < top)


def _dealt(
    room: list[tuple[float, str]],
    need: dict[str, int],
    run: int,
    weight: int,
    members: dict[str, Member],
) -> dict[str, int]:
    """How many of a run of ``run`` partitions of lag ``weight`` each receiver takes, in
    taking order: each to the receiver with the least lag (``room``, a heap), which then
    carries the weight. Partitions without lag change no receiver's place, so the least
    loaded takes all it needs at once (a cold start's whole bulk step is such a run)."""
    takes: dict[str, int] = {}
    while run:
        _, name = heapq.heappop(room)
        b = members[name]
        count = min(need[name], run) if weight == 0 else 1
        takes[name] = takes.get(name, 0) + count
        b.lag += weight * count
        need[name] -= count
        run -= count
        if need[name]:
            heapq.heappush(room, (b.load(), name))
    return takes


def _hand_out(
    run: list[int], takers: list[str], before: dict[int, str | None]
) -> dict[str, list[int]]:
    """Which of a ``run`` of orphans of equal lag each receiver takes, ``takers`` naming
    the receiver of each in dealing order. They are interchangeable, so each receiver
    takes a stretch of them grouped by their last holder: its share comes from one or
    two holders. A member that hands its partitions off (``draining``) releases them
    at its own acknowledgement, and a receiver waits for every holder its share came
    from (measured in docs/assignors.md, "Place orphans")."""
    groups: dict[str | None, list[int]] = {}
    for pid in run:
        groups.setdefault(before.get(pid), []).append(pid)
    out: dict[str, list[int]] = {}
    if list(groups) == [None]:
        # Nobody held them (new partitions, a first assignment): dealt in turn, so that
        # each member takes some of every topic.
        for pid, name in zip(run, takers, strict=True):
            out.setdefault(name, []).append(pid)
        return out
    counts: dict[str, int] = {}
    for name in takers:
        counts[name] = counts.get(name, 0) + 1
    grouped = list(chain.from_iterable(groups.values()))
    i = 0
    for name, count in counts.items():
        out[name] = grouped[i : i + count]
        i += count
    return out


def _gives(entries: list[int], keep: int, target: float) -> list[int]:
    """What a donor holding ``entries`` (lightest first) gives to keep ``keep`` of them
    with a lag near ``target``: from its lightest ``keep``, each swap of the lightest
    kept for the heaviest given that brings its lag nearer the target is made; the rest,
    its backlog above its share, goes. (A donor that gave evenly over its lag order kept
    half its backlog, and the members that joined for it waited idle beside it.)"""
    kept = list(range(keep))
    lag = sum(weight_of(entries[i]) for i in kept)
    j = 0
    for i in range(len(entries) - 1, keep - 1, -1):
        if j == keep:
            break
        d = weight_of(entries[i]) - weight_of(entries[kept[j]])
        if 2 * (lag + d) <= 2 * target + d:  # nearer the target with the swap
            lag += d
            kept[j] = i
            j += 1
    mine = set(kept)
    return [e for i, e in enumerate(entries) if i not in mine]
