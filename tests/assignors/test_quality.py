"""The quality report's bulk passes agree with the definitions written as plain loops, on
valid and broken assignments alike (double claims, strangers, unsubscribed topics,
partitions that do not exist, plain pairs instead of ``TopicPartition``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from assignors import TopicPartition, assign
from assignors.quality import evaluate, member_lag, movement, problems

from .strategies_hyp import groups, lags, messy_current

Held = dict[str, list[tuple[str, int]]]
Case = tuple[dict[str, int], dict[str, list[str]], Held, Held, dict[TopicPartition, int]]


def moved_by_definition(before: Held, after: Held, subs: dict[str, list[str]] | None) -> int:
    """Partitions whose previous owner is still in ``after`` (and still subscribed to the
    topic) and that someone else holds now."""
    owner = {TopicPartition(*tp): m for m, tps in after.items() for tp in tps}
    n = 0
    for m, tps in before.items():
        if m not in after:
            continue
        for raw in tps:
            tp = TopicPartition(*raw)
            if subs is not None and tp.topic not in subs.get(m, ()):
                continue
            if owner.get(tp) not in (None, m):
                n += 1
    return n


def lag_by_definition(held: Held, lag: dict[TopicPartition, int]) -> dict[str, int]:
    return {m: sum(lag.get(TopicPartition(*tp), 0) for tp in tps) for m, tps in held.items()}


@st.composite
def cases(draw: st.DrawFn) -> Case:
    ppt, subs = draw(groups())
    members = sorted(subs)
    before = draw(messy_current(ppt, members))
    valid = draw(st.booleans())
    if valid:
        result = assign(draw(st.sampled_from(["range", "sticky"])), ppt, subs)
        after: Held = {m: list(tps) for m, tps in result.items()}
    else:
        after = draw(messy_current(ppt, members))
        if draw(st.booleans()):  # a member with the empty name holds what others held
            after[""] = [tp for tps in before.values() for tp in tps][:3]
    # Some members drop a topic they held before: their lost partitions are not moves.
    for m in draw(st.lists(st.sampled_from(members), unique=True)):
        subs[m] = subs[m][1:]
    return ppt, subs, before, after, draw(lags(ppt))


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_report_matches_the_definitions(case: Case) -> None:
    ppt, subs, before, after, lag = case
    q = evaluate(after, ppt, subs, before=before, lag=lag)
    assert q.moved == moved_by_definition(before, after, subs)
    assert movement(before, after) == moved_by_definition(before, after, None)
    assert movement(before, after, subs) == q.moved
    by_definition = lag_by_definition(after, lag)
    assert member_lag(after, lag) == by_definition
    assert q.max_member_lag == max(by_definition.values(), default=0)
    assert q.valid == (not problems(after, ppt, subs))
    counts = [len(after.get(m, ())) for m in subs]
    assert q.count_spread == (max(counts) - min(counts) if counts else 0)


def test_the_named_problems_of_a_broken_assignment() -> None:
    ppt = {"a": 2, "b": 1}
    subs = {"m1": ["a"], "m2": ["a", "b"]}
    broken = {"m1": [("a", 0), ("b", 0)], "m2": [("a", 0), ("a", 7)], "x": []}
    a0, a1, a7, b0 = (TopicPartition(*tp) for tp in (("a", 0), ("a", 1), ("a", 7), ("b", 0)))
    assert problems(broken, ppt, subs) == [
        f"'m1' holds {b0} but is not subscribed to 'b'",
        f"{a0} is held by both 'm1' and 'm2'",
        f"'m2' holds {a7}, which does not exist",
        "'x' is not a member of the group",
        f"{a1} has subscribers but no owner",
    ]
    assert not evaluate(broken, ppt, subs).valid
    assert problems({"m1": [("a", 0)], "m2": [("a", 1), ("b", 0)]}, ppt, subs) == []


def test_lag_is_summed_per_member_in_order() -> None:
    held = {"": [("a", 0)], "m": [], "n": [("a", 1), ("b", 0)]}
    lag = {TopicPartition("a", 0): 5, TopicPartition("a", 1): 7, TopicPartition("b", 0): 1}
    assert member_lag(held, lag) == {"": 5, "m": 0, "n": 8}
    assert member_lag(held, None) == {"": 0, "m": 0, "n": 0}
