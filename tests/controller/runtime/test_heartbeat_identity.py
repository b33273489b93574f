"""Member identity on the Kafka heartbeat path, on a real broker under traffic: with
``membership.member_keys_dir``, a member that writes acknowledgements for another (the
forger: it tails the assignments topic and acknowledges each of w1's new grants at once,
as w1, with w1's instance) and a flood of ghost member ids change nothing. No record is
processed twice, no partition is held by two members at any sampled moment, and the
real members keep the whole topic between them."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from controller.client import PresenceOptions
from controller.client.consumer import ManagedConsumer
from controller.runtime.daemon import Controller
from controller.tools import embedded
from controller.wire.member_keys import HeartbeatSigner
from controller.wire.records import Assignment, DecodeError, Presence, assignment_key, decode
from tests.brokers import make_config
from tests.certs import member_keys
from tests.fleet_ledger import ManagedFleet

pytestmark = pytest.mark.integration

GHOSTS = 10_500


class Fleet(ManagedFleet):
    """Members whose presence is heartbeats signed with their own keys."""

    def __init__(
        self,
        kafka: embedded.BrokerProcess,
        mqtt: embedded.BrokerProcess,
        group: str,
        topic: str,
        *,
        keys: Path,
        heartbeats: str,
    ) -> None:
        super().__init__(kafka, mqtt, group, topic)
        self.keys, self.heartbeats = keys, heartbeats

    def presence(self, name: str) -> PresenceOptions:
        return PresenceOptions(
            via="kafka",
            heartbeat_topic=self.heartbeats,
            heartbeat_interval=0.5,
            member_key=self.keys / f"{name}.key",
        )

    async def join(self, name: str, **options: Any) -> ManagedConsumer:
        return await super().join(name, presence=self.presence(name), **options)


async def _forge_acks(
    address: str,
    assignments: str,
    heartbeats: str,
    *,
    group: str,
    victim: str,
    forger: HeartbeatSigner,
) -> None:
    """For every new record granting ``victim`` something, at once: the victim's
    acknowledgement of it, written as the victim, signed with the forger's own key."""
    reader = AIOKafkaConsumer(assignments, bootstrap_servers=address, auto_offset_reset="latest")
    producer = AIOKafkaProducer(bootstrap_servers=address, linger_ms=0)
    await reader.start()
    await producer.start()
    key = assignment_key(group, victim)
    try:
        async for msg in reader:
            if msg.key != key or msg.value is None:
                continue
            with contextlib.suppress(DecodeError):
                grant = decode(Assignment, msg.value, "forger")
                body = Presence(
                    group=group,
                    member=victim,
                    topics=grant.topics,
                    instance=grant.instance,
                    generation=grant.generation,
                    partitions=grant.partitions,
                ).encode()
                for headers in (forger.headers(key, body), []):  # w2's key, and none
                    await producer.send_and_wait(heartbeats, body, key=key, headers=headers)
    finally:
        await reader.stop()
        await producer.stop()


async def _ghost_flood(address: str, heartbeats: str, group: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=address, linger_ms=20)
    await producer.start()
    try:
        while True:
            for i in range(GHOSTS):
                member = f"ghost-{i}"
                body = Presence(group=group, member=member, topics=["x"]).encode()
                await producer.send(heartbeats, body, key=assignment_key(group, member))
            await producer.flush()
    finally:
        await producer.stop()


async def test_a_forger_and_a_ghost_flood_change_nothing(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
) -> None:
    group = names[0]
    heartbeats = f"{group}.heartbeats"
    keys = tmp_path / "keys"
    pubs = member_keys(keys, tmp_path / "pubs", ("w1", "w2", "w3"))
    cfg = make_config(
        kafka,
        mqtt,
        group,
        membership={
            "source": "kafka",
            "heartbeat_topic": heartbeats,
            "session_timeout": 3.0,
            "member_keys_dir": str(pubs),
        },
    )
    ctl = Controller(cfg)
    await ctl.start()
    fleet = Fleet(kafka, mqtt, group, topic, keys=keys, heartbeats=heartbeats)
    attacks: list[asyncio.Task[None]] = []
    try:
        await fleet.join("w1")
        await fleet.join("w2")
        await fleet.held_by(["w1", "w2"])
        fleet.start_traffic()
        forger = HeartbeatSigner.from_file(keys / "w2.key")
        attacks = [
            asyncio.create_task(
                _forge_acks(
                    kafka.address,
                    cfg.assignments.name,
                    heartbeats,
                    group=group,
                    victim="w1",
                    forger=forger,
                )
            ),
            asyncio.create_task(_ghost_flood(kafka.address, heartbeats, group)),
        ]
        await asyncio.sleep(2)
        await fleet.join("w3")  # w1 gives partitions up: its forged acks would hurry them
        await fleet.held_by(["w1", "w2", "w3"], timeout=60)
        await fleet.leave("w2")
        await fleet.held_by(["w1", "w3"], timeout=60)
        await asyncio.sleep(2)
        view = ctl.group_view(group)
        assert sorted(view["members"]) == ["w1", "w3"]  # type: ignore[call-overload]
        invalid = ctl.metrics.registry.get_sample_value(
            "ballast_invalid_records_total", {"source": "heartbeat"}
        )
        assert invalid is not None
        assert invalid > GHOSTS  # every ghost and every forged acknowledgement refused
        for attack in attacks:
            attack.cancel()
        await asyncio.gather(*attacks, return_exceptions=True)
        await fleet.stop_traffic()
        await fleet.all_processed(60)
    finally:
        for attack in attacks:
            attack.cancel()
        await fleet.stop()
        await ctl.stop()
    assert fleet.overlaps == []
    assert fleet.twice() == []
