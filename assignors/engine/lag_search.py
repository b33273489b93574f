"""Lag balance: moves and swaps that lower the largest member lag within the policy.

Per member, partitions are sorted by lag, so the partition that best evens two members'
lag is found by bisection; swaps are searched in array passes over a bounded number of
candidates (``SWAP_CANDIDATES``)."""

from __future__ import annotations

import bisect
import math

import numpy as np
from numpy.typing import NDArray

from ..events import LagTrigger
from ..ids import (
    PID_MASK,
    as_entry,
    pid_of,
    topic_of,
    weight_of,
)
from ..lag_swap import MAX_PARTNERS, Partner, exact, nearest_swaps
from .member import Member
from .moves import Moves

SWAP_CANDIDATES = 256


#: A lag move or swap: (resulting peak lag, partner, pid from the top member, pid back).
LagStep = tuple[float, Member, int, int | None]


def even_share(a: Member, b: Member) -> float:
    """The lag that, moved from ``a`` to ``b``, leaves both with the same lag per unit
    of capacity (half the gap when their capacities are equal)."""
    if a.capacity == b.capacity:
        return (a.lag - b.lag) / 2
    return (a.lag * b.capacity - b.lag * a.capacity) / (a.capacity + b.capacity)


def peak_after(a: Member, b: Member, d: int) -> float:
    """The larger lag per unit of capacity after moving lag ``d`` from ``a`` to ``b``."""
    return max(a.share(a.lag - d), b.share(b.lag + d))


def peak_floor(a: Member, b: Member, half: float) -> float:
    """The lowest ``peak_after`` any whole lag moved from ``a`` to ``b`` can give: the peak
    is convex in the lag moved and least at ``half`` (``even_share``)."""
    low = math.floor(half)
    return min(peak_after(a, b, low), peak_after(a, b, low + 1))


def last_entry_at(lag: int) -> int:
    """The largest possible ``by_lag`` entry with this lag."""
    return as_entry(lag, PID_MASK)


class LagSearch(Moves):
    """Lag balance on top of the moves: only a step's settling calls in."""

    def _pick(self, a: Member, b: Member, target: float) -> int | None:
        """A partition of ``a`` that ``b`` may take with lag closest to ``target``
        (ties: the one at or below it, so a move never overshoots)."""
        entries = self._entries(a)
        # The first entry whose lag exceeds ``target``.
        i = bisect.bisect_right(entries, last_entry_at(math.floor(target))) if target >= 0 else 0
        lo, hi = i - 1, i
        tids, pinned = b.tids, a.pinned
        while lo >= 0 or hi < len(entries):
            take_lo = hi >= len(entries) or (
                lo >= 0 and target - weight_of(entries[lo]) <= weight_of(entries[hi]) - target
            )
            if take_lo:
                pid = pid_of(entries[lo])
                lo -= 1
            else:
                pid = pid_of(entries[hi])
                hi += 1
            if topic_of(pid) in tids and pid not in pinned:
                return pid
        return None

    def _rebalance_lag(self, budget: int, *, eager: bool) -> int:
        """Lower the largest member lag by moves and swaps that keep count balance.

        Hysteresis: start only above ``trigger_ratio`` x the lower bound, then continue to
        ``target_ratio``. A fresh placement (``eager``) moves nothing that was owned, so it
        searches on until no step improves. With capacities, lag is compared per unit
        of capacity: a member twice as strong is meant to carry twice the lag. Returns the
        partitions it moved.
        """
        policy = self.policy
        if budget <= 0 or len(self._members) < 2:
            return 0
        spent = 0
        first = not eager
        #: Members' lags in list order, as arrays for the array search: one step changes
        #: only its two members, so the others' carry over to the next step.
        lags: dict[str, NDArray[np.int64]] = {}
        while spent < budget:
            top_load, top_name = self._by_load[-1]
            a = self._members[top_name]
            ratio = 1.0 if eager else policy.trigger_ratio if first else policy.target_ratio
            mean = self._mean_lag()
            if a.lag <= policy.min_lag or top_load <= ratio * mean:
                return spent  # within the ratio of the mean, so of the bound: a's list unsorted
            entries = self._entries(a)
            heaviest = weight_of(entries[-1]) if entries else 0
            bound = max(mean, a.share(heaviest))
            if top_load <= ratio * bound:
                return spent
            if first:
                unit = bound if a.capacity == 1 else bound * a.capacity
                self._trigger = LagTrigger(top_name, a.lag, unit)
            first = False
            step = self._best_lag_step(a, budget - spent, lags)
            if step is None or step[0] > top_load * (1.0 - policy.min_gain):
                return spent
            cost = self._apply_lag_step(a, step)
            if cost == 0:
                return spent
            spent += cost
            lags.pop(a.name, None)
            lags.pop(step[1].name, None)
        return spent

    def _best_lag_step(
        self, a: Member, allowance: int, lags: dict[str, NDArray[np.int64]]
    ) -> LagStep | None:
        """The move or swap with the lowest resulting peak; the first found wins a tie.

        Exact pruning: nothing with b can end below ``peak_floor(a, b)``, so once the
        best so far is at or under it, b is skipped, and a swap search stops on reaching
        it; the first to reach a floor is what the full search would keep. Swaps with
        partners the array search can take are found for all of them at once, before
        the walk; the walk then reads them in its order, as if searched in turn."""
        best: LagStep | None = None
        a_load = a.load()
        a_top = self._entries(a)[-SWAP_CANDIDATES:]
        swapping = allowance >= 2
        partners = self._lighter(a, a_load)
        in_arrays = self._swaps_in_arrays(a, a_top, partners, lags) if swapping else {}
        for b in partners:
            half = even_share(a, b)
            floor = peak_floor(a, b, half)
            beat = a_load if best is None else best[0]
            if beat <= floor:
                continue
            # A move that keeps a and b balanced with each other: their counts trade
            # places (without capacities, b holds one partition less than a).
            if b.take_key()[0] <= a.key()[0]:
                pid = self._pick(a, b, half)
                if pid is not None:
                    peak = peak_after(a, b, self._plag.get(pid, 0))
                    if peak < beat:
                        best, beat = (peak, b, pid, None), peak
            if swapping and beat > floor:
                if b.name in in_arrays:
                    swap = in_arrays[b.name]
                    if swap is not None and swap[0] >= beat:
                        swap = None
                else:
                    swap = self._best_swap(a, b, a_top, half=half, beat=beat, floor=floor)
                if swap is not None:
                    best = (swap[0], b, swap[1], swap[2])
        return best

    def _lighter(self, a: Member, a_load: float) -> list[Member]:
        """The first ``policy.candidates`` members with less load than ``a``, lightest
        first: whom a step of the lag search tries."""
        out: list[Member] = []
        for b_load, b_name in self._by_load:
            if len(out) >= self.policy.candidates or b_load >= a_load:
                break
            if b_name != a.name:
                out.append(self._members[b_name])
        return out

    def _swaps_in_arrays(
        self,
        a: Member,
        a_top: list[int],
        partners: list[Member],
        lags: dict[str, NDArray[np.int64]],
    ) -> dict[str, tuple[float, int, int] | None]:
        """``_best_swap`` (without its ``beat``) for the partners that share a's topics,
        where neither holds pins: there it needs no per-partition checks, and the same
        pairs are found in array passes, for all those partners together. Keyed by
        partner name; a partner left out is searched by the loop."""
        if a.pinned:
            return {}
        able = [b for b in partners if not b.pinned and a.tids == b.tids and exact(a.lag, b.lag)]
        del able[MAX_PARTNERS - 1 :]
        if not able:
            return {}
        entries = [self._entries(b) for b in able]
        found = nearest_swaps(
            self._lag_array(a, lags)[-len(a_top) :],
            a.lag,
            a.capacity,
            [Partner(self._lag_array(b, lags), even_share(a, b), b.lag, b.capacity) for b in able],
        )
        return {
            b.name: None if f is None else (f[0], pid_of(a_top[f[1]]), pid_of(e[f[2]]))
            for b, e, f in zip(able, entries, found, strict=True)
        }

    def _lag_array(self, m: Member, lags: dict[str, NDArray[np.int64]]) -> NDArray[np.int64]:
        """``m``'s lags in its list's order (ascending), kept in ``lags`` until a step
        moves one of its partitions. Only for lags the array search takes (``exact``)."""
        got = lags.get(m.name)
        if got is None:
            e = self._entries(m)
            got = lags[m.name] = np.fromiter(map(weight_of, e), np.int64, len(e))
        return got

    def _best_swap(
        self, a: Member, b: Member, a_top: list[int], *, half: float, beat: float, floor: float
    ) -> tuple[float, int, int] | None:
        """The exchange p (of a's ``a_top``) <-> q (of b) with lag(p) - lag(q) nearest
        ``half``, the share that evens the two out, if its peak is below ``beat``; it
        stops early at ``floor``, the lowest peak any exchange can reach."""
        b_entries = self._entries(b)
        if not b_entries:
            return None
        best: tuple[float, int, int] | None = None
        a_tids, b_tids = a.tids, b.tids
        for e_p in a_top:
            p = pid_of(e_p)
            if topic_of(p) not in b_tids or p in a.pinned:
                continue
            w_p = weight_of(e_p)
            # The first entry of b whose lag is at least w_p - half.
            j = bisect.bisect_left(b_entries, as_entry(max(0, math.ceil(w_p - half)), 0))
            for k in (j - 1, j):
                if 0 <= k < len(b_entries):
                    e_q = b_entries[k]
                    q = pid_of(e_q)
                    d = w_p - weight_of(e_q)
                    if d > 0 and topic_of(q) in a_tids and q not in b.pinned:
                        peak = peak_after(a, b, d)
                        if peak < beat:
                            best, beat = (peak, p, q), peak
                            if peak <= floor:
                                return best
        return best

    def _apply_lag_step(self, a: Member, step: LagStep) -> int:
        _, b, p, q = step
        self._move(p, b.name)
        if q is not None:
            self._move(q, a.name)
        if (
            self._find_donor(a)
            or self._find_donor(b)
            or self._receiver_for(a)
            or self._receiver_for(b)
        ):
            # Would break KIP-54 balance (possible only with mixed subscriptions): undo.
            if q is not None:
                self._move(q, b.name)
            self._move(p, a.name)
            return 0
        self._lag_moved.add(p)
        if q is not None:
            self._lag_moved.add(q)
        return 1 if q is None else 2
