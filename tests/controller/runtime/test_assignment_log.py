"""A reader of one of Ballast's topics waits for it to appear in the cluster's metadata:
Apache Kafka answers a Metadata request without a topic for a moment after CreateTopics
(``ballast run`` on Kafka 4.4 stopped at start with "No partitions are currently
assigned" when its recovery reader asked too soon)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition as KafkaTP

from assignors import TopicPartition
from controller.config import Config
from controller.errors import UnreachableError
from controller.runtime import assignment_log
from controller.runtime.assignment_log import AssignmentLog, assigned_reader
from controller.runtime.daemon import Controller
from controller.runtime.publisher import AssignmentPublisher
from controller.tools import embedded
from controller.tools.simfleet import Fleet
from tests.brokers import make_config


async def test_a_reader_waits_for_a_topic_that_appears_late(kafka: embedded.BrokerProcess) -> None:
    async def create_later() -> None:
        await asyncio.sleep(1.0)
        await embedded.create_topics(kafka.address, {"appears-late": 3})

    later = asyncio.create_task(create_later())
    consumer, tps = await assigned_reader({"bootstrap_servers": kafka.address}, "appears-late", "t")
    await later
    await consumer.stop()
    assert tps == [KafkaTP("appears-late", p) for p in range(3)]


async def test_a_topic_that_never_appears_is_named(
    kafka: embedded.BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(assignment_log, "TOPIC_WAIT", 0.5)
    with pytest.raises(UnreachableError, match=r"'never-made'.* after 0\.5 s"):
        await assigned_reader({"bootstrap_servers": kafka.address}, "never-made", "t")


@pytest.mark.integration
@pytest.mark.compat
async def test_a_read_through_the_fences_ends_exactly_after_them(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """A takeover reads to the fence markers it wrote: their offsets are its end, on
    Tansu too (whose ListOffsets stops inside the last batch)."""
    group = names[0]
    cfg = make_config(
        kafka, mqtt, group, assignments={"name": f"assignments-{group}", "partitions": 3}
    )
    await embedded.create_topics(kafka.address, {cfg.assignments.name: 3})
    log, publisher = AssignmentLog(cfg), AssignmentPublisher(cfg)
    await publisher.start()
    try:
        assert (await log.catch_up()).floor == {}
        for epoch in (4, 5):
            fences = await publisher.publish_fence(group, epoch, "r")
            assert sorted(fences) == [0, 1, 2]
            view = await log.catch_up(through=fences)
            assert view.floor == {(group, p): epoch for p in range(3)}
    finally:
        await publisher.stop()
        await log.stop()


@pytest.mark.integration
async def test_a_standby_follows_what_the_leader_writes(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """A replica that leads nothing keeps its read of the log current, so that a takeover
    reads the last second's records instead of all since it started."""
    group, topic = names
    await embedded.create_topics(kafka.address, {topic: 12})
    ha = {
        "enabled": True,
        "shards": 1,
        "session_timeout": 3.0,
        "heartbeat_interval": 0.5,
        "election_group": f"ctl-{group}",
        "control_topic": f"control-{group}",
    }

    def replica(name: str) -> Config:
        return make_config(
            kafka,
            mqtt,
            group,
            ha={**ha, "replica_id": name},
            assignments={"name": f"assignments-{group}"},
        )

    leader, standby = Controller(replica("a")), Controller(replica("b"))
    fleet = Fleet(
        kafka.address, mqtt.port, group, keepalive=1, assignments_topic=f"assignments-{group}"
    )
    try:
        await leader.start()
        await fleet.wait_for(lambda: group in leader.groups)  # the first replica leads
        await standby.start()
        await fleet.start()
        for name in ("m1", "m2", "m3"):
            await fleet.join(name, [topic])
        await fleet.wait_for(lambda: len(fleet.owners()) == 12)
        granted = leader.groups[group].state.reconciler.granted

        def followed() -> dict[str, frozenset[TopicPartition]]:
            current = standby._log.view.group_records(group)  # what a takeover starts from
            return {m: r.record.held() for m, r in current.items() if r.record}

        await fleet.wait_for(lambda: followed() == granted)  # without a takeover
        assert group not in standby.groups
    finally:
        await fleet.stop()
        await standby.stop()
        await leader.stop()
