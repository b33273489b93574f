"""The lag search's exchange between two members, as array passes.

``IncrementalAssignor._best_swap`` looks for the partitions p (of the member with the most
lag) and q (of a lighter one) whose exchange leaves the lower peak. Its loop bisects
the lighter member's lags once per candidate p; for members whose exchange has no
topic or pin restriction this module does the same search over NumPy arrays, with the
loop's result: the first pair, in the loop's order, at the lowest peak. One call
searches against every lighter candidate at once: a step of the lag search then costs a
few array passes, not a few per candidate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, TypeAlias

import numpy as np
from numpy.typing import NDArray

#: Lags and sums of lags up to here are exact in float64 as in int64; above it the loop
#: in ``engine/lag_search.py`` decides.
EXACT = 1 << 53
#: Partner ``i``'s lags are searched as ``i << _SEG_SHIFT | lag``.
_SEG_SHIFT = 53
#: Fewer partners than this keep those keys inside int64.
MAX_PARTNERS = 1 << (63 - _SEG_SHIFT)


#: Ascending lags: a list, or an int64 array (what the engine keeps between steps).
Lags: TypeAlias = Sequence[int] | NDArray[np.int64]


class Partner(NamedTuple):
    """A lighter member to exchange with: its lags (ascending), the lag that evens the
    two out (``_even_share``), its load and its capacity."""

    lags: Lags
    half: float
    load: int
    capacity: float


def exact(*loads: int) -> bool:
    """Whether members with these lags (each the sum of its partitions') can be searched
    here."""
    return sum(loads) < EXACT


def nearest_swaps(
    a_lags: Lags, a_load: int, a_capacity: float, partners: Sequence[Partner]
) -> list[tuple[float, int, int] | None]:
    """For each partner b: (peak, index into ``a_lags``, index into ``b.lags``) of the
    exchange p <-> q with lag(p) > lag(q) and lag(p) - lag(q) nearest ``b.half`` from
    either side, at the lowest peak; ties go to the lowest p, then the lighter q. None
    when no exchange moves lag from a to b. ``a_lags`` ascends.

    Every lag and load is below ``EXACT`` (``exact``) and there are fewer than
    ``MAX_PARTNERS`` partners: ``partner << 53 | lag`` then orders all their lags in one
    int64 array.
    """
    out: list[tuple[float, int, int] | None] = [None] * len(partners)
    if not len(a_lags) or not partners:
        return out
    n = len(partners)
    wa = np.asarray(a_lags, dtype=np.int64)
    arrays = [np.asarray(b.lags, dtype=np.int64) for b in partners]
    lens = np.fromiter(map(len, arrays), np.int64, n)
    if not lens.any():
        return out
    starts = np.cumsum(lens) - lens
    flat = np.concatenate(arrays)
    seg = np.arange(n, dtype=np.int64) << _SEG_SHIFT
    # Each partner's lags, offset so that all of them ascend together: a bisection within
    # one partner's lags is one bisection of the whole.
    keyed = np.repeat(seg, lens) | flat
    half = np.fromiter((b.half for b in partners), np.float64, n)
    # As the loop's bisect: per partner and p, the first q whose lag is at least
    # lag(p) - half, and the one before it.
    wanted = np.maximum(np.ceil(wa - half[:, None]), 0).astype(np.int64)
    j = np.searchsorted(keyed, seg[:, None] | wanted, side="left")
    j -= starts[:, None]
    k = np.repeat(j, 2, axis=1)  # per p: the q before, then the q at
    k[:, ::2] -= 1
    inside = (k >= 0) & (k < lens[:, None])
    at = np.where(inside, k + starts[:, None], 0)
    d = np.repeat(wa, 2) - flat[at]
    ok = inside & (d > 0)
    # Below ``EXACT`` the quotients are the engine's ``_peak`` exactly (over 1: the ints).
    b_load = np.fromiter((b.load for b in partners), np.int64, n)[:, None]
    b_cap = np.fromiter((b.capacity for b in partners), np.float64, n)[:, None]
    peak = np.where(ok, np.maximum((a_load - d) / a_capacity, (b_load + d) / b_cap), math.inf)
    best = np.argmin(peak, axis=1)
    rows = np.arange(n)
    found = ok[rows, best].tolist()
    peaks = peak[rows, best].tolist()
    ks = k[rows, best].tolist()
    for r, (hit, p, i2, q) in enumerate(zip(found, peaks, best.tolist(), ks, strict=True)):
        if hit:
            out[r] = (p, i2 // 2, q)
    return out
