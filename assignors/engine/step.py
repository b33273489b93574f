"""One step: settle after a batch of events (repair, lag balance, racks), then report
exactly what changed as a ``Change``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import chain

import numpy as np

from ..events import (
    Change,
    Delta,
)
from ..ids import (
    PART_BITS,
    pid_of,
    sort_runs,
)
from ..types import TopicPartition
from .handlers import Handlers
from .member import Member

#: Rounds of lag balance and rack alignment after the first, at most.
_LAG_RACK_ROUNDS = 4


class Steps(Handlers):
    """Settling a step and describing it."""

    def _settle(
        self,
        work: Iterable[str],
        *,
        lag_budget: int,
        count_lag_moves: bool,
        lag_only: bool = False,
        rack_moves: bool = False,
    ) -> Change:
        if not lag_only:
            pinned = self._enforce_pins()
            touched = self._place_orphans()
            self._repair([*work, *pinned, *touched])
            self._place_stranded()
            if self._caps:
                self._shed_excess()
        spent = 0
        if self.lag_aware:
            spent = self._rebalance_lag(lag_budget, eager=not count_lag_moves)
            self._place_stranded()
        if self._racks:
            swapped = len(self._rack_moved)
            self._align({*self._before_owner, *self._rack_work}, moves=rack_moves)
            # Swaps change members' lag and can open lag steps the lag phase had not
            # found: lag (with the hysteresis the next call would apply) and racks again
            # while swaps happen, or a caller that feeds the result back gets moves for
            # nothing new (not a fixed point).
            for _ in range(_LAG_RACK_ROUNDS if self.lag_aware else 0):
                if len(self._rack_moved) == swapped:
                    break
                swapped = len(self._rack_moved)
                spent += self._rebalance_lag(lag_budget - spent, eager=False)
                self._align({*self._before_owner, *self._rack_work}, moves=rack_moves)
        if self._racks or self._cross_rack:  # the swaps are in ``_before_owner`` now
            self._recount_cross_rack({*self._before_owner, *self._rack_work})
        change = self._diff(count_lag_moves)
        self._begin()
        return change

    def _diff(self, count_lag_moves: bool) -> Change:
        # A member's list changed iff a partition it held, or holds now, changed hands
        # and did not come back. A joiner gets a record even when empty, so it knows it
        # was seen.
        owner, members = self._owner, self._members
        vanished = self._vanished_from
        gained: dict[str | None, list[int]] = defaultdict(list)
        lost: dict[str | None, list[int]] = defaultdict(list)
        handed: dict[str, list[int]] = defaultdict(list)  # owner to owner, by old owner
        for pid, old in self._before_owner.items():
            now = owner.get(pid)
            held = vanished.get(pid) if old is None else old
            if now == held:
                continue
            gained[now].append(pid)
            lost[held].append(pid)
            if old is not None and now is not None:
                handed[old].append(pid)
        # A move is counted where the old owner is still a member subscribed to the
        # partition's topic (not one its leaving or unsubscribing forced).
        moved = lag_moved = rack_moved = 0
        lag_set, rack_set = self._lag_moved, self._rack_moved
        for old, pids in handed.items():
            m = members.get(old)
            if m is None:
                continue
            tids = m.tids
            counted = [pid for pid in pids if pid >> PART_BITS in tids]
            moved += len(counted)
            if lag_set or rack_set:
                for pid in counted:
                    if pid in lag_set:
                        lag_moved += 1
                    elif pid in rack_set:
                        rack_moved += 1
        differ: set[str | None] = {*self._joined, *gained, *lost}
        names = sorted(members.keys() & differ)
        changed = dict(zip(names, self._lists([members[n] for n in names]), strict=True))
        tps = self._ids.tps
        return Change(
            assignments=changed,
            removed=frozenset(self._removed - set(self._members)),
            moved=moved,
            moved_for_lag=lag_moved if count_lag_moves else 0,
            lag_trigger=self._trigger if lag_moved and count_lag_moves else None,
            moved_for_rack=rack_moved,
            deltas={
                n: Delta(frozenset(tps(gained.get(n, ()))), frozenset(tps(lost.get(n, ()))))
                for n in names
            },
        )

    def _lists(self, ms: list[Member]) -> list[list[TopicPartition]]:
        """Each member's sorted partition list (the caller's to keep). With shared
        partitions (``intern_partitions``) each member's list is kept in step move by
        move once made (``Member.listed``), so a member that changes again is listed by a
        copy; without, nothing is kept (the caller chose not to keep every partition
        alive: a million of them would be a million objects for the collector to walk)."""
        if self._ids.interned is None:
            return self._made(ms)
        fresh = [m for m in ms if m.listed is None]
        for m, listed in zip(fresh, self._made(fresh), strict=True):
            m.listed = listed
        return [m.listed.copy() for m in ms]  # type: ignore[union-attr]

    def _made(self, ms: list[Member]) -> list[list[TopicPartition]]:
        """Each member's sorted partition list from its ``by_lag``, in array passes."""
        if not ms:
            return []
        counts = [m.count for m in ms]
        entries = chain.from_iterable(m.by_lag for m in ms)
        pids = np.fromiter(map(pid_of, entries), np.int64, sum(counts))
        member_of = np.repeat(np.arange(len(ms), dtype=np.int64), counts)
        return self._ids.tps_runs(sort_runs(pids, member_of), counts)
