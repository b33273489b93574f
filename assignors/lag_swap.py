"""The lag search's exchange between two members, as array passes.

``IncrementalAssignor._best_swap`` looks for the partitions p (of the member with the most
lag) and q (of a lighter one) whose exchange leaves the lower peak. Its loop bisects
the lighter member's lags once per candidate p; for members whose exchange has no
topic or pin restriction this module does the same search over NumPy arrays, with the
loop's result: the first pair, in the loop's order, at the lowest peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Lags and sums of lags up to here are exact in float64 as in int64; above it the loop
#: in ``engine.py`` decides.
EXACT = 1 << 53


def lags_of(entries: Sequence[int], shift: int) -> list[int]:
    return [e >> shift for e in entries]


def exact(*loads: int) -> bool:
    """Whether members with these lags (each the sum of its partitions') can be searched
    here."""
    return sum(loads) < EXACT


def nearest_swap(
    a_lags: Sequence[int],
    b_lags: Sequence[int],
    half: float,
    loads: tuple[int, int],
    capacities: tuple[float, float],
) -> tuple[float, int, int] | None:
    """(peak, index into ``a_lags``, index into ``b_lags``) of the exchange p <-> q with
    lag(p) > lag(q) and lag(p) - lag(q) nearest ``half`` from either side, at the
    lowest peak; ties go to the lowest p, then the lighter q. Both lag lists ascend.

    None when no exchange moves lag from a to b. Every lag and load is below ``EXACT``
    (``exact``).
    """
    a_load, b_load = loads
    if not a_lags or not b_lags:
        return None
    wa = np.array(a_lags, dtype=np.int64)
    wb = np.array(b_lags, dtype=np.int64)
    # As the loop's bisect: the first q whose lag is at least lag(p) - half, and the one
    # before it.
    wanted = np.maximum(np.ceil(wa - half), 0).astype(np.int64)
    j = np.searchsorted(wb, wanted, side="left")
    k = np.stack((j - 1, j), axis=1).ravel()
    inside = (k >= 0) & (k < len(wb))
    k = np.where(inside, k, 0)
    d = np.repeat(wa, 2) - wb[k]
    ok = inside & (d > 0)
    # Below ``EXACT`` the quotients are the engine's ``_peak`` exactly (over 1: the ints).
    ca, cb = capacities
    peak = np.where(ok, np.maximum((a_load - d) / ca, (b_load + d) / cb), math.inf)
    best = int(np.argmin(peak))
    if not ok[best]:
        return None
    return peak[best].item(), best // 2, int(k[best])
