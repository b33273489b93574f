"""The lag search's exchange in array passes picks the pair its per-partition loop
picks: same peak, same partitions, ties broken alike."""

from __future__ import annotations

import math
import random
from functools import partial

import numpy as np
import pytest
from numpy.typing import NDArray

from assignors import IncrementalAssignor, LagUpdated, MemberJoined, TopicPartition
from assignors.engine.lag_search import SWAP_CANDIDATES, even_share
from assignors.lag_swap import EXACT, MAX_PARTNERS, Partner, exact, nearest_swaps


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
    """Each partner's pair, searched alone and together with all the others."""
    compared = 0
    for seed in range(60):
        eng = engine(seed, capacities)
        members = [eng._members[n] for n in sorted(eng._members)]
        kept: dict[str, NDArray[np.int64]] = {}
        for a in members:
            a_top = eng._entries(a)[-SWAP_CANDIDATES:]
            lighter = [b for b in members if b is not a and b.load() < a.load()]
            loops = {
                b.name: eng._best_swap(
                    a, b, a_top, half=even_share(a, b), beat=math.inf, floor=-math.inf
                )
                for b in lighter
            }
            # ``kept`` carries members' lag arrays from one ``a`` to the next, as the
            # search keeps them from step to step; each lone search makes its own.
            together = eng._swaps_in_arrays(a, a_top, lighter, kept)
            alone = {b.name: eng._swaps_in_arrays(a, a_top, [b], {})[b.name] for b in lighter}
            assert together == alone == loops, (seed, a.name)
            compared += sum(found is not None for found in loops.values())
    assert compared > 500


def test_exact_bounds_the_sum_of_loads() -> None:
    assert exact(EXACT // 2, EXACT // 2 - 1)
    assert not exact(EXACT // 2, EXACT // 2)


def test_nothing_to_exchange() -> None:
    assert nearest_swaps([], 0, 1, [Partner([1, 2], 1.0, 3, 1)]) == [None]
    assert nearest_swaps([1, 2], 3, 1, [Partner([], 0.5, 0, 1)]) == [None]
    # Every q is at least as heavy as every p: no exchange moves lag from a to b.
    assert nearest_swaps([1, 2], 3, 1, [Partner([5, 9], 0.5, 14, 1)]) == [None]


def test_partners_are_searched_apart() -> None:
    # Half the gap is 3: 6 - 3 and 7 - 4 both reach it; the first p wins. The partner
    # without lags, and the one whose lags are all heavier, change nothing for it.
    partners = [
        Partner([3, 4, 5], 3.0, 12, 1),
        Partner([], 9.0, 0, 1),
        Partner([50, 60], 0.5, 110, 1),
        Partner([0, 1, 6], 4.5, 9, 2),
    ]
    found = nearest_swaps([5, 6, 7], 18, 1, partners)
    assert found[:3] == [(15, 1, 0), None, None]
    # Capacity 2: 7 <-> 1 leaves max(18 - 6, (9 + 6) / 2) = 12, the lowest.
    assert found[3] == (12.0, 2, 1)
    assert nearest_swaps([5, 6, 7], 18, 1, partners[3:]) == found[3:]
    # Lags as int64 arrays (as the engine keeps them between steps) or as lists: alike.
    arrays = [b._replace(lags=np.array(b.lags, dtype=np.int64)) for b in partners]
    assert nearest_swaps(np.array([5, 6, 7], dtype=np.int64), 18, 1, arrays) == found


def test_lags_near_the_exact_bound_stay_apart() -> None:
    """Partner keys are ``partner << 53 | lag``: with lags close to ``EXACT`` (too close
    for a narrower shift) every partner still finds what it finds searched alone."""
    rng = random.Random(7)
    top = EXACT // 2
    # The lag that evens a partner out, and so the lag searched for, is near 2**51.
    a_lags = [rng.randrange(top - 2**40, top)]
    partners = []
    for _ in range(MAX_PARTNERS - 1):
        lags = sorted(rng.randrange(2**40) for _ in range(rng.randint(0, 4)))
        partners.append(Partner(lags, (sum(a_lags) - sum(lags)) / 2, sum(lags), 1))
    assert exact(sum(a_lags), max(p.load for p in partners))
    together = nearest_swaps(a_lags, sum(a_lags), 1, partners)
    alone = [nearest_swaps(a_lags, sum(a_lags), 1, [p])[0] for p in partners]
    assert together == alone
    assert sum(found is not None for found in together) > 500


def test_lag_arrays_kept_between_steps_give_the_searchs_moves() -> None:
    """The search keeps members' lag arrays from step to step and drops the two a step
    changed: the same moves as a search that rebuilds every array at every step."""
    compared = 0
    for seed in range(40):
        kept, rebuilt = engine(seed, False), engine(seed, False)
        rebuilt._lag_array = partial(  # type: ignore[method-assign]
            lambda m, lags, fresh: fresh(m, {}), fresh=rebuilt._lag_array
        )
        rng = random.Random(seed)
        for _ in range(3):
            hot = {
                TopicPartition(t, p): rng.randint(0, 50_000)
                for t, n in kept.partitions_per_topic.items()
                for p in rng.sample(range(n), n // 3)
            }
            a, b = kept.apply([LagUpdated(hot)]), rebuilt.apply([LagUpdated(hot)])
            assert a == b, seed
            compared += a.moved_for_lag
        assert kept.assignment() == rebuilt.assignment()
    assert compared > 100
