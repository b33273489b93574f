"""A refused login is permanent: it ends a member's start, ``ballast worker`` and ``ballast
run`` at once (no retry could change it) with one line naming the credential to check and
exit code 5, no traceback and no client left open. Without this, each waited for its
connect timeout (30 s, or ``startup.timeout``) and then failed as unreachable: the error
kinds below tell the two apart without timing anything. Real Mosquitto with passwords,
real Kafka."""

from __future__ import annotations

import gc
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.adapters.presence import MqttAuth, login_refused
from controller.client import PresenceOptions
from controller.client.consumer import ManagedConsumer
from controller.client.kafka_python import BallastKafkaConsumer
from controller.errors import CredentialsError
from controller.tools import embedded
from tests.brokers import kafka_yaml

pytestmark = pytest.mark.integration

BIN = str(Path(sys.executable).parent / "ballast")
USERS = {"controller": "controller-secret-1", "w1": "w1-secret-123456"}
WRONG = MqttAuth(username="w1", password="not-the-password")


@pytest.fixture
async def assignments(kafka: embedded.BrokerProcess, names: tuple[str, str]) -> str:
    """An assignments topic of the test's own (members wait for theirs to exist)."""
    topic = f"assignments-{names[0]}"
    await embedded.create_topics(kafka.address, {topic: 3})
    return topic


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.BrokerProcess]:
    if embedded.mosquitto_path() is None:
        pytest.fail("mosquitto is not installed (scripts/install-tools installs it)")
    with embedded.mosquitto(tmp_path_factory.mktemp("mqtt"), users=USERS).start() as broker:
        yield broker


def _wrong_login(
    kafka: embedded.BrokerProcess,
    mosquitto: embedded.BrokerProcess,
    names: tuple[str, str],
    assignments: str,
) -> dict[str, Any]:
    """Member w1 of the test's group with the wrong MQTT password, for any binding."""
    return {
        "group": names[0],
        "member": "w1",
        "topics": ["orders"],
        "bootstrap_servers": kafka.address,
        "assignments_topic": assignments,
        "presence": PresenceOptions(mqtt_port=mosquitto.port, mqtt_auth=WRONG),
    }


def test_only_credential_refusals_are_permanent() -> None:
    from paho.mqtt.packettypes import PacketTypes  # noqa: PLC0415
    from paho.mqtt.reasoncodes import ReasonCode  # noqa: PLC0415

    assert login_refused(ReasonCode(PacketTypes.CONNACK, identifier=135)) is not None
    assert login_refused(ReasonCode(PacketTypes.CONNACK, identifier=134)) is not None
    assert login_refused(ReasonCode(PacketTypes.CONNACK, identifier=136)) is None  # unavailable
    assert login_refused(ConnectionRefusedError("[Errno 111] Connection refused")) is None
    assert login_refused(OSError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"))


async def test_a_managed_consumer_whose_login_is_refused_fails_at_once_and_closes_all(
    kafka: embedded.BrokerProcess,
    mosquitto: embedded.BrokerProcess,
    names: tuple[str, str],
    assignments: str,
) -> None:
    member = ManagedConsumer(**_wrong_login(kafka, mosquitto, names, assignments))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CredentialsError, match=r"refused its login .*mqtt_auth") as refused:
            await member.start()
        del member
        gc.collect()  # an unclosed client warns when it is collected
    assert refused.value.exit_code == 5
    assert not [w for w in caught if "Unclosed" in str(w.message)], [str(w.message) for w in caught]


def test_a_sync_binding_whose_login_is_refused_fails_at_once(
    kafka: embedded.BrokerProcess,
    mosquitto: embedded.BrokerProcess,
    names: tuple[str, str],
    assignments: str,
) -> None:
    member = BallastKafkaConsumer(**_wrong_login(kafka, mosquitto, names, assignments))
    with pytest.raises(CredentialsError, match=r"refused its login"):
        member.start()


def test_ballast_worker_and_run_end_with_one_line_and_exit_5(
    kafka: embedded.BrokerProcess,
    mosquitto: embedded.BrokerProcess,
    names: tuple[str, str],
    assignments: str,
    tmp_path: Path,
) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    worker = subprocess.run(
        [BIN, "worker", "--bootstrap", kafka.address, "--mqtt-port", str(mosquitto.port),
         "--mqtt-user", "w1", "--mqtt-password-file", str(wrong), "--group", names[0],
         "--topic", "orders", "--member", "w1", "--out", str(tmp_path / "w1.out"),
         "--assignments-topic", assignments],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert worker.returncode == 5, worker.stderr
    assert "Traceback" not in worker.stderr
    assert "refused its login" in worker.stderr
    assert "Unclosed" not in worker.stderr

    config = tmp_path / "ballast.yaml"
    config.write_text(
        f"kafka: {kafka_yaml(kafka)}\n"
        f"mqtt: {{port: {mosquitto.port}, username: controller, password_file: {wrong}}}\n"
        f"groups: [{{name: {names[0]}}}]\n"
        "signing: {required: false}\n"
        f"assignments: {{name: run-{assignments}, constraints_topic: constraints-{names[0]}}}\n"
        "http: {port: 0}\n"
    )
    run = subprocess.run(
        [BIN, "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 5, run.stderr[-2000:]  # not 3 after startup.timeout (5 min)
    assert "Traceback" not in run.stderr
    assert "refused the controller's login" in run.stderr
    assert "mqtt.username" in run.stderr
