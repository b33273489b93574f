"""The incremental engine against the one-shot ``assign`` over random event sequences."""

from __future__ import annotations

import gc
import random
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors import (
    Change,
    IncrementalAssignor,
    LagPolicy,
    LagTrigger,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionsChanged,
    SubscriptionChanged,
    TopicPartition,
    assign,
)
from assignors.engine import repair as engine_repair
from assignors.events import Event
from assignors.ids import pid_of
from assignors.quality import is_balanced, minimal_movement_uniform, movement, problems

from .strategies_hyp import MEMBERS, TOPICS

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def event_runs(draw: st.DrawFn, *, uniform: bool) -> list[object]:
    topics = TOPICS[:3]
    events: list[object] = []
    for _ in range(draw(st.integers(5, 40))):
        kind = draw(st.sampled_from(["join", "join", "leave", "sub", "parts", "lag"]))
        member = draw(st.sampled_from(MEMBERS))
        if kind == "join":
            subs = topics if uniform else draw(st.lists(st.sampled_from(topics), unique=True))
            events.append(MemberJoined(member, frozenset(subs)))
        elif kind == "leave":
            events.append(MemberLeft(member))
        elif kind == "sub" and not uniform:
            events.append(
                SubscriptionChanged(
                    member, frozenset(draw(st.lists(st.sampled_from(topics), unique=True)))
                )
            )
        elif kind == "parts":
            events.append(
                PartitionsChanged(draw(st.sampled_from(topics)), draw(st.integers(0, 12)))
            )
        elif kind == "lag":
            lag = {
                TopicPartition(t, p): draw(st.integers(0, 50_000))
                for t in topics
                for p in draw(st.lists(st.integers(0, 11), max_size=4))
            }
            events.append(LagUpdated(lag))
    return events


def holders_agree(eng: IncrementalAssignor) -> None:
    """The engine's owner array and its members' lists say what its owner map says,
    partition for partition (a lag update reads holders from the array)."""
    pids = list(eng._owner)
    slots = eng._holder_slots.gather(np.array(pids, dtype=np.int64)).tolist()
    assert [eng._slot_names[s] for s in slots] == [eng._owner[p] for p in pids]
    assert sum(int((block >= 0).sum()) for _, block in eng._holder_slots.blocks()) == len(pids)
    # Every member's list, kept in step move by move once listed, is what the owner map
    # says it holds.
    owned: dict[str, list[TopicPartition]] = {m: [] for m in eng._members}
    for pid, m in eng._owner.items():
        owned[m].append(eng._ids.tp(pid))
    assert eng.assignment() == {m: sorted(tps) for m, tps in owned.items()}


def deltas_apply(before: dict[str, list[TopicPartition]], change: Change) -> None:
    """Each listed member's ``Delta`` turns its list before the step into its new one:
    it loses only what it held and gains only what it did not."""
    assert change.deltas.keys() == change.assignments.keys()
    for m, (gained, lost) in change.deltas.items():
        held = set(before.get(m, []))
        assert lost <= held, m
        assert gained.isdisjoint(held), m
        assert (held - lost) | gained == set(change.assignments[m]), m


def _replay(uniform: bool, events: list[object], lag_aware: bool, interned: bool) -> None:
    eng = IncrementalAssignor({t: 4 for t in TOPICS[:3]}, lag_aware=lag_aware)
    if interned:  # members' lists are then kept in step move by move
        eng.intern_partitions()
    shadow: dict[str, list[TopicPartition]] = {}
    for event in events:
        before = eng.assignment()
        subs_before = eng.members
        change = eng.apply([event])  # type: ignore[list-item]
        after = eng.assignment()
        subs = eng.members
        ppt = eng.partitions_per_topic
        assert problems(after, ppt, subs) == []
        assert is_balanced(after, subs)
        holders_agree(eng)
        # The change record is exactly the difference: replaying it reproduces the state.
        for m in change.removed:
            shadow.pop(m, None)
        shadow.update(change.assignments)
        assert shadow == after
        # ... and it lists no member whose partitions are what they were.
        assert [m for m, parts in change.assignments.items() if before.get(m) == parts] == []
        deltas_apply(before, change)
        assert change.moved == movement(before, after, subs)
        # One-shot assign from the previous state must satisfy the same guarantees.
        oneshot = assign(
            "lagsticky" if lag_aware else "sticky", ppt, subs, current=before, lag=eng.lag()
        )
        assert problems(oneshot, ppt, subs) == []
        assert is_balanced(oneshot, subs)
        if uniform and not lag_aware:
            kept = {
                m: [tp for tp in v if tp.partition < ppt.get(tp.topic, 0)]
                for m, v in before.items()
                if m in subs
            }
            floor = minimal_movement_uniform(
                kept, list(subs), sum(ppt.get(t, 0) for t in TOPICS[:3]) if subs else 0
            )
            assert change.moved == floor == movement(before, oneshot, subs)
        del subs_before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_runs(uniform=True), lag_aware=st.booleans(), interned=st.booleans())
def test_uniform_event_sequences(events: list[object], lag_aware: bool, interned: bool) -> None:
    _replay(True, events, lag_aware, interned)


@SETTINGS
@given(events=event_runs(uniform=False), lag_aware=st.booleans(), interned=st.booleans())
def test_mixed_event_sequences(events: list[object], lag_aware: bool, interned: bool) -> None:
    _replay(False, events, lag_aware, interned)


@SETTINGS
@given(events=event_runs(uniform=True), lag_aware=st.booleans())
def test_orphans_dealt_at_once_as_one_at_a_time(events: list[object], lag_aware: bool) -> None:
    """With identical subscriptions orphans are dealt from a heap of the first members
    of the load index; each change is what placing them one at a time gives, but for
    which of a run of equal lag each receiver takes (grouped by their last holder,
    ``test_a_mass_leave_gives_each_receiver_the_partitions_of_one_or_two_leavers``)."""
    ppt = {t: 4 for t in TOPICS[:3]}
    dealt = IncrementalAssignor(ppt, lag_aware=lag_aware)
    placed = IncrementalAssignor(ppt, lag_aware=lag_aware)
    placed._deal_orphans = lambda orphans, _: placed._place_one_by_one(orphans)  # type: ignore[method-assign,assignment]
    with mock.patch.object(engine_repair, "_hand_out", _in_dealing_order):
        for event in events:
            assert dealt.apply([event]) == placed.apply([event])  # type: ignore[list-item]


def _in_dealing_order(run: list[int], takers: list[str], _before: object) -> dict[str, list[int]]:
    """Each orphan of a run to the receiver dealt it, as one at a time places them."""
    out: dict[str, list[int]] = {}
    for pid, name in zip(run, takers, strict=True):
        out.setdefault(name, []).append(pid)
    return out


def test_a_mass_leave_gives_each_receiver_the_partitions_of_one_or_two_leavers() -> None:
    """Half of 100 members leave at once: the 50 receivers each take 100 partitions,
    from at most two leavers each (dealt one at a time, each took one from each of about
    fifty). A leaver that hands its partitions off releases them at its own pace, and a
    receiver waits for every holder its share came from."""
    members = [f"m{i:03d}" for i in range(100)]
    # Each member's partitions scattered over the topic, as joins in waves leave them.
    order = list(range(10_000))
    random.Random(7).shuffle(order)
    spread = {m: [TopicPartition("t", p) for p in order[i::100]] for i, m in enumerate(members)}
    eng, _ = IncrementalAssignor.from_snapshot(
        {"t": 10_000}, {m: ["t"] for m in members}, current=spread
    )
    before = eng.assignment()
    holder = {tp: m for m, parts in before.items() for tp in parts}
    change = eng.apply([MemberLeft(m) for m in members[50:]])
    assert change.moved == 0
    assert sorted(map(len, eng.assignment().values())) == [200] * 50
    for m in members[:50]:
        gained = set(eng.assignment()[m]) - set(before[m])
        assert len(gained) == 100
        assert len({holder[tp] for tp in gained}) <= 2, m


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_runs(uniform=False), lag_aware=st.booleans(), in_order=st.booleans())
def test_interned_partitions_give_the_same_changes(
    events: list[object], lag_aware: bool, in_order: bool
) -> None:
    """The controller's engine hands out shared partition objects, converted in array
    passes; the changes are the plain engine's, with topic ids in name order or not."""
    first = TOPICS[:3] if in_order else TOPICS[2:3]  # the others come later
    plain = IncrementalAssignor({t: 4 for t in first}, lag_aware=lag_aware)
    shared = IncrementalAssignor({t: 4 for t in first}, lag_aware=lag_aware)
    shared.intern_partitions()
    later: list[object] = [PartitionsChanged(t, 4) for t in TOPICS[:2] if t not in first]
    for event in later + events:
        assert shared.apply([event]) == plain.apply([event])  # type: ignore[list-item]
        assert shared.assignment() == plain.assignment()
    assert shared._ids.in_order == in_order


def test_more_orphans_than_members() -> None:
    """Thirty new partitions for three members: each takes ten, as one at a time."""
    eng, _ = IncrementalAssignor.from_snapshot({"t": 30}, {f"m{i}": ["t"] for i in range(3)})
    change = eng.apply([PartitionsChanged("t", 60)])
    assert sorted(change.assignments) == ["m0", "m1", "m2"]
    assert [len(v) for v in change.assignments.values()] == [20, 20, 20]
    assert change.moved == 0


def test_a_change_lists_exactly_the_members_whose_partitions_differ() -> None:
    """Within one apply a partition may vanish and come back, or move and move back:
    only the net difference is a change."""
    eng, _ = IncrementalAssignor.from_snapshot({"t": 6, "u": 4}, {"a": ["t", "u"], "b": ["u"]})
    steps: list[list[Event]] = [
        # t shrinks and grows back in one step: only a subscribes, so a gets back its own.
        [PartitionsChanged("t", 2), PartitionsChanged("t", 6)],
        [PartitionsChanged("u", 2), PartitionsChanged("u", 4)],  # u's come back, anywhere
        [PartitionsChanged("u", 1)],  # the holders of what vanished, and nobody else
        [
            MemberJoined("c", frozenset({"u"})),
            MemberLeft("c"),
        ],  # in and out before the step settles
    ]
    for events in steps:
        before = eng.assignment()
        change = eng.apply(events)
        after = eng.assignment()
        assert change.assignments == {m: v for m, v in after.items() if v != before.get(m)}
        deltas_apply(before, change)
        assert change.moved == 0
    assert eng.apply([PartitionsChanged("t", 2), PartitionsChanged("t", 6)]).assignments == {}


def test_join_batch_coalesces_into_one_change() -> None:
    eng = IncrementalAssignor({"t": 12})
    change = eng.apply([MemberJoined(f"m{i}", frozenset({"t"})) for i in range(4)])
    assert sorted(change.assignments) == ["m0", "m1", "m2", "m3"]
    assert [len(v) for v in change.assignments.values()] == [3, 3, 3, 3]
    assert change.moved == 0


def test_leave_moves_only_the_leavers_partitions() -> None:
    eng, _ = IncrementalAssignor.from_snapshot({"t": 100}, {f"m{i}": ["t"] for i in range(10)})
    before = eng.assignment()
    change = eng.apply([MemberLeft("m3")])
    assert change.removed == frozenset({"m3"})
    assert change.moved == 0
    # m3's ten partitions go to the nine others: each gains one or two, nobody else changes.
    assert sorted(change.assignments) == sorted(m for m in before if m != "m3")
    for m, now in change.assignments.items():
        assert set(before[m]) <= set(now)
        assert set(now) - set(before[m]) <= set(before["m3"])


def test_rejoin_is_a_subscription_change_not_a_duplicate() -> None:
    eng = IncrementalAssignor({"t": 4, "u": 4})
    eng.apply([MemberJoined("a", frozenset({"t", "u"})), MemberJoined("b", frozenset({"t", "u"}))])
    change = eng.apply([MemberJoined("a", frozenset({"t"}))])
    assert eng.members == {"a": frozenset({"t"}), "b": frozenset({"t", "u"})}
    assert all(tp.topic == "t" for tp in eng.partitions_of("a"))
    assert "a" in change.assignments


def test_lag_update_within_hysteresis_moves_nothing() -> None:
    ppt = {"t": 8}
    subs = {"a": ["t"], "b": ["t"]}
    eng, _ = IncrementalAssignor.from_snapshot(
        ppt, subs, lag={TopicPartition("t", p): 10_000 for p in range(8)}
    )
    # +20 % on one member's lag: below the 1.25 trigger ratio, no reshuffle.
    bump = {tp: 12_000 for tp in eng.partitions_of("a")[:1]}
    change = eng.apply([LagUpdated(bump)])
    assert change.moved == 0
    assert change.assignments == {}


def test_lag_spike_is_rebalanced_with_count_balance_kept() -> None:
    ppt = {"t": 8}
    subs = {"a": ["t"], "b": ["t"]}
    eng, _ = IncrementalAssignor.from_snapshot(ppt, subs)
    spike = {tp: 100_000 for tp in eng.partitions_of("a")[:2]}
    change = eng.apply([LagUpdated(spike)])
    lags = eng.member_lag()
    assert lags["a"] == lags["b"] == 100_000
    assert change.moved == change.moved_for_lag == 2
    assert [len(v) for v in eng.assignment().values()] == [4, 4]
    # Why: a held 200 000 against a bound of 100 000 (the mean of the two members).
    assert change.lag_trigger == LagTrigger("a", 200_000, 100_000.0)


def test_no_lag_trigger_without_lag_moves() -> None:
    ppt = {"t": 8}
    subs = {"a": ["t"], "b": ["t"]}
    eng, _ = IncrementalAssignor.from_snapshot(
        ppt, subs, lag={TopicPartition("t", p): 10_000 for p in range(8)}
    )
    assert eng.apply([LagUpdated({})]).lag_trigger is None
    assert eng.apply([MemberJoined("c", frozenset({"t"}))]).lag_trigger is None


def test_lag_skew_is_the_peak_member_lag_over_the_mean() -> None:
    ppt = {"t": 6}
    eng = IncrementalAssignor(ppt)
    eng.apply([MemberJoined("a", frozenset({"t"})), MemberJoined("b", frozenset({"t"}))])
    assert eng.lag_skew() == 1.0  # no lag yet
    eng.apply([LagUpdated({TopicPartition("t", p): 100 * (p + 1) for p in range(6)})])
    lag = eng.member_lag()
    assert eng.lag_skew() == pytest.approx(max(lag.values()) / (sum(lag.values()) / 2))


@pytest.mark.parametrize("lag_aware", [False, True])
def test_a_wave_of_joins_is_rebalanced_in_bulk_with_the_least_movement(
    lag_aware: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Identical subscriptions and a wide count spread: decided at once, not partition by
    partition, and still KIP-54's minimum: balanced, and only the excess moves."""
    ppt = {"t": 700, "u": 301}
    eng, _ = IncrementalAssignor.from_snapshot(
        ppt, {f"m{i}": ["t", "u"] for i in range(7)}, lag_aware=lag_aware
    )
    if lag_aware:
        eng.apply([LagUpdated({TopicPartition("t", p): (p * 37) % 1000 for p in range(700)})])
    before = eng.assignment()
    moves: list[int] = []
    real_move = IncrementalAssignor._move

    def counted(self: IncrementalAssignor, pid: int, to: str | None, **kw: bool) -> None:
        moves.append(pid)
        real_move(self, pid, to, **kw)

    monkeypatch.setattr(IncrementalAssignor, "_move", counted)
    joined = [MemberJoined(f"n{i}", frozenset({"t", "u"})) for i in range(5)]
    change = eng.apply(joined)
    after = eng.assignment()
    counts = [len(v) for v in after.values()]
    assert max(counts) - min(counts) <= 1
    members = sorted(after)
    least = minimal_movement_uniform(before, members, 1001)
    assert change.moved - change.moved_for_lag == least
    kept = sum(len(set(before[m]) & set(after[m])) for m in before)
    assert kept >= 1001 - least - 2 * change.moved_for_lag
    assert len(moves) <= 2 * eng.policy.max_moves  # the lag search's own moves only
    holders_agree(eng)


def stale_group(seed: int, *, big: bool = False) -> IncrementalAssignor:
    """40 members of 25 partitions whose lists a lag reading made stale; few distinct
    lags (ties), some partitions without a reading, and with ``big`` one lag past 64
    bits."""
    rng = random.Random(seed)
    ppt = {"t": 600, "u": 400}
    eng = IncrementalAssignor(ppt)
    eng.intern_partitions()
    eng.apply([MemberJoined(f"m{i:02d}", frozenset(ppt)) for i in range(40)])
    lag = {
        TopicPartition(t, p): rng.randrange(4) * 1000
        for t, n in ppt.items()
        for p in range(n)
        if rng.random() < 0.9
    }
    if big:
        lag[TopicPartition("t", 0)] = 2**70
    eng.apply([LagUpdated(lag)])
    eng.apply([LagUpdated({tp: v + 1 for tp, v in list(lag.items())[::7]})])
    return eng


@pytest.mark.parametrize("big", [False, True])
def test_the_lightest_entries_are_the_first_of_each_sorted_list(big: bool) -> None:
    for seed in range(10):
        eng = stale_group(seed, big=big)
        members = [eng._members[n] for n in sorted(eng._members)]
        assert sum(m.stale for m in members) >= 30  # the lag search re-sorted a few
        found = eng._lightest(members)
        assert found == [eng._entries(m)[0] for m in members]


def test_a_bulk_step_gives_the_same_from_stale_and_from_sorted_lists() -> None:
    """Three joiners: every donor gives one, its lightest, whether its list is stale
    (found in array passes, removed by pid) or was re-sorted first."""
    for seed in range(10):
        stale, fresh = stale_group(seed), stale_group(seed)
        for m in fresh._members.values():
            fresh._entries(m)
        stale.assignment()  # every list made: the bulk step keeps them in step
        joined = [MemberJoined(f"n{i}", frozenset({"t", "u"})) for i in range(3)]
        a, b = stale.apply(joined), fresh.apply(joined)
        assert a.assignments == b.assignments
        assert stale.assignment() == fresh.assignment()
        holders_agree(stale)
        for eng in (stale, fresh):  # each list holds exactly its partitions, by weight
            for m in eng._members.values():
                pids = sorted(map(pid_of, eng._entries(m)))
                assert pids == sorted(p for p, o in eng._owner.items() if o == m.name)


def test_apply_pauses_the_collector_and_always_gives_it_back() -> None:
    """``apply`` runs with the cyclic collector paused (its allocations would set off
    collections over the whole engine mid-event); whatever happens, the caller's setting
    is restored."""
    eng = IncrementalAssignor({"t": 4})
    seen: list[bool] = []

    def fail_mid_event(*_: object, **__: object) -> None:
        seen.append(gc.isenabled())
        raise KeyError("mid-event")

    eng._settle = fail_mid_event  # type: ignore[method-assign,assignment]
    assert gc.isenabled()
    with pytest.raises(KeyError):
        eng.apply([MemberJoined("a", frozenset({"t"}))])
    assert seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(ValueError, match="capacity"):
            eng.apply([MemberJoined("b", frozenset({"t"}), capacity=-1)])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_scale_out_for_a_backlog_puts_it_on_the_members_that_join() -> None:
    """An autoscaler adds members because one member's partitions are behind: that
    member keeps its quota of its own partitions (no more moves than KIP-54's minimum)
    but the lightest of them, and the backlog goes to the members that joined. (A donor
    giving evenly over its lag order kept half its backlog: 42 000 here.) No moves for
    lag alone (a controller's lag cooldown): the scale-out's own placement is measured."""
    lag = {TopicPartition("t", p): 0 for p in range(48)}
    current = {f"m{i}": [TopicPartition("t", p) for p in range(i, 48, 4)] for i in range(4)}
    for rank, tp in enumerate(current["m0"]):
        lag[tp] = (rank + 1) * 1000  # 1 000 .. 12 000: 78 000 behind
    eng, _ = IncrementalAssignor.from_snapshot(
        {"t": 48},
        {m: ["t"] for m in current},
        current=current,
        lag=lag,
        policy=LagPolicy(max_moves=0),
    )
    assert eng.assignment() == current
    change = eng.apply([MemberJoined(f"n{i}", frozenset({"t"})) for i in range(4)])
    assert change.moved == 24  # each of 8 holds 6: the excess of 4 x 12, no more
    held = {m: sum(lag[tp] for tp in eng.partitions_of(m)) for m in change.assignments}
    assert held["m0"] == 21_000  # its six lightest: the least it can keep of its own
    assert max(held.values()) == 21_000
    assert sum(held[f"n{i}"] for i in range(4)) == 57_000  # the rest of the backlog


@pytest.mark.parametrize("lag", [False, True])
def test_a_scale_out_pairs_each_receiver_with_few_donors(lag: bool) -> None:
    """Half again as many members join a balanced group: each receiver takes its share
    from a donor or two per level of lag, not a partition from every donor (lag balance
    is the same: partitions of equal lag are interchangeable);
    every donor a receiver waits on is one more revoke, grant and acknowledgement."""
    ppt = {"t": 3000, "u": 3000}
    eng = IncrementalAssignor(ppt)
    eng.apply([MemberJoined(f"a{i:02d}", frozenset(ppt)) for i in range(60)])
    if lag:  # three levels of lag: ties within each
        eng.apply(
            [LagUpdated({TopicPartition(t, p): (p % 3) * 5000 for t in ppt for p in range(3000)})]
        )
    before = {tp: m for m, tps in eng.assignment().items() for tp in tps}
    change = eng.apply([MemberJoined(f"b{i:02d}", frozenset(ppt)) for i in range(60)])
    assert change.moved - change.moved_for_lag == 3000  # KIP-54's minimum: the excess
    donors = {
        m: {before[tp] for tp in eng.partitions_of(m)}
        for m in change.assignments
        if m.startswith("b")
    }
    assert len(donors) == 60
    most = max(map(len, donors.values()))
    assert most <= (6 if lag else 2), sorted(map(len, donors.values()))
