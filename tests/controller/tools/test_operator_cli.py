"""The README's path from the demo to a real controller, as a user walks it: ``ballast dev
up`` leaves brokers running, ``ballast run`` with the config it wrote, a fleet joins, and
the operator commands (``status``, ``describe``, ``pause``, ``resume``, ``rebalance``,
``drain``, ``undrain``) see and act on the running daemon, with the token from a file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controller.tools import dev, embedded
from controller.tools.simfleet import Fleet

pytestmark = pytest.mark.integration

BIN = str(Path(sys.executable).parent / "ballast")


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [BIN, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    return result


async def acli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``cli`` off the event loop: a test's simulated fleet shares that loop, and a CLI
    that takes seconds on a loaded machine would otherwise silence its MQTT keepalives
    until the broker ends the members' sessions."""
    return await asyncio.to_thread(cli, *args, env=env)


def _moved_by_reason(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "ballast_partitions_moved"
        for s in family.samples
        if s.name.endswith("_total") and s.value
    }


def _gauge(port: int, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return sample.value
    return None


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def test_dev_up_run_and_operate(tmp_path: Path) -> None:
    state = tmp_path / "dev"
    http_port = embedded.free_port()
    up = subprocess.run(
        [
            BIN,
            "dev",
            "up",
            "--dir",
            str(state),
            "--mqtt",
            "amqtt",  # the simulated fleet logs in anonymously
            "--kafka-port",
            str(embedded.free_port()),
            "--mqtt-port",
            str(embedded.free_port()),
            "--http-port",
            str(http_port),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert up.returncode == 0, up.stderr
    stack = dev.find(state)
    assert stack is not None
    assert dev.running(stack)
    assert f"ballast run --config {state}/ballast.yaml" in up.stdout
    # A second `up` refuses instead of starting twice.
    again = subprocess.run(
        [BIN, "dev", "up", "--dir", str(state)], capture_output=True, text=True, check=False
    )
    assert again.returncode == 2
    assert "already running" in again.stderr

    # The embedded Tansu answers InitProducerId with an error: asking it for an idempotent
    # producer is one line naming the key to change, exit 2 (not a traceback).
    refused = await acli(
        "run", "--config", str(stack.config),
        env={**os.environ, "BALLAST_KAFKA__IDEMPOTENT_PRODUCER": "true", "BALLAST_LOGGING__FORMAT": "json"},
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    (failed,) = [
        e for e in map(json.loads, refused.stderr.splitlines()) if e["event"] == "startup_failed"
    ]
    assert "kafka.idempotent_producer: false" in failed["error"]

    env = {**os.environ, "BALLAST_URL": f"http://127.0.0.1:{http_port}"}
    env.pop("BALLAST_TOKEN", None)
    env.pop("BALLAST_TOKEN_FILE", None)
    with_token = {**env, "BALLAST_TOKEN_FILE": str(stack.token_file)}
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [BIN, "run", "--config", str(stack.config)], stderr=log, stdout=subprocess.DEVNULL
    )
    fleet = Fleet(f"127.0.0.1:{stack.kafka_port}", stack.mqtt_port, dev.GROUP)
    try:
        await embedded.wait_until_ready(http_port, proc=daemon)
        await fleet.start()
        for member in ("a", "b"):
            await fleet.join(member, [dev.TOPIC])
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6]
        )

        status = as_json(await acli("status", "-o", "json", env=env))
        group = status["groups"][dev.GROUP]
        assert (group["members"], group["partitions"], group["revoking"]) == (2, 12, 0)
        assert status["replica"]
        table = (await acli("status", env=env)).stdout  # a table even into a pipe
        assert table.splitlines()[1].split()[:2] == ["GROUP", "GENERATION"]
        assert yaml.safe_load((await acli("status", "-o", "yaml", env=env)).stdout) == as_json(
            await acli("status", "-o", "json", env=env)
        )
        every = as_json(await acli("describe", "-o", "json", env=env))  # no group: all it leads
        assert list(every) == [dev.GROUP]
        assert sorted(every[dev.GROUP]["members"]) == ["a", "b"]
        watching = subprocess.Popen(
            [BIN, "status", "--watch", "0.2"], env=env, stdout=subprocess.PIPE, text=True
        )
        # Interrupted once it has shown the table three times: a signal before its
        # handler is installed (a loaded machine, a slow import) is another exit.
        shown = await asyncio.to_thread(_lines_until, watching, "GROUP  ", 3)
        watching.send_signal(signal.SIGINT)
        await asyncio.to_thread(watching.communicate, timeout=30)
        assert watching.returncode == 130
        assert shown.count("GROUP  ") >= 3, shown  # shown again and again
        assert dev.GROUP in table
        view = as_json(await acli("describe", dev.GROUP, "-o", "json", env=env))
        assert sorted(view["members"]) == ["a", "b"]
        assert {m["state"] for m in view["members"].values()} == {"active"}
        described = (
            await acli("describe", dev.GROUP, "--partitions", "-o", "table", env=env)
        ).stdout
        assert "MEMBER" in described
        assert [
            "TOPIC", "PARTITION", "MEMBER", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "SMOOTHED-LAG",
        ] in [line.split() for line in described.splitlines()]  # fmt: skip
        wide = (await acli("describe", dev.GROUP, "--partitions", "-o", "wide", env=env)).stdout
        assert "INSTANCE" in wide.split()
        rows = as_json(await acli("describe", dev.GROUP, "--partitions", "-o", "json", env=env))[
            "partitions"
        ]
        assert sorted((r["topic"], r["partition"]) for r in rows) == [
            (dev.TOPIC, p) for p in range(12)
        ]
        assert {r["member"] for r in rows} == {"a", "b"}
        assert all(isinstance(r["lag"], int) for r in rows)
        # The last lag poll's offsets (one every 5 s), as kafka-consumer-groups shows them.
        for _ in range(40):
            rows = await acli("describe", dev.GROUP, "--partitions", "-o", "json", env=env)
            polled = as_json(rows)["partitions"]
            if all(r["log_end"] is not None for r in polled):
                break
            await asyncio.sleep(0.5)
        assert all(
            r["raw_lag"]
            == r["log_end"] - (r["log_end"] if r["committed"] is None else r["committed"])
            for r in polled
        )
        assert all(r["instance"] for r in polled)
        assert "partitions" not in view  # only when asked: it is O(partitions)

        # Actions need the token; without it: one line, exit 4, and what to set.
        denied = await acli("drain", dev.GROUP, "a", env=env)
        assert denied.returncode == 4
        assert "BALLAST_TOKEN_FILE" in denied.stderr
        assert denied.stderr.count("\n") == 1
        drained = as_json(await acli("drain", dev.GROUP, "a", "-o", "json", env=with_token))
        assert drained["drained"] == ["a"]
        await fleet.wait_for(lambda: len(fleet.members["a"].partitions) == 0, timeout=30)
        view = as_json(await acli("describe", dev.GROUP, "-o", "json", env=env))
        assert view["members"]["a"]["state"] == "drained"
        # A lag poll landing in the same coalescing window adds its reason to the step.
        assert "drain" in view["recent_rebalances"][-1]["reasons"]
        # Idempotent, like pause and resume: again is 0 and changes nothing.
        assert (await acli("drain", dev.GROUP, "a", env=with_token)).returncode == 0
        assert (await acli("undrain", dev.GROUP, "a", env=with_token)).returncode == 0
        assert (await acli("undrain", dev.GROUP, "a", env=with_token)).returncode == 0
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6], timeout=30
        )
        # Every partition that changed reader is counted under why: a's six, twice.
        moved = _moved_by_reason(http_port)
        assert (moved.get("drain"), moved.get("undrain")) == (6, 6), moved
        assert (
            "drain (drain a): 2 member(s) changed, moved 6"
            in (await acli("describe", dev.GROUP, "-o", "table", env=env)).stdout
        )
        # The last member that may read the topic: refused (exit 4) unless --force;
        # forced, nothing unread looks healthy (degraded, every partition unassigned).
        assert (await acli("drain", dev.GROUP, "a", env=with_token)).returncode == 0
        last = await acli("drain", dev.GROUP, "b", env=with_token)
        assert last.returncode == 4
        assert "last member that may read" in last.stderr
        forced = await acli("drain", dev.GROUP, "b", "--force", env=with_token)
        assert forced.returncode == 0, forced.stderr
        assert "nobody is left to read" in forced.stdout
        await fleet.wait_for(lambda: all(not m.partitions for m in fleet.members.values()), 30)
        for _ in range(60):
            summary = as_json(await acli("status", "-o", "json", env=env))["groups"][dev.GROUP]
            if summary["unassigned"] == 12:
                break
            await asyncio.sleep(0.25)
        assert (summary["state"], summary["unassigned"]) == ("degraded", 12), summary
        assert as_json(await acli("describe", dev.GROUP, "-o", "json", env=env))[
            "unread_topics"
        ] == [dev.TOPIC]
        assert _gauge(http_port, "ballast_group_partitions", state="unassigned") == 12
        for member in ("a", "b"):
            assert (await acli("undrain", dev.GROUP, member, env=with_token)).returncode == 0
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6], timeout=30
        )
        for action in ("pause", "resume", "rebalance"):
            done = await acli(action, dev.GROUP, "-o", "table", env=with_token)
            assert done.returncode == 0, done.stderr
            assert dev.GROUP in done.stdout

        unknown = await acli("describe", "nope", env=env)
        assert unknown.returncode == 4
        assert "does not lead a group 'nope'" in unknown.stderr
        not_member = await acli("drain", dev.GROUP, "ghost", env=with_token)
        assert not_member.returncode == 4
        assert "no member 'ghost'" in not_member.stderr
        wrong = await acli("status", "--url", f"http://127.0.0.1:{http_port}/elsewhere", env=env)
        assert wrong.returncode == 4
        assert "not a Ballast controller API" in wrong.stderr
    finally:
        await fleet.stop()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        log.close()
        down = subprocess.run(
            [BIN, "dev", "down", "--dir", str(state)], capture_output=True, text=True, check=False
        )
    assert daemon.returncode == 0  # SIGTERM: a clean drain
    assert down.returncode == 0
    assert "stopped" in down.stdout
    assert not dev.running(stack)
    assert dev.find(state) is None


def _lines_until(proc: subprocess.Popen[str], marker: str, times: int) -> str:
    """What ``proc`` wrote until ``marker`` appeared ``times`` times (or it ended)."""
    assert proc.stdout is not None
    seen: list[str] = []
    while sum(marker in line for line in seen) < times:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
    return "".join(seen)
