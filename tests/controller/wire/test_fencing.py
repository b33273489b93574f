"""The one fencing rule (``controller.wire.fencing``), and what it protects: recovery, audit and
the reconciler's rule that a publication depends only on earlier ones."""

from __future__ import annotations

from functools import partial

from hypothesis import given, settings
from hypothesis import strategies as st

from assignors import TopicPartition
from controller.core.group import GroupState
from controller.core.rebalance import GroupTuning
from controller.core.recovery import Recovered
from controller.tools.audit import audit_group
from controller.wire.fencing import AssignmentView, Verdict
from controller.wire.records import Logged, LoggedFence, LoggedRecord, Presence
from tests.controller import logged

PPT = {"t": 4}


#: Records sit in partition 0 unless a test says otherwise, beside the fences.
rec = partial(logged.rec, partition=0)


def fence(epoch: int, offset: int, partition: int = 0) -> LoggedFence:
    return LoggedFence("g", epoch, partition, offset)


def test_a_record_below_the_fence_is_ignored_and_one_before_it_counts() -> None:
    view = AssignmentView()
    assert view.add(rec("a", 5, [0, 1], epoch=1, offset=0)) is Verdict.CURRENT
    # The deposed leader's record landed before the new leader's marker: it counts.
    assert view.add(rec("a", 6, [0], epoch=1, offset=1)) is Verdict.CURRENT
    assert view.add(fence(2, offset=2)) is Verdict.FENCE
    # ...and after it: fenced, whatever its generation.
    assert view.add(rec("a", 9, [0, 1, 2], epoch=1, offset=3)) is Verdict.FENCED
    assert view.current[("g", "a")].record.held() == {TopicPartition("t", 0)}  # type: ignore[union-attr]
    assert view.max_generation["g"] == 9  # the next leader numbers above even fenced ones
    assert view.add(rec("a", 10, [1], epoch=2, offset=4)) is Verdict.CURRENT


def test_the_fence_of_one_partition_does_not_fence_another() -> None:
    view = AssignmentView()
    view.add(fence(2, offset=0, partition=0))
    assert view.add(rec("b", 4, [2], epoch=1, offset=0, partition=1)) is Verdict.CURRENT


def test_duplicates_and_regressions_are_stale() -> None:
    view = AssignmentView()
    view.add(rec("a", 5, [0], epoch=1, offset=0))
    assert view.add(rec("a", 5, [0], epoch=1, offset=1)) is Verdict.STALE
    assert view.add(rec("a", 4, [0], epoch=1, offset=2)) is Verdict.STALE


def test_a_headerless_tombstone_follows_the_record_it_deletes() -> None:
    view = AssignmentView()
    view.add(rec("a", 5, [0], epoch=1, offset=0))
    assert view.add(LoggedRecord("g", "a", None, 0, 1)) is Verdict.CURRENT
    assert view.current[("g", "a")].record is None
    assert view.add(rec("a", 6, [1], epoch=1, offset=2)) is Verdict.CURRENT


def test_audit_reads_the_log_as_members_do() -> None:
    # The race of issue 13, as the log shows it after the fix: the old leader's late
    # writes sit behind the new leader's fences, and nobody applies them.
    log: list[Logged] = [
        rec("a", 1, [0, 1], epoch=1, offset=0, partition=0),
        rec("b", 1, [2, 3], epoch=1, offset=0, partition=1),
        fence(2, offset=1, partition=0),
        fence(2, offset=1, partition=1),
        rec("a", 2, [0], epoch=2, offset=2, partition=0),
        rec("b", 3, [1, 2, 3], epoch=2, offset=2, partition=1),
        rec("c", 2, [1], epoch=1, offset=3, partition=0),  # the deposed leader, late
    ]
    report = audit_group("g", log, PPT, window=5)
    assert report.ok, report.render()
    assert len(report.fenced) == 1
    assert "below the fence" in report.fenced[0]
    # Without the fence the same late record is a double grant.
    unfenced: list[Logged] = [e for e in log if not isinstance(e, LoggedFence)]
    assert not audit_group("g", unfenced, PPT, window=5).ok


def test_two_writers_in_one_epoch_are_a_violation() -> None:
    log = [rec("a", 29, [0], epoch=2, offset=0), rec("a", 28, [0, 1], epoch=2, offset=1)]
    report = audit_group("g", log, PPT, window=5)
    assert any("generation 28 after 29 in epoch 2" in v for v in report.violations)


def _recover(records: dict[str, LoggedRecord]) -> tuple[Recovered, list[str]]:
    view = AssignmentView()
    for r in records.values():
        view.add(r)
    rows = {m: (view.order[("g", m)], r.record) for m, r in view.group_records("g").items()}
    return Recovered.from_records(rows, view.max_generation["g"], 3, lambda t: t - 1000.0)


def test_recovery_resolves_a_double_grant_for_the_newer_record() -> None:
    state, notes = _recover(
        {
            "a": rec("a", 7, [0, 1], epoch=1, offset=0, partition=0),
            "b": rec("b", 9, [1, 2], epoch=1, offset=0, partition=1),
        }
    )
    assert state.granted == {
        "a": frozenset({TopicPartition("t", 0)}),
        "b": frozenset({TopicPartition("t", 1), TopicPartition("t", 2)}),
    }
    assert state.stale == {"a"}
    assert len(notes) == 1
    assert "t-1" in notes[0]
    group = GroupState("g", GroupTuning(leave_grace=10.0), PPT, state, now=0.0)
    for m in ("a", "b"):
        group.on_presence(
            Presence(
                group="g", member=m, topics=["t"], generation=9, partitions=sorted(state.granted[m])
            ),
            0.1,
        )
    _, plan = group.tick(0.2)
    assert plan is not None  # a's record is rewritten at once, without t-1
    first = plan.records[0]
    assert first.member == "a"
    assert first.partitions is not None
    assert TopicPartition("t", 1) not in first.partitions


def test_grace_goes_on_from_the_recorded_absence() -> None:
    state, _ = _recover(
        {
            "a": rec("a", 7, [0, 1], epoch=1, offset=0, partition=0),
            "b": rec("b", 7, [2, 3], epoch=1, offset=0, partition=1, absent_since=995.0),
        }
    )
    assert state.absent == {"b": -5.0}  # on the state clock
    group = GroupState("g", GroupTuning(leave_grace=10.0, rebalance_delay=0.0), PPT, state, now=0.0)
    group.on_presence(
        Presence(
            group="g", member="a", topics=["t"], generation=7, partitions=[("t", 0), ("t", 1)]
        ),
        0.1,
    )
    assert (
        group.absences.deadline("b") == 5.0
    )  # not 10.0: the new leader does not restart the clock
    _, plan = group.tick(5.0)
    assert plan is not None
    assert [(r.member, r.partitions) for r in plan.records] == [("b", None)]


events = st.lists(
    st.tuples(st.sampled_from(["join", "leave", "crash", "ack", "tick"]), st.integers(0, 5)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(events)
def test_every_record_of_a_publication_stands_alone(script: list[tuple[str, int]]) -> None:
    """Any subset of one publication is safe to act on: a record only grants partitions
    that no other member held and none was releasing when the publication was planned.
    This is what makes a deposed leader's half-landed publication harmless."""
    group = GroupState(
        "g", GroupTuning(rebalance_delay=0.0, leave_grace=1.0, handoff_timeout=3.0), {"t": 8}
    )
    now = 0.0
    live: set[str] = set()
    for op, n in script:
        member = f"m{n}"
        now += 0.5
        r = group.reconciler
        if op == "join":
            live.add(member)
            group.on_presence(
                Presence(
                    group="g",
                    member=member,
                    topics=["t"],
                    generation=r.acked.get(member, -1),
                    partitions=sorted(r.granted.get(member, ())),
                ),
                now,
            )
        elif op == "leave" and member in live:
            live.discard(member)
            group.on_presence(
                Presence(
                    group="g", member=member, topics=["t"], state="leaving", generation=r.generation
                ),
                now,
            )
        elif op == "crash" and member in live:
            live.discard(member)
            group.on_gone(member, now)
        elif op == "ack" and member in live:
            group.on_presence(
                Presence(
                    group="g",
                    member=member,
                    topics=["t"],
                    generation=r.generation,
                    partitions=sorted(r.granted.get(member, ())),
                ),
                now,
            )
        _, plan = group.tick(now)
        if plan is None:
            continue
        before = {m: set(v) for m, v in r.granted.items()}
        releasing = set(r.releasing)
        for out in plan.records:
            for tp in (out.partitions or frozenset()) - before.get(out.member, set()):
                others = [m for m, held in before.items() if m != out.member and tp in held]
                assert not others, (
                    f"{tp} granted to {out.member} in the plan that frees it from {others}"
                )
                assert tp not in releasing, f"{tp} granted while still being released"
        r.commit(plan)
