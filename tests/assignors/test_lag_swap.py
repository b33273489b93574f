"""The lag search's exchange in array passes picks the pair its per-partition loop
picks: same peak, same partitions, ties broken alike."""

from __future__ import annotations

import random

import pytest

from assignors import IncrementalAssignor, LagUpdated, MemberJoined, TopicPartition
from assignors.engine import _SWAP_CANDIDATES, _even_share, _peak, _peak_floor
from assignors.ids import LAG_SHIFT
from assignors.lag_swap import EXACT, exact, lags_of, nearest_swap


def engine(seed: int, capacities: bool) -> IncrementalAssignor:
    rng = random.Random(seed)
    ppt = {"t": 60, "u": 40}
    eng = IncrementalAssignor(ppt)
    eng.apply(
        [
            MemberJoined(
                f"m{i}", frozenset(ppt), capacity=rng.choice((1, 2, 2.5)) if capacities else None
            )
            for i in range(rng.randint(2, 9))
        ]
    )
    # Few distinct lags, so that many exchanges tie on their peak.
    top = rng.choice((3, 50, 5000))
    eng.apply(
        [
            LagUpdated(
                {
                    TopicPartition(t, p): rng.randint(0, top)
                    for t, n in ppt.items()
                    for p in range(n)
                }
            )
        ]
    )
    return eng


@pytest.mark.parametrize("capacities", [False, True])
def test_arrays_pick_the_loops_pair(capacities: bool) -> None:
    compared = 0
    for seed in range(60):
        eng = engine(seed, capacities)
        members = [eng._members[n] for n in sorted(eng._members)]
        for a in members:
            a_top = eng._entries(a)[-_SWAP_CANDIDATES:]
            for b in members:
                if b is a or b.load() >= a.load():
                    continue
                half = _even_share(a, b)
                loop = eng._best_swap(a, b, a_top, half=half, beat=a.load(), floor=-float("inf"))
                arrays = eng._swap_in_arrays(
                    a, b, a_top, lags_of(a_top, LAG_SHIFT), half=half, beat=a.load()
                )
                assert arrays == loop, (seed, a.name, b.name)
                compared += loop is not None
    assert compared > 500


def test_exact_bounds_the_sum_of_loads() -> None:
    assert exact(EXACT // 2, EXACT // 2 - 1)
    assert not exact(EXACT // 2, EXACT // 2)


def test_nothing_to_exchange() -> None:
    assert nearest_swap([], [1, 2], 1.0, (0, 3), (1, 1)) is None
    # Every q is at least as heavy as every p: no exchange moves lag from a to b.
    assert nearest_swap([1, 2], [5, 9], 0.5, (3, 14), (1, 1)) is None
    # Half the gap is 3: 6 - 3 and 7 - 4 both reach it; the first p wins.
    assert nearest_swap([5, 6, 7], [3, 4, 5], 3.0, (18, 12), (1, 1)) == (15, 1, 0)


@pytest.mark.parametrize("capacities", [False, True])
def test_the_peak_floor_is_the_least_peak(capacities: bool) -> None:
    """The search prunes on ``_peak_floor``: above the true least peak it would skip the
    best exchange, below it never stop early."""
    for seed in range(20):
        eng = engine(seed, capacities)
        members = list(eng._members.values())
        for a in members:
            for b in members:
                if b is a or b.load() >= a.load():
                    continue
                least = min(_peak(a, b, d) for d in range(a.lag + 1))
                assert _peak_floor(a, b, _even_share(a, b)) == least
