"""The audit finds each kind of invariant violation in a synthetic assignments log."""

from __future__ import annotations

from controller.tools.audit import audit_group
from controller.wire.records import Logged, LoggedFence, LoggedRecord
from tests.controller.logged import rec

PPT = {"t": 2}


def tomb(member: str, gen: int, epoch: int = 1) -> LoggedRecord:
    return LoggedRecord(
        "g", member, None, partition=hash(member) % 3, offset=gen, generation=gen, epoch=epoch
    )


def test_clean_handoff_is_ok() -> None:
    log = [rec("a", 1, [0, 1]), rec("a", 2, [0]), rec("b", 2, []), rec("b", 3, [1])]
    report = audit_group("g", log, PPT, window=5)
    assert report.ok, report.render()
    assert report.longest_gap_s == 1.0


def test_double_grant_is_a_violation() -> None:
    log = [rec("a", 1, [0, 1]), rec("b", 2, [1])]
    report = audit_group("g", log, PPT, window=5)
    assert not report.ok
    assert "t-1 granted while a holds it" in report.violations[0]


def test_tombstone_releases_and_its_header_dates_it() -> None:
    log = [rec("a", 1, [0, 1]), tomb("a", 3), rec("b", 3, [0, 1])]
    assert audit_group("g", log, PPT, window=5).ok
    early = [rec("a", 1, [0, 1]), rec("b", 2, [0, 1]), tomb("a", 3)]
    assert not audit_group("g", early, PPT, window=5).ok


def test_generation_going_back_within_an_epoch() -> None:
    log = [rec("a", 5, [0, 1], offset=1), rec("a", 3, [0, 1], offset=2)]
    report = audit_group("g", log, PPT, window=5)
    assert any("generation 3 after 5 in epoch 1" in v for v in report.violations)
    later_epoch = [rec("a", 5, [0, 1], offset=1), rec("a", 3, [0, 1], epoch=2, offset=2)]
    assert audit_group("g", later_epoch, PPT, window=5).ok


def test_fenced_records_are_listed_and_not_applied() -> None:
    b = rec("b", 2, [0, 1], epoch=1)
    # The epoch-2 leader fenced b's partition before the epoch-1 record landed there.
    marker = LoggedFence("g", 2, partition=b.partition, offset=b.offset - 1)
    log: list[Logged] = [rec("a", 1, [0, 1], epoch=2), marker, b]
    report = audit_group("g", log, PPT, window=5)
    assert report.ok
    assert len(report.fenced) == 1


def test_uncovered_partition_and_long_gap() -> None:
    log = [rec("a", 1, [0, 1]), rec("a", 2, [0])]
    report = audit_group("g", log, PPT, window=5)
    assert "final state: t-1 is not granted to anyone" in report.violations
    slow = [rec("a", 1, [0, 1], at=0.0), rec("a", 2, [0], at=1.0), rec("b", 3, [1], at=100.0)]
    assert any("ungranted for" in v for v in audit_group("g", slow, PPT, window=30).violations)


def test_a_handoff_in_flight_at_the_end_of_a_live_log() -> None:
    """Read from a running group, the log can end between a revoke and its grant."""
    log = [rec("a", 1, [0, 1], at=10.0), rec("a", 2, [0], at=11.0)]
    live = audit_group("g", log, PPT, window=5, clock=13.0)
    assert live.ok, live.render()
    assert live.in_flight == ["t-1 ungranted for 2.000s"]
    stuck = audit_group("g", log, PPT, window=5, clock=17.0)
    assert "final state: t-1 is not granted to anyone" in stuck.violations


def test_a_replayed_record_is_named_as_a_replay_not_a_controller_violation() -> None:
    """Issue 65: a genuine record produced again later read as "generation 4 after 6 in
    epoch 1", a controller bug. The same record byte for byte is a replay."""
    first = rec("a", 4, [0, 1], offset=1)
    later = rec("a", 6, [0, 1], offset=2)
    replayed = LoggedRecord("g", "a", first.record, first.partition, 3, 4, 1)
    report = audit_group("g", [first, later, replayed], PPT, window=5)
    assert report.ok, report.render()
    assert report.replays == [f"a@{first.partition}:3 epoch 1 gen 4: the record at offset 1 again"]
    assert "1 replayed" in report.render()


def test_an_epoch_and_generation_used_twice_with_other_contents_is_a_violation() -> None:
    """Two tenures sharing (epoch, generation): what turning signing on did before the
    floors counted every record."""
    log = [rec("a", 4, [0], offset=1), rec("a", 4, [1], offset=2)]
    report = audit_group("g", log, PPT, window=5)
    assert not report.ok
    assert "epoch 1 generation 4 used twice for a" in report.violations[0]
