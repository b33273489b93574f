"""``rack_counts.retarget``: whatever it moves leaves a valid, KIP-54-balanced placement
with fewer partitions off their racks."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from assignors import assign
from assignors.quality import imbalances, problems
from assignors.rack_counts import Group, Kind, by_class, off_rack, retarget
from assignors.types import TopicPartition

RACKS = ["a", "b", "c"]


def _group(seed: int) -> tuple[Group, dict[str, list[str]], dict[str, int]]:
    """A rack-blind ``sticky`` placement of a random mixed group, as ``retarget`` reads it
    (a partition is ``topic * 100 + partition``)."""
    rng = random.Random(seed)
    names = [f"m{i}" for i in range(rng.randint(2, 7))]
    rack = {m: rng.choice([None, *RACKS]) for m in names}
    subs = {m: sorted(rng.sample(["t0", "t1", "t2", "t3"], rng.randint(1, 3))) for m in names}
    ppt = {t: rng.randint(1, 6) for t in sorted({t for ts in subs.values() for t in ts})}
    layout = {
        int(t[1:]) * 100 + p: frozenset(rng.sample(RACKS, rng.randint(0, 2)))
        for t, n in ppt.items()
        for p in range(n)
    }
    blind = assign("sticky", ppt, subs)
    held = {m: [int(tp.topic[1:]) * 100 + tp.partition for tp in tps] for m, tps in blind.items()}
    kinds: dict[Kind, list[str]] = {}
    for m in names:
        kinds.setdefault((frozenset(int(t[1:]) for t in subs[m]), rack[m]), []).append(m)
    group = Group(
        by_class(sorted(layout), lambda p: p // 100, layout.__getitem__),
        list(kinds),
        list(kinds.values()),
        held,
    )
    return group, subs, ppt


def _cost(group: Group, held: Mapping[str, Sequence[int]]) -> int:
    layout = {p: c[1] for c, ps in group.classes.items() for p in ps}
    kind = {m: k for k, ms in zip(group.kinds, group.members, strict=True) for m in ms}
    return sum(off_rack(kind[m], layout[p]) for m, ps in held.items() for p in ps)


@pytest.mark.parametrize("seed", range(300))
def test_what_retarget_moves_stays_valid_balanced_and_places_more(seed: int) -> None:
    group, subs, ppt = _group(seed)
    moves = retarget(group)
    assert moves is not None  # small enough to judge
    after: dict[str, list[int]] = {m: [] for m in group.held}
    for m, ps in group.held.items():
        for p in ps:
            after[moves.get(p, m)].append(p)
    tps = {m: [TopicPartition(f"t{p // 100}", p % 100) for p in ps] for m, ps in after.items()}
    assert problems(tps, ppt, subs) == []
    assert imbalances(tps, subs) == []
    if moves:
        assert _cost(group, after) < _cost(group, group.held)
        assert all(group.held[m] != after[m] for m in set(moves.values()))


def test_retarget_finds_what_rack_blind_placements_leave() -> None:
    """The search is not idle: from rack-blind placements it lowers most groups' count."""
    improved = sum(bool(retarget(_group(seed)[0])) for seed in range(100))
    assert improved > 50
