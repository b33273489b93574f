"""The recommended member count from a live controller: members slower than the input
fall behind, the lag poll measures both rates, and the recommendation is served as the
``ballast_desired_members`` gauge, in ``/v1/groups/<g>`` and in ``describe``."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from aiokafka import AIOKafkaProducer

from controller.client import ManagedConsumer
from controller.config import AutoscaleSettings, GroupSettings
from controller.runtime.daemon import Controller
from controller.tools import embedded
from controller.tools.operator import render_describe
from tests.brokers import make_config, managed_member

pytestmark = pytest.mark.integration

PARTITIONS = 16
INPUT = 200.0  # records/s
#: Each member processes 5 records a batch and sleeps 0.25 s: 20 records/s.
BATCH, PAUSE = 5, 0.25


async def _slow(member: ManagedConsumer) -> None:
    while True:
        batch = await member.getmany(timeout_ms=200, max_records=BATCH)
        if batch:
            await member.commit()
            await asyncio.sleep(PAUSE)


async def _produce(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        n = 0
        began = time.monotonic()
        while True:
            await producer.send_and_wait(topic, b"x", partition=n % PARTITIONS)
            n += 1
            await asyncio.sleep(max(0.0, began + n / INPUT - time.monotonic()))
    finally:
        await producer.stop()


async def test_slow_members_get_a_recommendation_to_scale_out(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    group, topic = names
    await embedded.create_topics(kafka.address, {topic: PARTITIONS})
    cfg = make_config(kafka, mqtt, group, lag={"source": "poll", "poll_interval": 0.5})
    rule = AutoscaleSettings(
        max_members=50, drain_time=20.0, rate_window=4.0, scale_down_delay=0.0, start_time=2.0
    )
    cfg = cfg.model_copy(update={"groups": [GroupSettings(name=group, autoscale=rule)]})
    ctl = Controller(cfg)
    await ctl.start()
    members = [
        managed_member(kafka, mqtt, group, m, topic, auto_offset_reset="earliest")
        for m in ("a", "b")
    ]
    tasks: list[asyncio.Task[None]] = []
    try:
        for m in members:
            await m.start()
            tasks.append(asyncio.create_task(_slow(m)))
        tasks.append(asyncio.create_task(_produce(kafka.address, topic)))
        sizing: dict[str, object] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            sizing = ctl.group_view(group)["autoscale"] or {}  # type: ignore[assignment]
            if sizing.get("member_rate"):
                break
        assert sizing.get("member_rate"), sizing
        desired = sizing["desired"]
        assert isinstance(desired, int)
        # 200/s in, ~20/s per member: far more than two members are needed.
        assert 5 < desired <= PARTITIONS, sizing
        assert sizing["current"] == 2
        assert sizing["remove_first"] == []  # named only while fewer are wanted
        assert str(sizing["reason"]).startswith("input "), sizing
        gauge = ctl.metrics.registry.get_sample_value("ballast_desired_members", {"group": group})
        assert gauge is not None
        assert gauge >= 5
        text = render_describe(ctl.group_view(group))
        assert "desired members " in text
        assert "(now 2): input " in text
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for m in members:
            await m.close()
        await ctl.stop()


async def test_no_autoscale_section_no_recommendation(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    group, topic = names
    await embedded.create_topics(kafka.address, {topic: 2})
    ctl = Controller(make_config(kafka, mqtt, group, lag={"source": "poll", "poll_interval": 0.2}))
    await ctl.start()
    try:
        await asyncio.sleep(1.0)
        assert ctl.group_view(group)["autoscale"] is None
        assert (
            ctl.metrics.registry.get_sample_value("ballast_desired_members", {"group": group})
            is None
        )
    finally:
        await ctl.stop()
