"""Fail-stop: a ``ManagedConsumer`` whose assignment reader, presence or revoke watchdog
dies stops reading at once, commits what it handed out, says it is leaving, and raises
from ``getmany``: the controller moves its partitions, and no record is processed by two
members. Each task is killed at a seeded random moment while the controller is
reassigning the member's partitions (a third member joining), on real Tansu and amqtt.

Without fail-stop (the tasks dying silently) the member goes on reading partitions the
controller gives to others once their revokes time out: the duplicates below."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from controller.client.consumer import ManagedConsumer
from controller.client.failure import FAIL_STOPS
from controller.runtime.daemon import Controller
from controller.tools import embedded
from tests.brokers import make_config
from tests.fleet_ledger import ManagedFleet

pytestmark = [pytest.mark.integration, pytest.mark.compat]

TASKS = ("assignments", "presence", "watchdog")


def _task(consumer: ManagedConsumer, name: str) -> asyncio.Task[None]:
    tasks = [*consumer._tasks, consumer._mqtt_task]
    return next(t for t in tasks if t is not None and t.get_name().endswith(f"-{name}"))


@pytest.mark.parametrize("task", TASKS)
async def test_a_member_whose_task_dies_releases_everything_and_nothing_is_read_twice(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    task: str,
) -> None:
    rng = random.Random(f"fail-stop-{task}")
    cfg = make_config(kafka, mqtt, names[0], rebalance={"handoff_timeout": 4.0})
    ctl = Controller(cfg)
    await ctl.start()
    fleet = ManagedFleet(kafka, mqtt, names[0], topic)
    before = FAIL_STOPS.labels(task)._value.get()
    try:
        victim = await fleet.join("a")
        await fleet.join("b")
        await fleet.held_by(["a", "b"])
        await fleet.produce(300)
        await fleet.all_processed()

        # A third member: the controller revokes from a and b; a's task dies meanwhile.
        feeding = asyncio.create_task(fleet.produce(600))
        await fleet.join("c")
        await asyncio.sleep(rng.uniform(0.0, 0.6))
        _task(victim, task).cancel()
        await feeding
        deadline = time.monotonic() + 20
        while "a" not in fleet.failed:
            assert time.monotonic() < deadline, "the member never noticed its task died"
            await asyncio.sleep(0.05)
        assert victim.assignment == frozenset()  # holds nothing
        assert victim.consumer.assignment() == set()
        await fleet.held_by(["b", "c"])
        await fleet.produce(300)
        await fleet.all_processed()
    finally:
        await fleet.stop()
        await ctl.stop()
    twice = fleet.twice()
    assert twice == [], f"processed twice after the {task} task died: {twice[:10]}"
    assert FAIL_STOPS.labels(task)._value.get() == before + 1
    assert task in str(fleet.failed["a"])
