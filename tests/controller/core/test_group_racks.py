"""Racks through the group logic: a member's ``client.rack`` from its presence, replica
racks from topic metadata, and handoffs that stay exclusive while partitions move onto
their replicas' racks."""

from __future__ import annotations

import json
import random

import pytest

from assignors import TopicPartition
from controller.core.group import GroupState
from controller.wire.records import DecodeError, Presence, decode

from .test_group_state import TUNING, Consumer, Sim, assert_recovery_moves_nothing

RACKS = ("a", "b", "c")


class RackedConsumer(Consumer):
    def __init__(self, name: str, topics: list[str], rack: str | None) -> None:
        super().__init__(name, topics)
        self.rack = rack

    def presence(self, group: str = "g", state: str | None = None) -> Presence:
        return super().presence(group, state).model_copy(update={"rack": self.rack})


def replica_racks(ppt: dict[str, int], shift: int = 0) -> dict[TopicPartition, frozenset[str]]:
    return {
        TopicPartition(t, p): frozenset({RACKS[(p + shift) % 3]})
        for t, n in ppt.items()
        for p in range(n)
    }


def _fleet(sim: Sim, racks: dict[str, str | None]) -> None:
    for name, rack in racks.items():
        c = RackedConsumer(name, ["orders", "audit"], rack)
        sim.consumers[name] = c
        sim.group.on_presence(c.presence(), sim.now)


def _settle(sim: Sim, seconds: float = 40.0) -> None:
    for _ in range(int(seconds / 0.5)):
        sim.step(0.5)  # checks that no partition is applied twice, at every step
    assert sim.group.settled()


def _cross_rack(group: GroupState, racks: dict[TopicPartition, frozenset[str]]) -> int:
    engine = group.engine
    return sum(
        1
        for m, tps in group.reconciler.granted.items()
        for tp in tps
        if engine.rack_of(m) is not None and engine.rack_of(m) not in racks.get(tp, frozenset())
    )


def test_replica_racks_arriving_later_move_partitions_onto_them() -> None:
    sim = Sim(seed=7)
    _fleet(sim, {"c0": "a", "c1": "b", "c2": "c"})
    _settle(sim)
    racks = replica_racks(sim.group.engine.partitions_per_topic)
    assert _cross_rack(sim.group, racks) > 0  # placed before any rack was known
    sim.group.on_partition_racks(racks, sim.now)
    _settle(sim)
    assert sim.group.engine.cross_rack() == 0 == _cross_rack(sim.group, racks)
    assert sim.group.reconciler.granted == {
        m: frozenset(v) for m, v in sim.group.engine.assignment().items()
    }
    # The same racks read again are no event.
    sim.group.on_partition_racks(racks, sim.now)
    assert sim.group.settled()


def test_a_member_moving_rack_is_realigned_and_said_why() -> None:
    sim = Sim(seed=3)
    _fleet(sim, {"c0": "a", "c1": "b", "c2": "c"})
    racks = replica_racks(sim.group.engine.partitions_per_topic)
    sim.group.on_partition_racks(racks, sim.now)
    _settle(sim)
    assert sim.group.engine.cross_rack() == 0
    # c0 and c1 trade zones (a rescheduled pod): everything they hold is now remote.
    c0, c1 = sim.consumers["c0"], sim.consumers["c1"]
    assert isinstance(c0, RackedConsumer)
    assert isinstance(c1, RackedConsumer)
    c0.rack, c1.rack = "b", "a"
    sim.group.on_presence(c0.presence(), sim.now)
    sim.group.on_presence(c1.presence(), sim.now)
    sim.now += TUNING.rebalance_delay
    rebalance, plan = sim.group.tick(sim.now)
    assert rebalance is not None
    assert rebalance.reasons == ("racks",)
    assert rebalance.moved == rebalance.moved_for_rack > 0
    assert "onto a replica's rack" in rebalance.why()
    if plan is not None:
        sim.deliver(plan)
    _settle(sim)
    # Rack a has 6 partitions; its member now holds 5 (count balance comes first).
    assert sim.group.engine.cross_rack() == 1 == _cross_rack(sim.group, racks)


def test_members_without_racks_change_nothing() -> None:
    """Defaults: no member declares a rack, so replica racks move nothing."""
    sim = Sim(seed=5)
    _fleet(sim, {"c0": None, "c1": None, "c2": None})
    _settle(sim)
    before = sim.group.engine.assignment()
    sim.group.on_partition_racks(replica_racks(sim.group.engine.partitions_per_topic), sim.now)
    _settle(sim)
    assert sim.group.engine.assignment() == before
    assert sim.group.engine.cross_rack() == 0


@pytest.mark.parametrize("rack", ["", "a b", "zone\x00", "x" * 256])
def test_a_bad_rack_is_rejected_where_presence_is_decoded(rack: str) -> None:
    body = Presence(group="g", member="m", topics=["t"]).model_dump(mode="json")
    body["rack"] = rack
    with pytest.raises(DecodeError, match="rack"):
        decode(Presence, json.dumps(body).encode(), "mqtt ballast/g/members/m")


def test_racks_known_before_members_join_place_them_locally_at_once() -> None:
    """The rack travels with the join: the first placement is already local, so nothing
    is granted remote and then moved."""
    sim = Sim(seed=11)
    racks = replica_racks(sim.group.engine.partitions_per_topic)
    sim.group.on_partition_racks(racks, sim.now)
    _fleet(sim, {"c0": "a", "c1": "b", "c2": "c"})
    sim.now += TUNING.rebalance_delay
    rebalance, plan = sim.group.tick(sim.now)
    assert rebalance is not None
    assert set(rebalance.reasons) >= {"join", "racks"}
    declared = {"c0": "a", "c1": "b", "c2": "c"}
    placed = sim.group.engine.assignment()
    assert placed
    assert all(declared[m] in racks[tp] for m, tps in placed.items() for tp in tps)
    assert sim.group.engine.cross_rack() == 0
    assert rebalance.moved_for_rack == 0
    assert plan is not None
    sim.deliver(plan)
    _settle(sim)
    assert sim.group.engine.assignment() == placed  # nothing moved afterwards


def _churn_with_racks(seed: int) -> tuple[Sim, dict[TopicPartition, frozenset[str]]]:
    """Joins, leaves and members moving rack, over replicas on one or two racks each."""
    rng = random.Random(seed)
    sim = Sim(seed=seed)
    racks = {
        tp: frozenset(rng.sample(RACKS, rng.choice([1, 2])))
        for tp in replica_racks(sim.group.engine.partitions_per_topic)
    }
    sim.group.on_partition_racks(racks, sim.now)
    for _ in range(8):
        name = rng.choice([f"c{i}" for i in range(6)])
        if name in sim.consumers and rng.random() < 0.4:
            sim.leave(name)
            continue
        c = sim.consumers.get(name)
        if c is None:
            c = sim.consumers[name] = RackedConsumer(name, ["orders", "audit"], None)
        assert isinstance(c, RackedConsumer)
        c.rack = rng.choice([None, *RACKS])
        sim.group.on_presence(c.presence(), sim.now)
        for _ in range(30):
            sim.step(0.5)
    _settle(sim)
    return sim, racks


@pytest.mark.parametrize("seed", range(40))
def test_a_recovered_controller_moves_nothing_with_racks(seed: int) -> None:
    """Invariant 3 with racks: the live engine aligns step by step, so a full alignment
    could still improve on what it left; the recovering controller adopts the racks as
    they stand and moves nothing (without ``adopt_racks`` 7 of these 40 runs moved 2-4
    partitions)."""
    sim, racks = _churn_with_racks(seed)
    live = sim.group
    recovered = sim.recovered()
    group = GroupState("g", TUNING, dict(live.engine.partitions_per_topic), recovered, sim.now)
    heard = [c.presence() for c in sim.consumers.values()]
    group.adopt_racks({p.member: p.rack for p in heard}, racks)
    group.on_partition_racks(racks, sim.now)  # the same metadata read again: no event
    assert_recovery_moves_nothing(group, heard, sim.now)
    assert group.engine.assignment() == {m: sorted(v) for m, v in recovered.granted.items()}
    assert group.engine.cross_rack() == live.engine.cross_rack()
