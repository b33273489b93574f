"""Traces: synthesis, recording by the controller, replay through the strategies."""

from __future__ import annotations

from pathlib import Path

import pytest

from assignors import STRATEGIES, TopicPartition
from controller.core.group import GroupState
from controller.core.rebalance import GroupTuning
from controller.runtime.trace import TraceRecorder
from controller.wire.records import DecodeError, Presence, TraceEvent
from pipeline.traces import read_jsonl, replay, synthesize, write_jsonl


def test_synthetic_fleets_are_reproducible_and_valid(tmp_path: Path) -> None:
    a = list(synthesize(20, seed=3, max_members=300, steps=4))
    assert a == list(synthesize(20, seed=3, max_members=300, steps=4))
    assert a != list(synthesize(20, seed=4, max_members=300, steps=4))
    joins_at_start: dict[str, int] = {}
    for e in a:
        if e.kind == "join" and e.t == 0:
            joins_at_start[e.group] = joins_at_start.get(e.group, 0) + 1
    assert len(joins_at_start) == 20
    assert max(joins_at_start.values()) == 300
    assert min(joins_at_start.values()) >= 2
    path = tmp_path / "trace.jsonl"
    assert write_jsonl(a, path) == len(a)
    assert list(read_jsonl(path)) == a


def test_a_bad_trace_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"group": "g", "t": 0, "kind": "join", "member": "a", "topics": ["x"]}\n'
        '{"group": "g", "t": 1, "kind": "leave"}\n'
    )
    with pytest.raises(DecodeError, match=r"bad.jsonl:2: .*a leave event needs member"):
        list(read_jsonl(path))


TRACE = [
    TraceEvent(group="g", t=0, kind="partitions", partitions={"x": 6}),
    TraceEvent(group="g", t=0, kind="join", member="a", topics=["x"]),
    TraceEvent(group="g", t=0, kind="join", member="b", topics=["x"]),
    TraceEvent(group="g", t=60, kind="join", member="c", topics=["x"]),
    TraceEvent(group="g", t=60, kind="lag", lag=[("x", 0, 500), ("x", 1, 500)]),
    TraceEvent(group="g", t=120, kind="leave", member="a"),
]


def test_replay_steps_each_strategy_through_the_trace() -> None:
    results = replay(TRACE, STRATEGIES)
    assert {r.strategy for r in results} == set(STRATEGIES)
    sticky = [r for r in results if r.strategy == "sticky"]
    assert [(r.step, r.t, r.members, r.partitions) for r in sticky] == [
        (0, 0, 2, 6),
        (1, 60, 3, 6),
        (2, 120, 2, 6),
    ]
    # 3/3 -> 2/2/2 moves 2; then a's 2 go to the survivors, nothing else moves
    assert [r.moved for r in sticky] == [0, 2, 0]
    assert all(r.valid and r.count_spread <= 1 for r in results)
    lagsticky = [r for r in results if r.strategy == "lagsticky"]
    # the two lagged partitions end up with different members
    assert lagsticky[1].max_member_lag == 500


def test_the_controller_records_what_its_assignor_sees(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    recorder = TraceRecorder(path)
    state = GroupState("g", GroupTuning(leave_grace=0.0), {"x": 6})
    recorder.attach(state)
    state.on_presence(Presence(group="g", member="a", topics=["x"]), 0.0)
    state.on_presence(Presence(group="g", member="b", topics=["x"]), 0.1)
    state.on_lag({TopicPartition("x", 0): 700}, 0.2)
    state.tick(0.2)  # the assignor sees readings when a tick absorbs them
    state.on_gone("a", 0.3)
    recorder.close()
    events = list(read_jsonl(path))
    assert [(e.kind, e.member) for e in events] == [
        ("partitions", None),
        ("join", "a"),
        ("join", "b"),
        ("lag", None),
        ("leave", "a"),
    ]
    assert events[3].lag == [("x", 0, 700)]
    assert [r.members for r in replay(events, ["sticky"])][-1] == 1
