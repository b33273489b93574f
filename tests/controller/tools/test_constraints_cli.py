"""Operator constraints end to end: ``ballast constraints`` pins a partition and caps a
member of a running daemon's group, the fleet applies it, and a restarted daemon still
holds them (read back from the constraints topic) without moving anything."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest

from controller.tools import dev, embedded
from controller.tools.simfleet import Fleet

from .test_operator_cli import BIN, acli, as_json

pytestmark = pytest.mark.integration


def _daemon(stack: dev.DevStack, log: Path) -> subprocess.Popen[bytes]:
    with log.open("a") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [BIN, "run", "--config", str(stack.config)], stderr=out, stdout=subprocess.DEVNULL
        )


async def test_constraints_are_applied_and_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "dev"
    http_port = embedded.free_port()
    up = subprocess.run(
        [BIN, "dev", "up", "--dir", str(state), "--mqtt", "amqtt", "--kafka-port", str(embedded.free_port()),
         "--mqtt-port", str(embedded.free_port()), "--http-port", str(http_port)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    stack = dev.find(state)
    assert stack is not None
    env = {**os.environ, "BALLAST_URL": f"http://127.0.0.1:{http_port}"}
    env.pop("BALLAST_TOKEN", None)
    with_token = {**env, "BALLAST_TOKEN_FILE": str(stack.token_file)}
    daemon = _daemon(stack, tmp_path / "daemon.log")
    fleet = Fleet(f"127.0.0.1:{stack.kafka_port}", stack.mqtt_port, dev.GROUP)
    pinned = (dev.TOPIC, 5)
    try:
        await embedded.wait_until_ready(http_port, proc=daemon)
        await fleet.start()
        for member in ("a", "b", "c"):
            await fleet.join(member, [dev.TOPIC])
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [4, 4, 4]
        )

        # Bad arguments are named before anything is sent; contradictions by the daemon.
        bad = await acli("constraints", dev.GROUP, "--max-partitions", "a=lots", env=with_token)
        assert bad.returncode == 2
        assert "expected MEMBER=COUNT, got 'a=lots'" in bad.stderr
        clash = await acli(
            "constraints", dev.GROUP, "--pin", f"{dev.TOPIC}:0=a", "--pin", f"{dev.TOPIC}:1=a",
            "--max-partitions", "a=1", env=with_token,
        )  # fmt: skip
        assert clash.returncode == 2  # a request that cannot hold: a usage error
        assert "max_partitions['a'] is 1 but 2 partitions are pinned to it" in clash.stderr
        assert (
            await acli("constraints", dev.GROUP, "--pin", f"{dev.TOPIC}:3=c", env=env)
        ).returncode == 4

        view = as_json(await acli(
            "constraints", dev.GROUP, "--pin", f"{dev.TOPIC}:5=c", "--max-partitions", "a=2",
            "-o", "json", env=with_token,
        ))  # fmt: skip
        assert view["overrides"]["max_partitions"] == {"a": 2}
        assert view["violations"] == []

        def applied() -> bool:
            # a's two partitions are revoked before b and c are granted them: [2, 4, 4]
            # is a moment of the move, [2, 5, 5] its end.
            counts = sorted(len(m.partitions) for m in fleet.members.values())
            return counts == [2, 5, 5] and len(fleet.members["a"].partitions) == 2

        await fleet.wait_for(applied, timeout=30)
        assert pinned in {tuple(p) for p in fleet.members["c"].partitions}
        table = (await acli("constraints", dev.GROUP, "-o", "table", env=env)).stdout
        assert ["pin", f"{dev.TOPIC}:5", "c", "admin", "API"] in [
            r.split() for r in table.splitlines()
        ]
        described = as_json(await acli("describe", dev.GROUP, "-o", "json", env=env))
        assert described["members"]["a"]["max_partitions"] == 2
        assert described["members"]["c"]["pinned"] == 1

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        before = {n: sorted(map(tuple, m.partitions)) for n, m in fleet.members.items()}
        daemon = _daemon(stack, tmp_path / "daemon.log")
        await embedded.wait_until_ready(http_port, proc=daemon)
        again = as_json(await acli("constraints", dev.GROUP, "-o", "json", env=env))
        assert again["overrides"] == view["overrides"]
        assert again["effective"]["pins"] == [{"topic": dev.TOPIC, "partition": 5, "member": "c"}]
        await asyncio.sleep(3)  # the fleet's presence is heard again; nothing may move
        assert {n: sorted(map(tuple, m.partitions)) for n, m in fleet.members.items()} == before

        # Typos are refused, one line each, exit 2; nothing is stored.
        for args, says in (
            (["--pin", f"{dev.TOPIC}:99=a"], f"{dev.TOPIC} has 12 partition(s), 0 to 11"),
            (["--pin", "nosuchtopic:0=a"], "the group reads no topic 'nosuchtopic'"),
            (["--pin", f"{dev.TOPIC}:2=ghost"], "no member 'ghost' in the group"),
            (["--unpin", f"{dev.TOPIC}:7"], "no pin of the admin API to remove"),
            (["--max-partitions", "ghost=1"], "--allow-unknown-members"),
        ):
            refused = await acli("constraints", dev.GROUP, *args, env=with_token)
            assert refused.returncode == 2, (args, refused.stderr)
            assert says in refused.stderr
            assert refused.stderr.count("\n") == 1
        assert (
            as_json(await acli("constraints", dev.GROUP, "-o", "json", env=env))["overrides"]
            == (view["overrides"])
        )
        # A member that has not joined yet may be named on purpose.
        provisioned = await acli(
            "constraints", dev.GROUP, "--max-partitions", "later=3", "--allow-unknown-members",
            "-o", "json", env=with_token,
        )  # fmt: skip
        assert provisioned.returncode == 0, provisioned.stderr
        assert as_json(provisioned)["overrides"]["max_partitions"] == {"a": 2, "later": 3}

        # Caps that leave partitions unread: refused with --strict, else a warning at once
        # and a degraded group with "-" rows until they are lifted.
        stranding = ["--max-partitions", "b=0", "--max-partitions", "c=5"]
        strict = await acli("constraints", dev.GROUP, *stranding, "--strict", env=with_token)
        assert strict.returncode == 4
        assert "5 partition(s) would have no reader" in strict.stderr
        warned = await acli("constraints", dev.GROUP, *stranding, "-o", "json", env=with_token)
        assert warned.returncode == 0, warned.stderr
        assert "warning: 5 partition(s)" in warned.stderr
        assert as_json(warned)["left_unread"] == 5

        for _ in range(60):  # the next rebalance applies the caps
            status = await acli("status", "-o", "json", env=env)
            if as_json(status)["groups"][dev.GROUP]["state"] == "degraded":
                break
            await asyncio.sleep(0.5)
        else:
            raise AssertionError("the group never showed as degraded")
        assert "degraded" in (await acli("status", "-o", "table", env=env)).stdout
        rows = (await acli("describe", dev.GROUP, "--partitions", "-o", "table", env=env)).stdout
        assert sum(1 for r in rows.splitlines() if r.split()[2:3] == ["-"]) == 5
        assert "5 partition(s) have no reader" in rows

        cleared = as_json(await acli(
            "constraints", dev.GROUP, "--unpin", f"{dev.TOPIC}:5", "--no-max-partitions", "a",
            "--no-max-partitions", "b", "--no-max-partitions", "c", "--no-max-partitions",
            "later", "-o", "json", env=with_token,
        ))  # fmt: skip
        assert cleared["effective"] == {"pins": [], "max_partitions": {}, "racks": {}}
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [4, 4, 4],
            timeout=30,
        )
    finally:
        await fleet.stop()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        subprocess.run([BIN, "dev", "down", "--dir", str(state)], capture_output=True, check=False)
