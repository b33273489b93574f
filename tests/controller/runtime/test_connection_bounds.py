"""Connections from parties the daemon cannot trust, without brokers: idle and trickling
sockets are closed, a flood past ``http.max_connections`` evicts the idlest instead of
exhausting file descriptors, probes still get in, and metrics have a port of their own
that serves nothing of the API."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from controller.config import Config
from controller.runtime.daemon import Controller
from controller.runtime.http import HttpServer, serve
from controller.tools import embedded


def _cfg(**http: object) -> Config:
    return Config.model_validate({"groups": [{"name": "g"}], "http": {"port": 0, **http}})


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Controller, HttpServer]]:
    ctl = Controller(_cfg(**request.param))
    server = await serve(ctl, "127.0.0.1", 0)
    try:
        yield ctl, server
    finally:
        await server.cleanup()
        await ctl.stop()


def _closed(ctl: Controller, reason: str, listener: str = "api") -> float:
    value = ctl.metrics.registry.get_sample_value(
        "ballast_http_connections_closed_total", {"listener": listener, "reason": reason}
    )
    return value or 0.0


def _held(ctl: Controller, listener: str = "api") -> float:
    value = ctl.metrics.registry.get_sample_value(
        "ballast_http_connections", {"listener": listener}
    )
    assert value is not None
    return value


async def _get(port: int, path: str) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=10)  # a liveness bound, not a measurement
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as answer,
    ):
        return answer.status, await answer.text()


async def _ends(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection within 10 s (it reads EOF or a reset)."""
    try:
        async with asyncio.timeout(10):
            while await reader.read(1024):
                pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize("served", [{"idle_timeout": 0.3}], indirect=True)
async def test_idle_and_trickling_connections_are_closed(
    served: tuple[Controller, HttpServer],
) -> None:
    ctl, server = served
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
    slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", server.port)

    async def trickle() -> None:
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n":  # never the blank line
            if slow_writer.is_closing():
                return
            slow_writer.write(bytes([byte]))
            await asyncio.sleep(0.05)

    trickling = asyncio.create_task(trickle())
    try:
        assert await _ends(idle_reader)
        assert await _ends(slow_reader)
    finally:
        trickling.cancel()
        idle_writer.close()
        slow_writer.close()
    assert _closed(ctl, "idle") == 2
    status, _ = await _get(server.port, "/healthz")  # a real request is still served
    assert status == 200


@pytest.mark.parametrize("served", [{"max_connections": 50, "idle_timeout": 60}], indirect=True)
async def test_at_the_cap_the_idlest_connection_makes_room(
    served: tuple[Controller, HttpServer],
) -> None:
    ctl, server = served
    flood = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(500)]
    try:
        status, body = await _get(server.port, "/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        status, _ = await _get(server.port, "/v1/groups")
        assert status == 200
        deadline = time.monotonic() + 10  # a liveness bound: until all 502 were accepted
        while _closed(ctl, "evicted") + _held(ctl) < 500:
            assert time.monotonic() < deadline, (_closed(ctl, "evicted"), _held(ctl))
            await asyncio.sleep(0.05)
        assert _held(ctl) <= 50
        # the first connections were the idlest: the server closed them
        assert await _ends(flood[0][0])
    finally:
        for _, writer in flood:
            writer.close()


@pytest.mark.parametrize("served", [{"metrics_port": 0}], indirect=True)
async def test_metrics_have_a_port_that_serves_nothing_of_the_api(
    served: tuple[Controller, HttpServer],
) -> None:
    _, server = served
    assert server.metrics_port is not None
    assert server.metrics_port != server.port
    for path in ("/metrics", "/healthz", "/readyz"):
        status, _ = await _get(server.metrics_port, path)
        assert status in (200, 503), path  # readyz: 503 until recovered
    for path in ("/v1/groups", "/v1/leadership", "/v1/groups/g/constraints"):
        assert (await _get(server.metrics_port, path))[0] == 404, path
        assert (await _get(server.port, path))[0] != 404 or path.endswith("constraints"), path
    status, text = await _get(server.metrics_port, "/metrics")
    assert 'ballast_http_connections{listener="metrics"}' in text


def test_the_same_port_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="metrics_port must differ from port"):
        Config.model_validate(
            {"groups": [{"name": "g"}], "http": {"port": 9100, "metrics_port": 9100}}
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_a_flood_leaves_the_daemon_within_its_descriptor_bound(tmp_path: Path) -> None:
    """`ballast run` (its brokers unreachable: alive, not ready) under 5 000 connections
    that never send a request, on both ports: the probe answers, and the daemon's open
    file descriptors stay within 2 x max_connections (+16) of what it held before."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 6_000:
        pytest.skip(f"needs 6 000 file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    api, metrics, cap = _free_port(), _free_port(), 100
    dead = _free_port()  # nothing listens: the daemon stays alive and not ready
    config = tmp_path / "ballast.yaml"
    config.write_text(
        f"kafka: {{bootstrap_servers: '127.0.0.1:{dead}'}}\n"
        f"mqtt: {{host: 127.0.0.1, port: {dead}}}\n"
        "groups: [{name: g}]\n"
        f"http: {{port: {api}, metrics_port: {metrics}, max_connections: {cap}, "
        "idle_timeout: 60s}\n"
        "signing: {required: false}\n"
        "logging: {level: error}\n"
    )
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    flood: list[asyncio.StreamWriter] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert (await _get(metrics, "/healthz"))[0] == 200
                break
            except aiohttp.ClientError:
                assert daemon.poll() is None, daemon.stderr.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "the daemon did not listen within 60 s"
                await asyncio.sleep(0.2)
        before = _fds(daemon.pid)
        for i in range(5_000):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", (api, metrics)[i % 2])
            except OSError:  # the listen queue is full: the flood is refused at the door
                continue
            flood.append(writer)
        assert (await _get(metrics, "/healthz"))[0] == 200
        assert (await _get(api, "/healthz"))[0] == 200
        held = _fds(daemon.pid)
        # two listeners of `cap` each, and a few accepted sockets not closed yet
        assert held <= before + 2 * cap + 16, (before, held)
        assert daemon.poll() is None
    finally:
        for writer in flood:
            writer.close()
        embedded.end_process(daemon, timeout=30)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
