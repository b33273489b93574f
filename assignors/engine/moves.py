"""Moving partitions between members with every index kept in step, and loading a
whole assignment at once (cheaper than one move per partition)."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, chain, filterfalse, repeat

import numpy as np
from sortedcontainers import SortedList

from ..ids import (
    as_entries,
    as_entry,
    pid_of,
    topic_of,
)
from ..types import TopicPartition
from .member import Member, by_lag_of, capacity_weight, lag_of
from .receivers import Receivers

#: An update touching more than one member in this many rebuilds the member-wide indexes
#: at once (``_reindex``) rather than entry by entry.
REINDEX_SHARE = 8
#: A member's list loses up to this many partitions by bisection, more in one pass.
_BISECTED = 16


def unweighted_indexes(members: Mapping[str, Member]) -> tuple[SortedList, SortedList] | None:
    """``_donors`` and ``_by_load`` of members of capacity 1 without caps, ordered by
    NumPy: sorting key tuples in Python compares them item by item, while ordering two int
    arrays stably over the names in order is a C pass, and the lists are then built from
    keys already in order (one linear pass of comparisons; docs/assignors.md has the
    figures). None when a member's lag passes 64 bits: the tuples' own order decides."""
    names = sorted(members)
    ordered = list(map(members.__getitem__, names))
    n = len(ordered)
    counts = np.fromiter(map(len, map(by_lag_of, ordered)), np.int64, n)
    try:
        lags = np.fromiter(map(lag_of, ordered), np.int64, n)
    except OverflowError:
        return None
    # Stable orders over names in order: ties on the ints fall back to the name, as in
    # the tuples' own order.
    by_load = np.lexsort((lags, counts))
    by_lag = np.argsort(lags, kind="stable")
    pick = names.__getitem__
    load = zip(
        (2 * counts[by_load] - 1).tolist(),
        lags[by_load].tolist(),
        map(pick, by_load.tolist()),
        strict=True,
    )
    by_lag_keys = zip(lags[by_lag].tolist(), map(pick, by_lag.tolist()), strict=True)
    return SortedList(load), SortedList(by_lag_keys)


class Moves(Receivers):
    """Moves and bulk loads: the only code that changes who holds what."""

    def _bulk_load(
        self,
        members: Iterable[str],
        topics_of: Mapping[str, frozenset[str]],
        initial: Mapping[str, list[int]],
        weighed: Mapping[str, tuple[list[int], int]] | None = None,
        capacities: Mapping[str, float] | None = None,
    ) -> None:
        """Adopt a whole assignment at once (no pid twice; each list ascending unless
        the engine weighs lag). ``weighed`` gives a member's ``by_lag`` entries and total
        lag when the caller has them already."""
        members = list(members)
        if weighed is None and self.lag_aware and self._plag:
            weighed = self._weigh(members, initial)
        owner = self._owner
        by_topics: dict[frozenset[int], list[str]] = {}
        tids_of: dict[frozenset[str], frozenset[int]] = {}
        for name in members:
            topics = topics_of[name]
            tids = tids_of.get(topics)
            if tids is None:
                tids = tids_of[topics] = self._tids(topics)
            if weighed is not None:
                by_lag, lag = weighed[name]
            else:  # all weights are 0 and the list is ascending: already in order
                by_lag, lag = initial.get(name, []), 0
            m = Member(name, topics, tids, by_lag, lag)
            self._give_slot(m)
            if capacities is not None and capacities[name] != 1:
                m.capacity = capacities[name]
                self._weighted += 1
            self._total_lag += lag
            self._members[name] = m
            by_topics.setdefault(tids, []).append(name)
        loaded = list(self._members)
        held_lists = [initial.get(name, []) for name in loaded]
        owner.update(
            zip(
                chain.from_iterable(held_lists),
                chain.from_iterable(map(repeat, loaded, map(len, held_lists))),
                strict=True,
            )
        )
        counts = np.fromiter(map(len, held_lists), np.int64, len(held_lists))
        slots = np.fromiter((self._members[n].slot for n in loaded), np.int64, len(loaded))
        held = np.fromiter(chain.from_iterable(held_lists), np.int64, int(counts.sum()))
        self._holder_slots.put(held, np.repeat(slots, counts))
        subscribers: dict[int, list[str]] = {}
        for group_tids, names in by_topics.items():
            for t in group_tids:
                if t in subscribers:
                    subscribers[t] += names
                else:
                    subscribers[t] = names.copy()
        for t, names in subscribers.items():
            self._subs.setdefault(t, set()).update(names)
        # Topic groups in one pass: topics with the same subscribers share a group.
        by_subscribers: dict[frozenset[str], set[int]] = {}
        for t, subs in sorted(self._subs.items()):
            by_subscribers.setdefault(frozenset(subs), set()).add(t)
        for topics_in_group in by_subscribers.values():
            self._add_group(topics_in_group, None)
        self._reindex()
        coverable = sum(self._pcount(t) for t, subs in self._subs.items() if subs)
        if len(owner) < coverable:
            for t, subs in self._subs.items():
                if subs:
                    self._orphans.update(filterfalse(owner.__contains__, self._topic_pids(t)))

    def _weigh(
        self, members: list[str], initial: Mapping[str, list[int]]
    ) -> dict[str, tuple[list[int], int]]:
        """Each member's ``by_lag`` entries and total lag, with the lag of every held
        partition looked up in one gather (one per member cost 10 000 NumPy calls at
        10 000 members)."""
        held = [initial.get(name, []) for name in members]
        flat = list(chain.from_iterable(held))
        weights = self._plag.many(flat)
        entries = as_entries(weights, flat)
        stops = list(accumulate(map(len, held)))
        out: dict[str, tuple[list[int], int]] = {}
        for name, start, stop in zip(members, [0, *stops][:-1], stops, strict=True):
            by_lag = entries[start:stop]
            by_lag.sort()
            out[name] = (by_lag, sum(weights[start:stop]))
        return out

    def _reindex(self) -> None:
        """Rebuild the member-wide indexes from scratch: cheaper than many single updates."""
        members = self._members.values()
        fast = None if self._weighted or self._caps else unweighted_indexes(self._members)
        if fast is None:
            self._donors = SortedList(map(Member.key, members))
            self._by_load = SortedList(zip(map(Member.load, members), self._members, strict=True))
            self._capacity_total = math.fsum(map(capacity_weight, members))
        else:
            self._donors, self._by_load = fast
            self._capacity_total = len(self._members)
        self._idle_capacity = math.fsum(capacity_weight(m) for m in members if not m.topics)
        self._gheap.clear()
        self._hheap = None

    def _give_slot(self, m: Member) -> None:
        m.slot = self._free_slots.pop() if self._free_slots else len(self._slot_names)
        if m.slot == len(self._slot_names):
            self._slot_names.append(m.name)
        else:
            self._slot_names[m.slot] = m.name

    def _entries(self, m: Member) -> list[int]:
        """``m.by_lag`` in current weight order."""
        if m.stale:
            pids = list(map(pid_of, m.by_lag))
            m.by_lag = sorted(as_entries(self._plag.many(pids), pids))
            m.stale = False
        return m.by_lag

    def _pids_of(self, name: str) -> Iterator[int]:
        return map(pid_of, self._members[name].by_lag)

    def _move(self, pid: int, to: str | None, *, vanished: bool = False) -> None:
        """Reassign one partition, keeping every index and the change record in step."""
        frm = self._owner.get(pid)
        if frm == to:
            return
        if pid not in self._before_owner:
            self._before_owner[pid] = None if vanished else frm
            if vanished and frm is not None:
                self._vanished_from[pid] = frm
        weight = self._plag.get(pid, 0) if self.lag_aware else 0
        if frm is not None:
            a = self._members[frm]
            if a.pinned:
                self._unpin(a, pid)
            self._detach(a)
            self._remove_part(a, pid, weight)
            self._attach(a)
            del self._owner[pid]
        if to is None:
            self._holder_slots.put_one(pid, -1)
            return
        b = self._members[to]
        self._detach(b)
        self._insert_parts(b, (pid,), (weight,))
        self._attach(b)
        self._owner[pid] = to
        self._holder_slots.put_one(pid, b.slot)

    def _remove_part(self, m: Member, pid: int, weight: int) -> None:
        # Invariant: an entry's weight is the partition's current effective lag, because a
        # list a lag update made stale is re-sorted with current lag before use. A stale
        # list stays stale: it is searched, not sorted (most are never read before the
        # next lag reading makes them stale again).
        entries = m.by_lag
        if m.stale:
            del entries[list(map(pid_of, entries)).index(pid)]
        else:
            entry = as_entry(weight, pid)
            i = bisect.bisect_left(entries, entry)
            assert entries[i] == entry
            del entries[i]
        m.lag -= weight
        self._total_lag -= weight
        if m.listed is not None:
            self._relist(m.listed, (pid,), ())
        t = topic_of(pid)
        held = m.held
        if held is not None:
            left = held[t] - 1
            if left:
                held[t] = left
            else:
                del held[t]

    def _insert_parts(self, m: Member, pids: Sequence[int], weights: Sequence[int]) -> None:
        """``m`` takes ``pids`` (their lags ``weights``): its lag order, listing, lag and
        per-topic counts updated once for all of them (a sort, not an insort each)."""
        entries = list(map(as_entry, weights, pids))
        if m.stale:
            m.by_lag.extend(entries)
        elif len(entries) == 1:
            bisect.insort(m.by_lag, entries[0])
        else:
            m.by_lag.extend(entries)
            m.by_lag.sort()
        gained = sum(weights)
        m.lag += gained
        self._total_lag += gained
        if m.listed is not None:
            self._relist(m.listed, (), pids)
        held = m.held
        if held is not None:
            for pid in pids:
                t = topic_of(pid)
                held[t] = held.get(t, 0) + 1

    def _detach(self, m: Member) -> None:
        self._donors.remove(m.key())
        self._by_load.remove((m.load(), m.name))

    def _attach(self, m: Member) -> None:
        key = m.key()
        self._donors.add(key)
        self._by_load.add((m.load(), m.name))
        taker = m.take_key()
        for g in self._groups_of(m):
            heap = self._gheap.get(g)
            if heap is not None:
                heapq.heappush(heap, taker)
                if len(heap) > self._glimit[g]:
                    del self._gheap[g]  # mostly stale entries: rebuild on next need
        if self._hheap is not None:
            entry = (-key[0], -key[1], key[2])
            held = m.holding()
            for t in held:
                heapq.heappush(self._hheap.setdefault(t, []), entry)
            self._hheap_size += len(held)
            if self._hheap_size > 8 * len(self._owner) + 1024:
                self._hheap = None  # mostly stale entries: rebuild on next need

    def _unpin(self, m: Member, pid: int) -> None:
        if pid in m.pinned:
            assert isinstance(m.pinned, set)
            m.pinned.discard(pid)
            m.held = None
            self._hheap = None

    def _relist(
        self, listed: list[TopicPartition], lost: Iterable[int], gained: Collection[int]
    ) -> None:
        """Keep a member's ``listed`` in step with partitions it lost and gained: a few
        lost are found by bisection, many in one pass (a bulk step takes hundreds from a
        member, and each bisection also shifts the list's tail)."""
        ids = self._ids
        tp = ids.tp
        lost = lost if isinstance(lost, Collection) else list(lost)
        if len(lost) > _BISECTED:
            dropped = set(ids.each(lost))
            listed[:] = [x for x in listed if x not in dropped]
        else:
            for pid in lost:
                del listed[bisect.bisect_left(listed, tp(pid))]
        if len(gained) > 1:
            listed.extend(ids.each(gained))
            listed.sort()
        else:
            for pid in gained:
                bisect.insort(listed, tp(pid))
