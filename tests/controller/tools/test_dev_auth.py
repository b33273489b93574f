"""``ballast dev up`` authenticates MQTT by default (Mosquitto, a generated password per
member, the per-member ACL): its own workers join with their passwords; a member logged
in as another cannot make it leave; a wrong password and an anonymous login are
refused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from controller.config import Config
from controller.tools import apache_kafka, dev, embedded
from controller.wire.records import Presence, presence_topic

pytestmark = pytest.mark.integration

BIN = str(Path(sys.executable).parent / "ballast")


def _view(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/groups/{dev.GROUP}", timeout=2) as r:
        data: dict[str, Any] = json.loads(r.read())
    return data


async def _granted(port: int, want: dict[str, int], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        members = (await asyncio.to_thread(_view, port))["members"]
        got = {m: len(v["granted"]) for m, v in members.items()}
        if got == want:
            return
        assert time.monotonic() < deadline, f"granted {got}, expected {want}"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("broker", apache_kafka.BROKER_KINDS)
async def test_dev_up_authenticates_each_member_on_its_own_topic(
    tmp_path: Path, broker: apache_kafka.BrokerKind
) -> None:
    """On either Kafka broker (Tansu by default, ``--broker kafka``: Apache Kafka)."""
    if embedded.mosquitto_path() is None:
        pytest.fail("mosquitto is not installed (scripts/install-tools installs it)")
    http_port = embedded.free_port()
    up = subprocess.run(
        [BIN, "dev", "up", "--dir", str(tmp_path / "dev"), "--kafka-port", str(embedded.free_port()),
         "--mqtt-port", str(embedded.free_port()), "--http-port", str(http_port),
         "--broker", broker],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    stack = dev.find(tmp_path / "dev")
    assert stack is not None
    assert stack.mqtt_broker == "mosquitto"
    assert broker in stack.pids
    assert stack.members == dev.MEMBERS
    assert "--mqtt-password-file" in up.stdout
    assert f"--public-key {stack.public_key}" in up.stdout  # members verify by default
    assert Config.model_validate(yaml.safe_load(stack.config.read_text())).signing.signer()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = (tmp_path / "daemon.log").open("ab")
        procs.append(subprocess.Popen([BIN, "run", "--config", str(stack.config)], stderr=log))
        await embedded.wait_until_ready(http_port, proc=procs[0])
        for member in ("w1", "w2"):
            argv = [BIN, "worker", "--bootstrap", f"127.0.0.1:{stack.kafka_port}",
                    "--mqtt-port", str(stack.mqtt_port), "--mqtt-user", member,
                    "--mqtt-password-file", str(stack.password_file(member)),
                    "--public-key", str(stack.public_key),
                    "--group", dev.GROUP, "--topic", dev.TOPIC, "--member", member,
                    "--out", str(tmp_path / f"{member}.out")]  # fmt: skip
            errors = (tmp_path / f"{member}.log").open("ab")
            procs.append(subprocess.Popen(argv, stderr=errors))
        await _granted(http_port, {"w1": 6, "w2": 6})

        # w1's credentials, w2's topic: the broker drops the message and the Will.
        w1_password = stack.password_file("w1").read_text().strip()
        leaving = Presence(group=dev.GROUP, member="w2", topics=[dev.TOPIC], state="leaving")
        w2_topic = presence_topic("ballast", dev.GROUP, "w2")
        impostor = aiomqtt.Client(
            "127.0.0.1", stack.mqtt_port, username="w1", password=w1_password,
            identifier="impostor", will=aiomqtt.Will(w2_topic, b"", qos=1, retain=True),
        )  # fmt: skip
        async with impostor:
            await impostor.publish(w2_topic, leaving.encode(), qos=0)
            await impostor.publish(w2_topic, b"", qos=0, retain=True)
        await asyncio.sleep(2.0)  # past rebalance.delay: a leave would have moved w2's six
        await _granted(http_port, {"w1": 6, "w2": 6}, timeout=1.0)

        for user, password in (("w2", "wrong"), (None, None)):
            client = aiomqtt.Client(
                "127.0.0.1", stack.mqtt_port, timeout=5, username=user, password=password
            )
            with pytest.raises(aiomqtt.MqttError):
                await client.__aenter__()
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        dev.down(stack)
    assert not dev.running(stack)
    if broker == "kafka":
        assert "Apache Kafka" in up.stdout
    assert os.stat(stack.password_file("w1")).st_mode & 0o077 == 0
    assert os.stat(stack.signing_key).st_mode & 0o077 == 0


async def test_dev_up_on_apache_kafka_keeps_its_log_across_down_and_up(tmp_path: Path) -> None:
    """``dev up --broker kafka`` formats its storage once: after ``dev down`` a second
    ``dev up`` starts on the same log (it used to format again with a new cluster id,
    which Kafka refuses), so a topic created meanwhile is still there."""
    where, port = tmp_path / "dev", embedded.free_port()
    argv = [BIN, "dev", "up", "--dir", str(where), "--broker", "kafka", "--kafka-port", str(port),
            "--mqtt-port", str(embedded.free_port()), "--http-port", str(embedded.free_port())]  # fmt: skip
    for attempt in range(2):
        up = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert up.returncode == 0, up.stderr[-2000:]
        stack = dev.find(where)
        assert stack is not None
        try:
            admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
            await admin.start()
            try:
                if attempt == 0:
                    await admin.create_topics([NewTopic("kept", 3, 1)])
                else:
                    assert "kept" in await admin.list_topics()
            finally:
                await admin.close()
        finally:
            dev.down(stack)
