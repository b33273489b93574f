"""Records no Ballast process wrote, on real brokers (Tansu, amqtt): a poison record that
stays in the compacted topics never stops a start, a restart or a member; with signing
on, a grant forged by anyone who can produce to the topic changes nothing for members,
for a takeover, or for ``ballast audit`` (which reports it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from controller.client.consumer import ManagedConsumer
from controller.client.grants import INVALID_RECORDS
from controller.config import Config
from controller.runtime.daemon import Controller
from controller.tools import embedded
from controller.tools.audit import run_audit
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER
from controller.wire.records import Assignment
from controller.wire.signing import Signer, Verifier, generate
from tests.brokers import make_config, managed_member

pytestmark = [pytest.mark.integration, pytest.mark.compat]

POISON = b"[" * 1100


async def _write(
    address: str,
    topic: str,
    key: bytes,
    value: bytes,
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=address, linger_ms=0)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key, headers=headers or [])
    finally:
        await producer.stop()


async def _until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _holds_all(member: ManagedConsumer) -> Callable[[], bool]:
    return lambda: len(member.assignment) == 12


async def _poll(*members: ManagedConsumer) -> None:
    """Apply what arrives (``getmany`` applies assignments), until cancelled."""
    while True:
        for m in members:
            await m.getmany(timeout_ms=20)


async def test_a_poison_record_in_the_compacted_topics_stops_no_start_and_no_member(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    group = names[0]
    cfg = make_config(kafka, mqtt, group)
    for attempt in range(2):  # a start, then a restart that meets the same records
        ctl = Controller(cfg)
        await ctl.start()
        try:
            if attempt == 0:
                await _write(kafka.address, cfg.assignments.name, f"{group}/w1".encode(), POISON)
                await _write(
                    kafka.address, cfg.assignments.constraints_topic, group.encode(), POISON
                )
                await _write(
                    kafka.address,
                    cfg.assignments.name,
                    group.encode(),
                    b'{"controller_epoch": ' + b"9" * 401 + b"}",
                )
                continue
            w1 = managed_member(kafka, mqtt, group, "w1", topic, auto_offset_reset="earliest")
            await w1.start()
            polling = asyncio.create_task(_poll(w1))
            try:
                await _until(_holds_all(w1), "w1 to hold every partition")
                assert w1.failure is None
            finally:
                polling.cancel()
                await w1.close()
            assert ctl.metrics.invalid.labels("assignment")._value.get() >= 2
            assert ctl.metrics.invalid.labels("constraints")._value.get() >= 1
        finally:
            await ctl.stop()
    rejected: list[str] = []
    reports = await run_audit(kafka.address, cfg.assignments.name, [group], 60.0, rejected=rejected)
    assert any(f"key b'{group}/w1'" in why for why in rejected), rejected
    assert all(r.ok for r in reports), [r.render() for r in reports]


async def test_with_signing_a_forged_grant_changes_nothing(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
) -> None:
    group = names[0]
    private, public = generate(tmp_path / "keys")
    cfg = make_config(kafka, mqtt, group, signing={"private_key_file": str(private)})
    assert isinstance(cfg, Config)
    ctl = Controller(cfg)
    await ctl.start()
    members = {
        n: managed_member(kafka, mqtt, group, n, topic, verify_key=public) for n in ("w1", "w2")
    }
    for m in members.values():
        await m.start()
    polling = asyncio.create_task(_poll(*members.values()))
    try:
        w1, w2 = members["w1"], members["w2"]
        await _until(lambda: len(w1.assignment) == len(w2.assignment) == 6, "6 and 6")
        held = {n: m.assignment for n, m in members.items()}
        generation = ctl.groups[group].state.reconciler.generation
        skipped = INVALID_RECORDS.labels("assignment")._value.get()

        # Every partition for w2, issued to its own process, at a generation far ahead:
        # unsigned, then signed with a key that is not the controller's.
        forged = Assignment(
            group=group,
            member="w2",
            generation=2000,
            controller_epoch=1,
            partitions=sorted((topic, p) for p in range(12)),
            topics=[topic],
            issued_at=time.time(),
            instance=w2._identity.instance,
        ).encode()
        key = f"{group}/w2".encode()
        headers = [(GENERATION_HEADER, b"2000"), (EPOCH_HEADER, b"1")]
        other = Signer(Ed25519PrivateKey.generate())
        await _write(kafka.address, cfg.assignments.name, key, forged, headers)
        await _write(
            kafka.address,
            cfg.assignments.name,
            key,
            forged,
            other.sign("assignments", key, forged, headers),
        )
        await _until(
            lambda: INVALID_RECORDS.labels("assignment")._value.get() >= skipped + 2,
            "w2 to skip both",
        )
        await asyncio.sleep(0.5)
        assert {n: m.assignment for n, m in members.items()} == held
        assert not w1.assignment & w2.assignment

        # A takeover reads the same log: it recovers what the controller signed, and
        # numbers its generations above the forgery's (an unverifiable record grants
        # nothing, but proves that its numbers were used: docs/fencing.md).
        await ctl.stop()
        ctl = Controller(cfg)
        await ctl.start()
        state = ctl.groups[group].state
        assert state.granted_members() == 2
        assert state.reconciler.generation >= 2000 > generation
        assert ctl.metrics.invalid.labels("assignment")._value.get() >= 2
        await asyncio.sleep(1.5)  # past rebalance_delay and leave_grace: nothing moves
        assert {n: m.assignment for n, m in members.items()} == held
    finally:
        polling.cancel()
        for m in members.values():
            await m.close()
        await ctl.stop()
    rejected: list[str] = []
    verifier = Verifier.from_file(public)
    reports = await run_audit(
        kafka.address, cfg.assignments.name, [group], 60.0, verifier=verifier, rejected=rejected
    )
    assert sum("signature" in why or "unsigned" in why for why in rejected) >= 2
    assert all(r.ok for r in reports), [r.render() for r in reports]
    unverified = await run_audit(kafka.address, cfg.assignments.name, [group], 60.0)
    assert not all(r.ok for r in unverified)  # without the key, the forgery looks real
