"""Changing how grants are signed on a running fleet keeps one reader per partition, on
real brokers under traffic: turning signing on (with ``signing.required: false`` first,
as docs/operations.md says, and straight to required), and replacing the key, each with
members on the old setting, the new one and both. Throughout: no record is processed
twice, no partition is held by two members at any sampled moment, the new tenure numbers
its epoch and generations above everything in the log, and ``ballast audit`` finds the
whole history (both tenures) exclusive."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from controller.client.consumer import ManagedConsumer
from controller.config import Config
from controller.core.views import member_state
from controller.runtime.daemon import Controller
from controller.tools import embedded
from controller.tools.audit import run_audit
from controller.wire.signing import Verifier, generate
from tests.brokers import make_config
from tests.fleet_ledger import ManagedFleet

pytestmark = pytest.mark.integration


class Fleet(ManagedFleet):
    """Members verifying with the keys each was given."""

    async def join_with(self, name: str, keys: Sequence[Path] | None) -> ManagedConsumer:
        return await self.join(name, verify_key=list(keys) if keys else None)


async def _switch(ctl: Controller, cfg: Config, group: str) -> tuple[Controller, int, int]:
    """Stop ``ctl`` and start a controller on ``cfg``: the old epoch and generation."""
    led = ctl.groups[group]
    epoch, generation = led.epoch, led.state.generation
    await ctl.stop()
    successor = Controller(cfg)
    await successor.start()
    return successor, epoch, generation


async def _until(check: object, what: str, timeout: float) -> None:
    assert callable(check)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _audited(
    kafka: embedded.BrokerProcess, cfg: Config, group: str, keys: list[Path]
) -> None:
    """The whole log read as one history: unverified (both tenures' records count) and,
    with ``keys``, as a member with those keys reads it."""
    for verifier in (None, Verifier.from_files(keys) if keys else None):
        reports = await run_audit(
            kafka.address, cfg.assignments.name, [group], 60.0, verifier=verifier
        )
        assert all(r.ok for r in reports), [r.render() for r in reports]


@pytest.mark.parametrize("required", [False, True], ids=["lenient-first", "straight-to-required"])
async def test_turning_signing_on_under_traffic_reads_nothing_twice(  # noqa: PLR0917 (fixtures)
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
    required: bool,
) -> None:
    group = names[0]
    private, public = generate(tmp_path / "keys")
    unsigned = make_config(kafka, mqtt, group)
    signed = make_config(
        kafka, mqtt, group, signing={"private_key_file": str(private), "required": required}
    )
    ctl = Controller(unsigned)
    await ctl.start()
    fleet = Fleet(kafka, mqtt, group, topic)
    try:
        await fleet.join_with("w1", None)  # the old setting: verifies nothing
        await fleet.join_with("w2", None)
        w3 = await fleet.join_with("w3", [public])  # the new setting, early
        await fleet.held_by(["w1", "w2"])
        fleet.start_traffic()
        await _until(lambda: member_state(ctl.groups[group], "w3") == "cannot-verify", "w3", 10)
        assert w3.assignment == frozenset()  # it can verify nothing an unsigned one writes

        ctl, epoch, generation = await _switch(ctl, signed, group)
        led = ctl.groups[group]
        assert led.epoch > epoch  # never an (epoch, generation) of the unsigned tenure
        assert led.state.generation >= generation
        await fleet.held_by(["w1", "w2", "w3"], timeout=60)
        corrected = ctl.metrics.stray_claims.labels(group)._value.get()
        # Lenient: the unsigned grants were adopted, then signed again; required: not
        # adopted, so w1 and w2 were corrected before anyone else got theirs.
        assert corrected == (2 if required else 0)
        await _until(lambda: led.state.behind_key() == 0, "every record signed again", 30)
        await fleet.stop_traffic()
        await fleet.all_processed()
    finally:
        await fleet.stop()
        await ctl.stop()
    assert fleet.overlaps == []
    assert fleet.twice() == [], f"processed twice: {fleet.twice()[:10]}"
    await _audited(kafka, signed, group, [public])


async def test_replacing_the_key_under_traffic_reads_nothing_twice(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
) -> None:
    """w1 keeps only the old key, w2 has both, w3 only the new one. Under the new key w1
    can apply nothing: it is given nothing and keeps reading its own partitions (never
    timed out to another member) until it is restarted with both keys."""
    group = names[0]
    private1, public1 = generate(tmp_path / "k1")
    private2, public2 = generate(tmp_path / "k2")
    first = make_config(kafka, mqtt, group, signing={"private_key_file": str(private1)})
    second = make_config(
        kafka,
        mqtt,
        group,
        signing={"private_key_file": str(private2), "previous_public_keys": [str(public1)]},
    )
    ctl = Controller(first)
    await ctl.start()
    fleet = Fleet(kafka, mqtt, group, topic)
    try:
        w1 = await fleet.join_with("w1", [public1])
        await fleet.join_with("w2", [public1, public2])
        await fleet.join_with("w3", [public2])
        await fleet.held_by(["w1", "w2"])
        fleet.start_traffic()
        held = w1.assignment

        ctl, epoch, _ = await _switch(ctl, second, group)
        led = ctl.groups[group]
        assert led.epoch > epoch
        await _until(lambda: member_state(led, "w1") == "cannot-verify", "w1 seen stuck", 20)
        # Past handoff_timeout (5 s) twice over: w1 still reads what it held, alone.
        await asyncio.sleep(2 * second.rebalance.handoff_timeout)
        assert w1.assignment == held
        assert ctl.metrics.handoff_timeouts.labels(group)._value.get() == 0
        assert led.state.behind_key() == 1  # w1

        await fleet.leave("w1")  # restarted with both keys
        await fleet.join_with("w1", [public1, public2])
        await fleet.held_by(["w1", "w2", "w3"], timeout=60)
        await _until(lambda: led.state.behind_key() == 0, "every member on the new key", 30)
        await fleet.stop_traffic()
        await fleet.all_processed()
    finally:
        await fleet.stop()
        await ctl.stop()
    assert fleet.overlaps == []
    assert fleet.twice() == [], f"processed twice: {fleet.twice()[:10]}"
    await _audited(kafka, second, group, [public1, public2])
