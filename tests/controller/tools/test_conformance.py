"""The conformance kit on real brokers: every Python binding and a member written from
docs/protocol.md alone keep every rule, and each deliberately broken variant of that
member is caught by exactly the rules it breaks (of those checked: its own and two it
keeps). The Java member's run is in tests/clients/test_java_member.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from controller.tools import embedded
from controller.tools.conformance import RULE_NAMES, run_conformance, scenarios

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent / "ballast"
COMMON = [
    "--bootstrap", "{bootstrap}", "--mqtt-port", "{mqtt_port}", "--group", "{group}",
    "--member", "{member}", "--topic", "{topic}", "--assignments-topic", "{assignments_topic}",
    "--out", "{out}",
]  # fmt: skip
SPEC_MEMBER = [sys.executable, "-m", "tests.controller.tools.spec_member", *COMMON]

#: Each break of the spec member, and the rules that must catch it.
CAUGHT_BY = {
    "epoch": {"own_epoch", "fence", "takeover"},
    "instance": {"instance"},
    "late-stop": {"revoke", "tombstone"},
    "late-stop-20ms": {"revoke", "tombstone"},
    "commit-after-ack": {"revoke", "tombstone"},
    "lazy-commit": {"revoke", "tombstone"},
    "poison": {"poison"},
    "all-partitions": {"own_partition"},
    "tombstone": {"tombstone"},
    "no-will": {"will"},
}


async def _outcomes(
    command: list[str],
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    tmp: Path,
    rules: tuple[str, ...] = (),
) -> dict[str, str]:
    findings = await run_conformance(
        command, bootstrap=kafka.address, mqtt_port=mqtt.port, rules=rules, workdir=tmp
    )
    return {f.rule: f"{f.outcome}: {f.detail}" if f.detail else f.outcome for f in findings}


@pytest.mark.parametrize("client", ["aiokafka", "confluent", "kafka-python"])
async def test_every_binding_keeps_every_rule(
    client: str, kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, tmp_path: Path
) -> None:
    command = [str(BIN), "worker", "--client", client, *COMMON]
    outcomes = await _outcomes(command, kafka, mqtt, tmp_path)
    assert set(outcomes) == set(RULE_NAMES)
    assert all(o == "pass" for o in outcomes.values()), outcomes


@pytest.mark.compat
async def test_a_member_written_from_the_specification_keeps_every_rule(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, tmp_path: Path
) -> None:
    outcomes = await _outcomes(SPEC_MEMBER, kafka, mqtt, tmp_path)
    assert set(outcomes) == set(RULE_NAMES)
    assert all(o == "pass" for o in outcomes.values()), outcomes


@pytest.mark.parametrize("broken", sorted(CAUGHT_BY))
async def test_a_broken_member_is_caught_by_the_rules_it_breaks(
    broken: str,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scenarios, "WILL_TIMEOUT", 6.0)  # its keepalive is 2 s
    expected = CAUGHT_BY[broken]
    checked = (*sorted(expected), "grant", "stale")  # and two it keeps: not a blanket fail
    outcomes = await _outcomes(
        [*SPEC_MEMBER, "--break", broken], kafka, mqtt, tmp_path, rules=checked
    )
    failed = {rule for rule, outcome in outcomes.items() if outcome.startswith("fail")}
    assert set(outcomes) == set(checked)
    assert failed == expected, outcomes


def test_the_command_line_reports_rule_by_rule_and_fails_on_a_broken_client(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess
) -> None:
    argv = [
        str(BIN), "conformance", "--bootstrap", kafka.address, "--mqtt-port", str(mqtt.port),
        "--rule", "instance", "--rule", "grant", "--", *SPEC_MEMBER,
    ]  # fmt: skip
    good = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.splitlines()[-1] == "2 passed, 0 failed"
    bad = subprocess.run(
        [*argv, "--break", "instance"], check=False, capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    assert any(line.startswith("FAIL  instance") for line in lines), bad.stdout
    assert any(line.startswith("PASS  grant") for line in lines), bad.stdout
    assert "consumed its predecessor's grant" in bad.stdout


def test_a_command_is_required() -> None:
    done = subprocess.run(
        [str(BIN), "conformance", "--"], check=False, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "give the client's command" in done.stderr
