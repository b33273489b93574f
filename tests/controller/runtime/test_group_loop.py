"""The group loop's pacing: steps that grant wait ``grant_batch`` so acks coalesce; steps
that only absorb queued lag readings follow each other at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from assignors import TopicPartition
from controller.config import Config
from controller.core.group import GroupState
from controller.core.rebalance import GroupTuning
from controller.runtime.group_loop import GroupLoop
from controller.runtime.metrics import Metrics
from controller.runtime.replica_state import ManagedGroup
from controller.tasks import cancel_and_wait
from controller.wire.records import Presence

GRANT_BATCH = 0.5


def _unpublishing_loop(cfg: Config, metrics: Metrics) -> GroupLoop:
    """A loop that always leads and fails the test if it publishes."""

    async def never_deposed(_shard: int | None) -> bool:
        return True

    return GroupLoop(
        cfg,
        metrics,
        publisher_for=lambda _name: pytest.fail("the test's steps publish nothing"),
        still_leader=never_deposed,
        stopping=lambda: False,
    )


async def test_queued_lag_is_absorbed_step_after_step_without_the_grant_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five batches of readings and no member: five steps, the first after the
    ``grant_batch`` pause (acks may be on their way), the others at once. The pauses are
    read off the loop's ``asyncio.sleep`` calls, so nothing here depends on timing."""
    cfg = Config.model_validate(
        {"groups": [{"name": "g"}], "rebalance": {"grant_batch": f"{GRANT_BATCH}s"}}
    )
    state = GroupState("g", GroupTuning(lag_batch=2), {"orders": 10})
    state.on_lag({TopicPartition("orders", p): 100 for p in range(10)}, 0.0)
    g = ManagedGroup("g", state, 1)
    loop = _unpublishing_loop(cfg, Metrics())
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded_sleep(delay: float) -> None:
        pauses.append(delay)
        await real_sleep(0)

    async def drained() -> None:
        while state.lag_queued():
            await real_sleep(0.01)

    monkeypatch.setattr(asyncio, "sleep", recorded_sleep)  # the loop's pauses
    task = asyncio.create_task(loop.run(g))
    try:
        async with asyncio.timeout(60):  # liveness only: the loop must drain
            await drained()
    finally:
        await cancel_and_wait(task)
    assert len(state.lag) == 10
    assert pauses == [GRANT_BATCH, 0, 0, 0, 0]


def test_every_handed_off_partition_is_timed_when_its_new_owner_is_granted_it() -> None:
    """``ballast_handoff_duration_seconds``: from the revoke to the grant elsewhere, for
    each partition that changed hands; read from the plans' edits, not whole grants."""
    cfg = Config.model_validate({"groups": [{"name": "g"}]})
    state = GroupState("g", GroupTuning(rebalance_delay=0.0), {"orders": 12})
    g = ManagedGroup("g", state, 1)
    metrics = Metrics()
    loop = _unpublishing_loop(cfg, metrics)
    held: dict[str, frozenset[TopicPartition]] = {}
    now = 0.0

    def announce(member: str, generation: int = -1) -> None:
        p = Presence(
            group="g",
            member=member,
            topics=["orders"],
            instance=member,
            generation=generation,
            partitions=sorted(held.get(member, frozenset())),
        )
        state.on_presence(p, now)

    def step() -> None:
        _, plan = state.tick(now)
        if plan is None:
            return
        loop._observe_handoffs(g, plan)
        state.reconciler.commit(plan)
        for rec in plan.records:  # every member applies and acknowledges at once
            held[rec.member] = rec.partitions or frozenset()
            announce(rec.member, plan.generation)

    announce("a")
    for _ in range(3):
        now += 1.0
        step()
    assert len(held["a"]) == 12
    announce("b")
    for _ in range(4):  # b joins; a revokes half; a acks; b is granted
        now += 1.0
        step()
    assert len(held["a"]) == len(held["b"]) == 6
    count = sum(
        s.value
        for m in metrics.handoff.collect()
        for s in m.samples
        if s.name.endswith("_count") and s.labels["group"] == "g"
    )
    assert count == 6  # each of the six partitions b took, once
    assert not g.revoked_at  # nothing left waiting for a grant
    assert metrics.handoff.labels("g")._sum.get() > 0


async def test_a_loop_cancelled_as_it_is_woken_stops() -> None:
    """``Controller.stop`` and a lost lease cancel the group's task; a presence may wake it
    in the same turn of the event loop. On Python 3.11 ``asyncio.wait_for`` returns the
    waited result then and drops the cancellation (cpython gh-86296): the task went on
    publishing after the controller had stopped, and ``release`` would wait for it forever."""
    cfg = Config.model_validate({"groups": [{"name": "g"}]})
    state = GroupState("g", GroupTuning(rebalance_delay=3600.0), {"orders": 10})
    joined = Presence(group="g", member="a", topics=["orders"], instance="a", generation=-1)
    state.on_presence(joined, time.monotonic())
    assert state.next_wakeup() is not None  # it waits with a deadline, as it mostly does
    g = ManagedGroup("g", state, 1)
    task = asyncio.create_task(_unpublishing_loop(cfg, Metrics()).run(g))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    g.wake.set()  # the wake and the cancellation in the same turn
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=5)
    assert task in done, "the loop went on after it was cancelled"
    assert task.cancelled()
