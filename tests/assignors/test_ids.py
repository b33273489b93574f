"""Partition ids: the bulk conversions agree with the item-by-item rules, and the engine
keeps no per-partition object alive."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors import (
    STRATEGIES,
    IncrementalAssignor,
    LagUpdated,
    MemberJoined,
    PartitionsChanged,
    TopicPartition,
    assign,
)
from assignors.ids import PART_BITS, TopicIds, as_entry, sort_runs, valid_claims, with_rank
from assignors.placement import heaviest_first_order
from assignors.spec import build_spec

from .strategies_hyp import groups, messy_current

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data())
def test_well_formed_claims_read_in_bulk_equal_the_item_by_item_reading(
    data: st.DataObject,
) -> None:
    ppt, subs = data.draw(groups())
    messy = data.draw(messy_current(ppt, list(subs)))
    spec = build_spec(ppt, subs)
    # Only valid partitions of subscribed topics, double claims kept: the bulk path takes
    # these when they are TopicPartitions and goes item by item when they are tuples.
    valid = {
        m: [(t, p) for t, p in parts if m in subs and t in subs[m] and 0 <= p < ppt.get(t, 0)]
        for m, parts in messy.items()
    }
    as_tps = {m: [TopicPartition(t, p) for t, p in parts] for m, parts in valid.items()}
    assert valid_claims(spec, as_tps) == valid_claims(spec, valid)
    # A malformed entry is a caller bug, named; a stale one (a vanished partition) is not.
    # (A departed member's claims are not read at all.)
    present = sorted(m for m in as_tps if m in subs)
    if present:
        first = present[0]
        spoiled: dict[str, list[object]] = {m: list(parts) for m, parts in as_tps.items()}
        spoiled[first].append(("t0", "x"))
        with pytest.raises(TypeError, match=rf"current\[{first!r}\]: \('t0', 'x'\)"):
            valid_claims(spec, spoiled)  # type: ignore[arg-type]
        spoiled[first][-1] = ("t0", 10**6)
        assert valid_claims(spec, spoiled) == valid_claims(spec, as_tps)  # type: ignore[arg-type]


def test_a_double_claim_stays_with_the_claimant_holding_fewer() -> None:
    spec = build_spec({"t": 4}, {"a": ["t"], "b": ["t"]})
    tp = TopicPartition
    current = {"a": [tp("t", 0), tp("t", 1), tp("t", 2)], "b": [tp("t", 2)]}
    assert valid_claims(spec, current) == {"a": [tp("t", 0), tp("t", 1)], "b": [tp("t", 2)]}


def test_kept_claims_come_back_as_new_lists_with_the_callers_partitions() -> None:
    ppt = {"t": 6}
    subs = {"a": ["t"], "b": ["t"], "c": ["t"]}
    first = assign("sticky", ppt, subs)
    again = assign("sticky", ppt, subs, current=first)
    assert again == first
    for member, parts in again.items():
        assert parts is not first[member]  # the caller's lists are never handed back
        parts.append(TopicPartition("t", 99))
        assert TopicPartition("t", 99) not in first[member]


@pytest.mark.parametrize(
    ("lag", "error", "names"),
    [
        ({("t", "x"): 5}, TypeError, "('t', 'x')"),
        ({"t0": 5}, TypeError, "'t0'"),
        ({TopicPartition("t", -1): 5}, ValueError, "partition"),
        ({TopicPartition("t", 0): True}, TypeError, "True"),
        ({TopicPartition("t", 0): -3}, ValueError, "-3"),
    ],
)
def test_bad_lag_is_refused_naming_the_entry(
    lag: dict[object, object], error: type[Exception], names: str
) -> None:
    for strategy in STRATEGIES:  # even the strategies that ignore lag refuse bad lag
        with pytest.raises(error, match="lag") as raised:
            assign(strategy, {"t": 2}, {"a": ["t"]}, lag=lag)  # type: ignore[arg-type]
        assert names in str(raised.value), strategy
    eng = IncrementalAssignor({"t": 2})
    with pytest.raises(error):
        eng.apply([LagUpdated(lag)])  # type: ignore[arg-type]


def test_topics_first_seen_out_of_order_still_come_out_sorted() -> None:
    eng = IncrementalAssignor({"zeta": 3})
    eng.apply([MemberJoined("a", frozenset({"zeta"}))])
    eng.apply([LagUpdated({TopicPartition("alpha", 1): 500})])  # a topic known first from lag
    eng.apply([MemberJoined("b", frozenset({"alpha", "zeta"}))])
    eng.apply([PartitionsChanged("alpha", 2)])
    for parts in eng.assignment().values():
        assert parts == sorted(parts)
    owned = sorted(tp for parts in eng.assignment().values() for tp in parts)
    assert owned == [
        *(TopicPartition("alpha", p) for p in range(2)),
        *(TopicPartition("zeta", p) for p in range(3)),
    ]
    assert eng.lag() == {TopicPartition("alpha", 1): 500}
    assert eng.owner_of(TopicPartition("alpha", 1)) in {"a", "b"}
    assert eng.owner_of(TopicPartition("nowhere", 0)) is None
    assert TopicIds(["b", "a"]).in_order is False


def _tracked_after_build(partitions: int) -> int:
    ppt = {f"t{i}": partitions // 4 for i in range(4)}
    subs = {f"m{i:02d}": list(ppt) for i in range(20)}
    lag = {TopicPartition(t, p): p % 97 for t, n in ppt.items() for p in range(n)}
    gc.collect()
    before = len(gc.get_objects())
    eng, _ = IncrementalAssignor.from_snapshot(ppt, subs, lag=lag)
    gc.collect()
    tracked = len(gc.get_objects()) - before
    del eng
    return tracked


def test_the_engine_keeps_no_collector_tracked_object_per_partition() -> None:
    """Partitions live as ints inside the engine: a hundred times more partitions must not
    mean more objects for the cyclic collector to walk (that walk was a multi-second pause
    after every build at a million partitions)."""
    small, large = _tracked_after_build(400), _tracked_after_build(40_000)
    assert large - small < 100, (small, large)


@pytest.mark.parametrize("big", [False, True])
def test_the_heaviest_first_order_is_a_stable_sort_by_decreasing_lag(big: bool) -> None:
    """Lag that fits in int64 sorts as int64, larger lag as Python ints in an object
    array: both must give the same order."""
    scale = 2**70 if big else 1
    weights = [5 * scale, 1 * scale, 5 * scale, 0, 9 * scale, 1 * scale]
    assert heaviest_first_order(weights) == [4, 0, 2, 1, 5, 3]
    assert heaviest_first_order([7, 7, 7]) is None


def test_lag_beyond_int64_still_assigns_every_partition() -> None:
    ppt = {"t": 8}
    subs = {"a": ["t"], "b": ["t"]}
    lag = {TopicPartition("t", p): (p + 1) * 2**70 for p in range(8)}
    result = assign("lagsticky", ppt, subs, lag=lag)
    assert sorted(tp for parts in result.values() for tp in parts) == [
        TopicPartition("t", p) for p in range(8)
    ]
    assert abs(len(result["a"]) - len(result["b"])) <= 1


def test_interned_partitions_are_shared_objects_and_follow_new_partitions() -> None:
    eng = IncrementalAssignor({"t": 4})
    eng.apply([MemberJoined("a", frozenset({"t"}))])
    assert eng.partitions_of("a")[0] is not eng.partitions_of("a")[0]  # default: fresh
    eng.intern_partitions()
    first = eng.partitions_of("a")
    change = eng.apply([PartitionsChanged("t", 6), MemberJoined("b", frozenset({"t"}))])
    both = eng.partitions_of("a") + eng.partitions_of("b")
    # The change's lists (gathered from an array of them) hold the same objects.
    assert all(x is y for x, y in zip(change.assignments["b"], eng.partitions_of("b"), strict=True))
    assert sorted(both) == [TopicPartition("t", p) for p in range(6)]
    shared = {id(tp) for tp in first}
    assert {id(tp) for tp in both if tp in first} == shared


def claims_by_the_rule(
    ppt: dict[str, int], subs: dict[str, list[str]], current: dict[str, list[tuple[str, int]]]
) -> dict[str, list[TopicPartition]]:
    """``TopicIds.claims`` written out: valid claims of subscribed members, distinct and
    sorted; a partition claimed twice stays with the claimant holding fewer (ties: id)."""
    valid = {
        m: sorted(
            {TopicPartition(t, p) for t, p in parts if t in subs[m] and 0 <= p < ppt.get(t, 0)}
        )
        for m, parts in current.items()
        if m in subs
    }
    winner: dict[TopicPartition, str] = {}
    for m in sorted(valid):
        for tp in valid[m]:
            other = winner.get(tp)
            if other is None or (len(valid[m]), m) < (len(valid[other]), other):
                winner[tp] = m
    kept = {m: [tp for tp in parts if winner[tp] == m] for m, parts in valid.items()}
    return {m: parts for m, parts in sorted(kept.items()) if parts}


@SETTINGS
@given(data=st.data())
def test_claims_follow_the_rule_written_out(data: st.DataObject) -> None:
    ppt, subs = data.draw(groups())
    messy = data.draw(messy_current(ppt, list(subs)))
    shuffled = {m: data.draw(st.permutations(parts)) for m, parts in messy.items()}
    as_tps = {m: [TopicPartition(t, p) for t, p in parts] for m, parts in shuffled.items()}
    expected = claims_by_the_rule(ppt, subs, shuffled)
    assert valid_claims(build_spec(ppt, subs), as_tps) == expected
    assert valid_claims(build_spec(ppt, subs), shuffled) == expected


@SETTINGS
@given(
    runs=st.lists(
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**31 - 1)), unique=True, max_size=8),
        max_size=12,
    ),
    wide=st.booleans(),
)
def test_sort_runs_sorts_within_each_run_and_keeps_the_runs_in_place(
    runs: list[list[tuple[int, int]]], wide: bool
) -> None:
    """The combined-key sort equals a ``lexsort``; ``wide`` topic ids (up to 2**30)
    make the key overflow 63 bits, which must take the ``lexsort`` instead."""
    scale = 1 << 28 if wide else 1
    pids = [((t * scale) << PART_BITS) | p for run in runs for t, p in run]
    run = np.repeat(np.arange(len(runs), dtype=np.int64), [len(r) for r in runs])
    got = sort_runs(np.array(pids, dtype=np.int64), run).tolist()
    want = [pid for _, pid in sorted(zip(run.tolist(), pids, strict=True))]
    assert got == want


@given(
    st.lists(
        st.tuples(st.integers(0, 2**70), st.integers(0, 2**40), st.integers(0, 2**64 - 1)),
        max_size=30,
    )
)
def test_an_entry_with_a_rank_sorts_as_the_tuple_of_weight_rank_and_pid(
    rows: list[tuple[int, int, int]],
) -> None:
    keys = [with_rank(as_entry(weight, pid), rank) for weight, rank, pid in rows]
    assert sorted(range(len(rows)), key=keys.__getitem__) == sorted(
        range(len(rows)), key=rows.__getitem__
    )
