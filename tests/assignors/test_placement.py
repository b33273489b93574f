"""The array forms of the placements equal their rules applied one partition at a time:
the least-movement rebalance, and the greedy start leveled to KIP-54 balance."""

from __future__ import annotations

import heapq
import operator
from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from assignors import IncrementalAssignor, TopicPartition, assign
from assignors.engine import snapshot
from assignors.ids import Claims
from assignors.placement import greedy_place, keep_uniform, level_place, subscriber_indexes
from assignors.quality import evaluate, is_balanced
from assignors.spec import GroupSpec, build_spec

from .strategies_hyp import groups


def one_by_one(
    members: list[str], kept: dict[str, list[int]], unowned: list[int]
) -> dict[str, list[int]]:
    """``keep_uniform``'s rule as KIP-54 states it: larger quotas to the members holding
    most (ties: name); members over quota give up their highest; the pool, lowest first,
    each to the member under quota holding fewest (ties: name)."""
    counts = {m: len(kept.get(m, [])) for m in members}
    q, r = divmod(sum(counts.values()) + len(unowned), len(members))
    larger = sorted(members, key=lambda m: (-counts[m], m))[:r]
    quota = {m: q + (m in larger) for m in members}
    pool = list(unowned)
    changed: dict[str, list[int]] = {}
    for m in members:
        extra = counts[m] - quota[m]
        if extra > 0:
            pool += kept[m][-extra:]
            changed[m] = kept[m][:-extra]
    heap = [(counts[m], m) for m in members if counts[m] < quota[m]]
    heapq.heapify(heap)
    for pid in sorted(pool):
        count, m = heapq.heappop(heap)
        changed[m] = [*changed.get(m, kept.get(m, [])), pid]
        if count + 1 < quota[m]:
            heapq.heappush(heap, (count + 1, m))
    return {m: sorted(parts) for m, parts in changed.items()}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_keep_uniform_in_arrays_equals_the_rule_one_partition_at_a_time(
    data: st.DataObject,
) -> None:
    members = sorted(data.draw(st.sets(st.sampled_from([f"m{i}" for i in range(9)]), min_size=1)))
    total = data.draw(st.integers(0, 40))
    order = data.draw(st.permutations(range(total)))
    owners = data.draw(st.lists(st.sampled_from([*members, None]), min_size=total, max_size=total))
    kept: dict[str, list[int]] = {}
    for pid, owner in zip(order, owners, strict=True):
        if owner is not None:
            kept.setdefault(owner, []).append(pid)
    kept = {m: sorted(kept[m]) for m in sorted(kept)}
    unowned = sorted(p for p, o in zip(order, owners, strict=True) if o is None)
    lists = list(kept.values())
    claims = Claims(
        list(kept),
        np.array([p for parts in lists for p in parts], dtype=np.int64),
        np.cumsum([len(parts) for parts in lists], dtype=np.intp),
        {},
    )
    got = keep_uniform(members, claims, np.array(unowned, dtype=np.int64))
    assert got == one_by_one(members, kept, unowned)


def _group_arrays(
    ppt: dict[str, int], subs: dict[str, list[str]]
) -> tuple[GroupSpec, list[NDArray[np.int64]], NDArray[np.int64]]:
    spec = build_spec(ppt, subs)
    sizes = [ppt[t] for t in spec.topics]
    return spec, subscriber_indexes(spec), np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))


def _by_member(spec: GroupSpec, owner: NDArray[np.int64]) -> dict[str, list[TopicPartition]]:
    every = [tp for t in spec.topics for tp in spec.partitions(t)]
    out: dict[str, list[TopicPartition]] = {m: [] for m in spec.members}
    for tp, i in zip(every, owner.tolist(), strict=True):
        out[spec.members[i]].append(tp)
    return out


def _broken_topics(spec: GroupSpec, placed: dict[str, list[TopicPartition]]) -> list[str]:
    """Topics with a holder two or more partitions above one of their subscribers."""
    count = {m: len(parts) for m, parts in placed.items()}
    subscribers = spec.subscribers()
    return [
        t
        for t in spec.topics
        if max(count[m] for m, parts in placed.items() for tp in parts if tp.topic == t)
        >= min(count[m] for m in subscribers[t]) + 2
    ]


def test_subscriber_indexes_list_each_topics_members_ascending() -> None:
    spec = build_spec({"a": 2, "b": 1, "empty": 0}, {"z": ["b", "a"], "y": ["a", "empty", "x"]})
    assert spec.topics == ("a", "b")
    assert [s.tolist() for s in subscriber_indexes(spec)] == [[0, 1], [1]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(uniform=False))
def test_level_place_is_balanced_and_its_first_sweep_is_the_greedy_placement(
    group: tuple[dict[str, int], dict[str, list[str]]],
) -> None:
    ppt, subs = group
    spec, subscribers, offsets = _group_arrays(ppt, subs)
    owner, balanced = level_place(subscribers, offsets, len(spec.members))
    placed = _by_member(spec, owner)
    assert balanced
    assert _broken_topics(spec, placed) == []
    assert sorted(tp for parts in placed.values() for tp in parts) == sorted(
        tp for t in spec.topics for tp in spec.partitions(t)
    )
    for m, parts in placed.items():
        assert {tp.topic for tp in parts} <= spec.topics_of[m]
    greedy, _ = level_place(subscribers, offsets, len(spec.members), max_sweeps=0)
    assert _by_member(spec, greedy) == greedy_place(spec)
    if not _broken_topics(spec, greedy_place(spec)):
        assert placed == greedy_place(spec)  # a balanced greedy start is kept as it is


# Greedy (most constrained topics first) leaves this one unbalanced: "b" goes first, its
# one partition to m0 (lowest name), then "a" reaches m0 again once m2 and m3 have one
# each, and m0 holds two partitions, one of them "b", which m1 (none) could take.
UNEVEN = ({"a": 3, "b": 1}, {"m0": ["a", "b"], "m1": ["b"], "m2": ["a"], "m3": ["a"]})


def test_level_place_fixes_a_greedy_start_that_breaks_the_rule() -> None:
    spec, subscribers, offsets = _group_arrays(*UNEVEN)
    assert _broken_topics(spec, greedy_place(spec)) != []
    owner, balanced = level_place(subscribers, offsets, len(spec.members))
    assert balanced
    assert _broken_topics(spec, _by_member(spec, owner)) == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(uniform=False), data=st.data())
def test_leveling_from_claims_keeps_them_where_balance_allows(
    group: tuple[dict[str, int], dict[str, list[str]]], data: st.DataObject
) -> None:
    """With ``current``, what is kept starts where it was: orphans go to the least loaded
    and only broken topics move. A member whose claim is untouched gets the caller's own
    list back, and a balanced result handed in is kept as it is."""
    ppt, subs = group
    settled = assign("sticky", ppt, subs)
    # Another balanced result (names reversed): kept exactly, as every balanced claim is.
    names = sorted(subs)
    renamed = dict(zip(names, reversed(names), strict=True))
    other = assign("sticky", ppt, {renamed[m]: subs[m] for m in names})
    other = {m: other[renamed[m]] for m in names}
    assert assign("sticky", ppt, subs, current=other) == other
    leaving = data.draw(st.sampled_from(sorted(subs)))
    current = {m: list(parts) for m, parts in settled.items() if m != leaving}
    staying = {m: subs[m] for m in current}
    if not staying:
        return
    got = assign("sticky", ppt, staying, current=current)
    assert is_balanced(got, staying)
    for m, parts in got.items():
        if parts == current[m]:
            assert all(map(operator.is_, parts, current[m]))


def test_sticky_falls_back_to_the_engines_repair_when_leveling_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``max_sweeps`` is a guard that never trips in practice: if it does, the engine's
    partition-by-partition repair still balances the group."""
    give_up = partial(level_place, max_sweeps=0)
    monkeypatch.setattr(snapshot, "level_place", give_up)
    ppt, subs = UNEVEN
    unbalanced = {"m0": [TopicPartition("b", 0), TopicPartition("a", 2)], "m2": [], "m3": []}
    for got in (
        assign("sticky", ppt, subs),
        assign("sticky", ppt, subs, current=unbalanced),
        IncrementalAssignor.from_snapshot(ppt, subs)[0].assignment(),
    ):
        assert evaluate(got, ppt, subs).balanced
