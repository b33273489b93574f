"""Capacity through the group logic: a member's weight from its presence, re-weighing as a
rebalance of its own reason, handoffs that stay exclusive, and a recovery that moves
nothing."""

from __future__ import annotations

import random

import pytest

from controller.core.group import GroupState
from controller.wire.records import Presence

from .test_group_state import TUNING, Consumer, Sim, assert_recovery_moves_nothing


class WeightedConsumer(Consumer):
    def __init__(self, name: str, topics: list[str], capacity: float | None) -> None:
        super().__init__(name, topics)
        self.capacity = capacity

    def presence(self, group: str = "g", state: str | None = None) -> Presence:
        return super().presence(group, state).model_copy(update={"capacity": self.capacity})


def _settle(sim: Sim, seconds: float = 40.0) -> None:
    for _ in range(int(seconds / 0.5)):
        sim.step(0.5)  # checks that no partition is applied twice, at every step
    assert sim.group.settled()


def _counts(group: GroupState) -> dict[str, int]:
    return {m: len(tps) for m, tps in group.reconciler.granted.items()}


def _fleet(sim: Sim, capacities: dict[str, float | None]) -> None:
    for name, capacity in capacities.items():
        c = WeightedConsumer(name, ["orders", "audit"], capacity)
        sim.consumers[name] = c
        sim.group.on_presence(c.presence(), sim.now)


def test_presence_capacity_sets_each_members_share() -> None:
    sim = Sim(1)
    _fleet(sim, {"c0": None, "c1": 1, "c2": 2})
    _settle(sim)
    # 16 partitions over capacities 1, 1, 2.
    assert _counts(sim.group) == {"c0": 4, "c1": 4, "c2": 8}
    assert sim.group.engine.capacity_of("c2") == 2.0


def test_a_new_capacity_rebalances_for_that_reason_and_moves_only_the_share() -> None:
    sim = Sim(2)
    _fleet(sim, {"c0": None, "c1": None})
    _settle(sim)
    assert _counts(sim.group) == {"c0": 8, "c1": 8}
    c1 = sim.consumers["c1"]
    assert isinstance(c1, WeightedConsumer)
    c1.capacity = 3
    sim.group.on_presence(c1.presence(), sim.now)
    rebalance, _ = sim.group.tick(sim.now + 5.0)
    assert rebalance is not None
    assert rebalance.reasons == ("capacity",)
    assert rebalance.moved == 4
    sim.now += 5.0
    _settle(sim)
    assert _counts(sim.group) == {"c0": 4, "c1": 12}
    # The same capacity heard again is no event.
    sim.group.on_presence(c1.presence(), sim.now)
    assert sim.group.tick(sim.now + 5.0) == (None, None)


def test_a_bad_capacity_never_reaches_the_group() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Presence(group="g", member="m", topics=["orders"], capacity=0)


@pytest.mark.parametrize("seed", range(20))
def test_a_recovered_controller_moves_nothing_with_capacities(seed: int) -> None:
    """Invariant 3: the successor, given the capacities heard in presence, rebuilds the
    predecessor's assignment exactly. Blind to them, a rebuild would rebalance by count
    and move partitions (checked too, so the test cannot pass by accident)."""
    rng = random.Random(seed)
    sim = Sim(seed)
    _fleet(sim, {f"c{i}": rng.choice([None, 1, 2, 3]) for i in range(5)})
    _settle(sim)
    recovered = sim.recovered()
    heard = [c.presence() for c in sim.consumers.values()]
    ppt = dict(sim.group.engine.partitions_per_topic)
    group = GroupState(
        "g", TUNING, ppt, recovered, sim.now, capacities={p.member: p.capacity for p in heard}
    )
    assert_recovery_moves_nothing(group, heard, sim.now)
    assert group.engine.assignment() == {m: sorted(v) for m, v in recovered.granted.items()}
    if len({p.capacity or 1 for p in heard}) > 1:
        blind = GroupState("g", TUNING, ppt, recovered, sim.now)
        assert blind.engine.assignment() != group.engine.assignment()
