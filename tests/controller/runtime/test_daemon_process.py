"""``ballast run`` as a real process: HTTP surface, JSON logs, SIGKILL mid-handoff with
recovery, and a clean SIGTERM drain."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.tools import apache_kafka, embedded
from controller.tools.simfleet import Fleet
from tests.brokers import BROKER, kafka_yaml, restartable_broker, start_daemon

pytestmark = pytest.mark.integration


def _write_config(
    path: Path,
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    group: str,
    port: int,
    *,
    probe_interval: str = "5s",
) -> None:
    settings = {**json.loads(kafka_yaml(kafka)), "probe_interval": probe_interval}
    path.write_text(
        f"""
kafka: {json.dumps(settings)}
mqtt: {{port: {mqtt.port}, client_id: ctl-{group}, keepalive: 2}}
rebalance: {{delay: 200ms, leave_grace: 1s, handoff_timeout: 20s}}
lag: {{source: poll, poll_interval: 1s}}
groups: [{{name: {group}}}]
signing: {{required: false}}
http: {{host: 127.0.0.1, port: {port}}}
metrics: {{per_member: true, per_member_cap: 2}}
logging: {{format: json}}
"""
    )


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def test_daemon_process_http_logs_kill_and_drain(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
) -> None:
    group = names[0]
    port = embedded.free_port()
    config, log = tmp_path / "ballast.yaml", tmp_path / "daemon.log"
    _write_config(config, kafka, mqtt, group, port)
    proc = start_daemon(config, log)
    fleet = Fleet(kafka.address, mqtt.port, group, keepalive=1)
    double: list[str] = []
    try:
        await embedded.wait_until_ready(port, proc=proc)
        await fleet.start()
        fleet.on_apply = lambda _m: double.extend(
            str(tp) for tp, o in fleet.owners().items() if len(o) > 1
        )
        for m in ("a", "b"):
            await fleet.join(m, [topic])
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6]
        )

        status, body = await asyncio.to_thread(_get, port, f"/v1/groups/{group}")
        view = json.loads(body)
        assert status == 200
        assert sorted(view["members"]) == ["a", "b"]
        assert view["quality"]["count_spread"] == 0
        assert (await asyncio.to_thread(_get, port, "/v1/groups/nope"))[0] == 404
        status, body = await asyncio.to_thread(_get, port, "/metrics")
        text = body.decode()
        for metric in (
            f'ballast_group_members{{group="{group}"}} 2.0',
            f'ballast_group_partitions{{group="{group}",state="assigned"}} 12.0',
            "ballast_rebalances_total",
            "ballast_rebalance_latency_seconds_bucket",
            'ballast_connection_up{connection="mqtt"} 1.0',
            "ballast_ready 1.0",
        ):
            assert metric in text, metric
        assert text.count("ballast_member_partitions{") == 2  # capped per group

        # A join starts handoffs (a and b must revoke before c is granted); a member that
        # never acks keeps them pending while we SIGKILL the controller mid-handoff.
        stuck = fleet.members["a"]
        fleet.members.pop("a")  # stops applying and acking, presence stays
        await fleet.join("c", [topic])
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        fleet.members["a"] = stuck
        # Restart: it recovers the granted state and finishes the handoff without ever
        # granting a partition that its old owner has not released.
        proc = start_daemon(config, log)
        await embedded.wait_until_ready(port, proc=proc)
        await fleet.catch_up(stuck)  # it applies its revoke late, after the restart
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [4, 4, 4],
            timeout=30,
        )
        assert double == []
        epochs = {
            json.loads(line).get("epoch")
            for line in log.read_text().splitlines()
            if '"group_acquired"' in line
        }
        assert epochs == {1, 2}
    finally:
        await fleet.stop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    rebalances = [entry for entry in lines if entry["event"] == "rebalance"]
    assert rebalances
    for key in ("group", "generation", "reason", "moved", "duration_ms", "waited_ms", "skew"):
        assert key in rebalances[0]
    assert lines[-1]["event"] == "stopped"
    assert os.path.exists(log)


def test_a_busy_http_port_is_one_line_naming_the_key(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, tmp_path: Path
) -> None:
    """Another process holds ``http.port``: exit 2 with one JSON line that names the key
    (it was a 31-line traceback and an unclosed producer's complaint)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = tmp_path / "ballast.yaml"
        _write_config(config, kafka, mqtt, "busy", taken.getsockname()[1])
        log = tmp_path / "daemon.log"
        proc = start_daemon(config, log)
        assert proc.wait(60) == 2
    lines = log.read_text().splitlines()
    assert all(line.startswith("{") for line in lines), lines  # JSON lines, no traceback
    failed = [json.loads(line) for line in lines if '"startup_failed"' in line]
    assert len(failed) == 1
    assert failed[0]["error"].startswith("http.port: cannot listen on 127.0.0.1:")
    assert "Unclosed" not in log.read_text()


async def test_sigterm_while_kafka_is_down_stops_cleanly(
    mqtt: embedded.BrokerProcess, tmp_path: Path
) -> None:
    """The controller's broker is killed; SIGTERM then ends the daemon with exit 0 and its
    ``stopped`` line. aiokafka's consumer re-raised the cancellation of its own pending
    fetch from ``stop()``, which ended the daemon with exit 1 and a traceback. Meanwhile
    the clients' errors came once per message and 10 s, not once per attempt."""
    with apache_kafka.running(BROKER, tmp_path) as kafka:
        port = embedded.free_port()
        config = tmp_path / "ballast.yaml"
        _write_config(config, kafka, mqtt, "outage", port)
        log = tmp_path / "daemon.log"
        proc = start_daemon(config, log)
        await embedded.wait_until_ready(port, 60, proc)
        kafka.kill()
        await asyncio.sleep(8)  # its clients retry against the dead broker meanwhile
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 60) == 0, log.read_text()[-3000:]
    entries = [json.loads(line) for line in log.read_text().splitlines() if line]
    assert entries[-1]["event"] == "stopped"
    assert "Traceback" not in log.read_text()
    library = Counter(e["event"] for e in entries if e.get("logger", "").startswith("aiokafka"))
    assert library, "the outage was not even logged"
    assert max(library.values()) <= 2, library.most_common(3)


def _connection_up(port: int, name: str) -> float:
    body = _get(port, "/metrics")[1].decode()
    line = next(
        x
        for x in body.splitlines()
        if x.startswith(f'ballast_connection_up{{connection="{name}"}}')
    )
    return float(line.split()[-1])


async def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(check):
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout}s: {what}"
        await asyncio.sleep(0.2)


async def test_readiness_and_connection_up_follow_the_broker(
    mqtt: embedded.BrokerProcess, tmp_path: Path
) -> None:
    """The broker stops under a running controller: within a probe (1 s here) ``/readyz``
    is 503 and says why, ``ballast_connection_up{connection="kafka"}`` is 0 and
    ``/v1/health`` names the error; the broker comes back and all three follow. Before,
    the gauge said 1 and readiness 200 for as long as the process lived."""
    with restartable_broker(tmp_path) as kafka:
        port = embedded.free_port()
        config = tmp_path / "ballast.yaml"
        _write_config(config, kafka, mqtt, "probe", port, probe_interval="1s")
        log = tmp_path / "daemon.log"
        proc = start_daemon(config, log)
        try:
            await embedded.wait_until_ready(port, 60, proc)
            assert _connection_up(port, "kafka") == 1
            assert _connection_up(port, "mqtt") == 1
            kafka.stop()
            await _until(lambda: _get(port, "/readyz")[0] == 503, 15, "not ready")
            assert json.loads(_get(port, "/readyz")[1]) == {
                "ready": False,
                "waiting_for": ["kafka unreachable"],
            }
            assert _connection_up(port, "kafka") == 0
            health = json.loads(_get(port, "/v1/health")[1])
            assert health["connections"]["kafka"]["up"] is False
            assert health["connections"]["kafka"]["last_error"]
            assert health["connections"]["mqtt"]["up"] is True
            kafka.start(timeout=apache_kafka.start_timeout(BROKER))
            await _until(lambda: _get(port, "/readyz")[0] == 200, 60, "ready again")
            assert _connection_up(port, "kafka") == 1
            health = json.loads(_get(port, "/v1/health")[1])
            assert health["ready"] is True
            assert set(health["tasks"]) >= {"kafka-probe", "membership", "metadata"}
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 60)
    assert code == 0, log.read_text()[-3000:]
    events = [json.loads(line)["event"] for line in log.read_text().splitlines() if line]
    assert events.count("kafka_unreachable") == 1
    assert events.count("kafka_reachable") == 1
