"""Operator constraints through the group logic: from the config and the admin API's
overrides, settled as a rebalance of their own reason, handoffs that stay exclusive,
rack overrides, and a recovery under constraints that moves nothing."""

from __future__ import annotations

import pytest

from assignors import TopicPartition
from controller.core.group import GroupState
from controller.wire.records import ConstraintPatch, ConstraintSet, Pin

from .test_group_state import PPT, TUNING, Sim, assert_recovery_moves_nothing, settled

TP = TopicPartition


def _counts(group: GroupState) -> dict[str, int]:
    return {m: len(tps) for m, tps in group.reconciler.granted.items()}


def _apply(sim: Sim, configured: ConstraintSet, overrides: ConstraintSet) -> None:
    sim.group.set_constraints(configured, overrides, sim.now)
    sim.settle(40)  # checks at every step that no partition is applied twice
    assert sim.group.settled()
    assert sim.group.violations() == []


def test_a_pin_and_a_cap_are_granted_and_the_rest_stays_balanced() -> None:
    sim = settled(1, "c0", "c1", "c2")
    total = PPT["orders"]
    owner = sim.group.engine.owner_of(TP("orders", 0))
    target = next(m for m in ("c0", "c1", "c2") if m != owner)
    pin = Pin(topic="orders", partition=0, member=target)
    _apply(sim, ConstraintSet(pins=[pin]), ConstraintSet(max_partitions={"c2": 1}))
    assert TP("orders", 0) in sim.group.reconciler.granted[target]
    counts = _counts(sim.group)
    assert counts["c2"] <= 1
    rest = [counts[m] for m in ("c0", "c1")]
    assert sum(rest) + counts["c2"] == total
    assert max(rest) - min(rest) <= 1
    assert sim.owners()[TP("orders", 0)] == target  # applied by the member, not just planned


def test_constraints_rebalance_for_their_own_reason() -> None:
    sim = settled(2, "c0", "c1")
    sim.group.set_constraints(ConstraintSet(), ConstraintSet(max_partitions={"c0": 2}), sim.now)
    rebalance, _ = sim.group.tick(sim.now + 0.01)
    assert rebalance is not None
    assert rebalance.reasons == ("constraints",)
    assert rebalance.moved == PPT["orders"] // 2 - 2


def test_caps_below_the_group_leave_partitions_unassigned_until_lifted() -> None:
    sim = settled(3, "c0", "c1")
    _apply(sim, ConstraintSet(max_partitions={"c0": 1, "c1": 2}), ConstraintSet())
    assert sorted(_counts(sim.group).values()) == [1, 2]
    assert len(sim.group.engine.unassigned()) == PPT["orders"] - 3
    _apply(sim, ConstraintSet(), ConstraintSet())
    assert sum(_counts(sim.group).values()) == PPT["orders"]
    assert sim.group.engine.unassigned() == []


def test_overrides_win_over_the_config_entry_by_entry() -> None:
    sim = settled(4, "c0", "c1")
    configured = ConstraintSet(max_partitions={"c0": 1, "c1": 100}, racks={"c0": "a"})
    overrides = ConstraintSet(max_partitions={"c0": 3})
    _apply(sim, configured, overrides)
    assert sim.group.constraints.max_partitions == {"c0": 3, "c1": 100}
    assert _counts(sim.group)["c0"] == 3
    assert sim.group.engine.rack_of("c0") == "a"  # the override of the member's rack


def test_contradictory_constraints_are_refused_and_change_nothing() -> None:
    sim = settled(5, "c0", "c1")
    pins = [Pin(topic="orders", partition=p, member="c0") for p in (0, 1)]
    before = sim.group.constraints
    with pytest.raises(ValueError, match=r"max_partitions\['c0'\] is 1 but 2 partitions"):
        sim.group.set_constraints(
            ConstraintSet(pins=pins), ConstraintSet(max_partitions={"c0": 1}), sim.now
        )
    assert sim.group.constraints == before
    assert sim.group.settled()


def test_a_patch_adds_moves_and_removes_entries() -> None:
    start = ConstraintSet(
        pins=[Pin(topic="t", partition=0, member="a"), Pin(topic="t", partition=1, member="a")],
        max_partitions={"a": 5, "b": 1},
        racks={"a": "x"},
    )
    patch = ConstraintPatch.model_validate(
        {
            "pins": [{"topic": "t", "partition": 1, "member": "b"}],
            "unpin": [["t", 0]],
            "max_partitions": {"a": None, "c": 0},
            "racks": {"a": None, "b": "y"},
        }
    )
    out = patch.applied_to(start)
    assert out.pinned() == {TP("t", 1): "b"}
    assert out.max_partitions == {"b": 1, "c": 0}
    assert out.racks == {"b": "y"}


def test_recovery_under_the_same_constraints_moves_nothing() -> None:
    sim = settled(6, "c0", "c1", "c2")
    rules = ConstraintSet(
        pins=[Pin(topic="orders", partition=3, member="c1")], max_partitions={"c0": 2}
    )
    _apply(sim, rules, ConstraintSet())
    successor = GroupState("g", TUNING, PPT, sim.recovered(), sim.now, configured=rules)
    assert_recovery_moves_nothing(
        successor, [c.presence() for c in sim.consumers.values()], sim.now
    )
