"""What an operator did survives the controller: a drain acknowledged by the constraints
topic is applied by the next controller even when the one that took it was killed
between storing it and acting on it (fault point ``admin.after_save``), and a pause
survives a restart. Real ``ballast run`` processes, Tansu, amqtt, a simulated fleet."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from controller.tools import embedded
from controller.tools.simfleet import Fleet
from tests.brokers import kafka_yaml, start_daemon

pytestmark = pytest.mark.integration

TOKEN = "admin-Token-0123456789abcdef"


def _call(port: int, path: str, method: str = "GET") -> dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if method != "GET":
        request.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        data: dict[str, Any] = json.loads(answer.read())
    return data


async def _until_logged(log: Path, event: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(json.loads(line).get("event") == event for line in _lines(log)):
        assert time.monotonic() < deadline, f"{event} never logged"
        await asyncio.sleep(0.1)


def _lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("{")]


async def test_a_drain_and_a_pause_survive_the_controller(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
) -> None:
    group = names[0]
    port = embedded.free_port()
    config = tmp_path / "ballast.yaml"
    config.write_text(
        f"kafka: {kafka_yaml(kafka)}\n"
        f"mqtt: {{port: {mqtt.port}, client_id: ctl-{group}, keepalive: 1}}\n"
        "rebalance: {delay: 200ms, leave_grace: 6s, handoff_timeout: 5s}\n"
        "lag: {source: none}\n"
        f"groups: [{{name: {group}}}]\n"
        "signing: {required: false}\n"
        f"http: {{port: {port}, admin_token: {TOKEN}}}\n"
        "logging: {format: json}\n"
    )
    first = tmp_path / "first.log"
    daemon = start_daemon(config, first, env={"BALLAST_FAULT_POINTS": "admin.after_save"})
    fleet = Fleet(kafka.address, mqtt.port, group, keepalive=1)
    procs = [daemon]
    try:
        await embedded.wait_until_ready(port, proc=daemon)
        await fleet.start()
        for member in ("w1", "w2", "w3"):
            await fleet.join(member, [topic])
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [4, 4, 4]
        )

        # The drain is stored, then the controller freezes before applying it; killed.
        asking = asyncio.create_task(
            asyncio.to_thread(_call, port, f"/v1/groups/{group}/members/w3/drain", "POST")
        )
        await _until_logged(first, "fault_point")
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(10)
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            await asking
        assert len(fleet.members["w3"].partitions) == 4  # not applied by the first one

        second = start_daemon(config, tmp_path / "second.log")
        procs.append(second)
        await embedded.wait_until_ready(port, proc=second)
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [0, 6, 6],
            timeout=30,
        )
        view = await asyncio.to_thread(_call, port, f"/v1/groups/{group}")
        assert view["drained"] == ["w3"]
        assert view["members"]["w3"]["state"] == "drained"

        # A pause outlives a restart too; the drained member stays empty meanwhile.
        await asyncio.to_thread(_call, port, f"/v1/groups/{group}/pause", "POST")
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
        third = start_daemon(config, tmp_path / "third.log")
        procs.append(third)
        await embedded.wait_until_ready(port, proc=third)
        view = await asyncio.to_thread(_call, port, f"/v1/groups/{group}")
        assert view["paused"] is True
        assert view["drained"] == ["w3"]
        resumed = await asyncio.to_thread(_call, port, f"/v1/groups/{group}/resume", "POST")
        assert resumed["paused"] is False
        await asyncio.to_thread(_call, port, f"/v1/groups/{group}/members/w3/undrain", "POST")
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [4, 4, 4],
            timeout=30,
        )
    finally:
        await fleet.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
