"""Idle and slow connections against ``ballast run``: do the probes still answer?

Loopback only, no brokers: ``ballast run`` with its brokers unreachable stays alive and
not ready, serving HTTP (the API port and ``http.metrics_port``) and KEDA's scaler, which
is what a flood meets first. Two flooder processes open ``--connections`` sockets
between them, half of them idle and half trickling a header byte every 5 s, spread over
both HTTP ports and the scaler's, and (``--reopen``, the default) open a new one
whenever the daemon closes one; ``--no-reopen``: each socket is opened once and held
until the daemon closes it (20 000 idle and slow connections, as they arrive).
Meanwhile ``/healthz`` on each HTTP port and KEDA's ``IsActive`` are timed every 0.5 s
(answered UNAVAILABLE here: no group is led; any answer counts), and the daemon's open
file descriptors are sampled.

Two daemons, one after the other: ``bounded`` (the defaults: ``http.max_connections``
512 per listener, ``http.idle_timeout`` 15 s, ``keda.max_streams`` 1000) and
``unbounded`` (65 536 connections and a day of idleness, which is how the daemon behaved
before the bounds). Printed: one JSON object per daemon.

    python benchmarks/connection_flood.py --connections 20000 --seconds 30
    python benchmarks/connection_flood.py --connections 20000 --seconds 30 --no-reopen
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import grpc

from controller.tools import embedded

SCALER = "/externalscaler.ExternalScaler/IsActive"
# ScaledObjectRef{name: "x", scalerMetadata: {"group": "g"}} in protobuf's wire format
IS_ACTIVE_REQUEST = bytes.fromhex("0a0178") + bytes.fromhex("1a0a0a0567726f75701201") + b"g"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _flood(ports: list[int], count: int, seconds: float, reopen: bool) -> None:
    """Keep ``count`` sockets open against ``ports`` (``reopen``: a new one for each one
    closed); every other one trickles."""

    async def one(i: int) -> None:
        end = time.monotonic() + seconds
        opened = False
        while time.monotonic() < end and (reopen or not opened):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", ports[i % len(ports)])
            except OSError:
                await asyncio.sleep(0.5)
                continue
            opened = True
            try:
                while time.monotonic() < end and not reader.at_eof():
                    if i % 2:
                        writer.write(b"G")
                    try:
                        async with asyncio.timeout(5):
                            await reader.read(1024)
                    except TimeoutError:
                        continue
            except OSError:
                pass
            finally:
                writer.close()

    await asyncio.gather(*(one(i) for i in range(count)))


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)

    return {"p50": at(0.5), "p99": at(0.99), "max": at(1.0)}


async def _probe(api: int, metrics: int, keda: int, seconds: float, pid: int) -> dict[str, object]:
    timings: dict[str, list[float]] = {"healthz_api": [], "healthz_metrics": [], "keda": []}
    failures = dict.fromkeys(timings, 0)
    fds: list[int] = []
    timeout = aiohttp.ClientTimeout(total=5)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{keda}")
    is_active = channel.unary_unary(SCALER)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for name, port in (("healthz_api", api), ("healthz_metrics", metrics)):
            start = time.monotonic()
            try:
                async with (
                    aiohttp.ClientSession(timeout=timeout) as session,
                    session.get(f"http://127.0.0.1:{port}/healthz") as answer,
                ):
                    await answer.read()
                    ok = answer.status == 200
            except (aiohttp.ClientError, TimeoutError, OSError):
                ok = False
            if ok:
                timings[name].append(time.monotonic() - start)
            else:
                failures[name] += 1
        start = time.monotonic()
        try:
            await is_active(IS_ACTIVE_REQUEST, timeout=5)
            answered = True
        except grpc.aio.AioRpcError as exc:  # the scaler's own refusals start "keda:"
            answered = (exc.details() or "").startswith("keda:")
        if answered:
            timings["keda"].append(time.monotonic() - start)
        else:
            failures["keda"] += 1
        with contextlib.suppress(OSError):  # the daemon died: "alive" says so
            fds.append(len(os.listdir(f"/proc/{pid}/fd")))
        await asyncio.sleep(0.5)
    await channel.close()
    return {
        **{f"{k}_ms": _percentiles(v) for k, v in timings.items()},
        "failed": failures,
        "fds_max": max(fds, default=None),
    }


async def _one(
    mode: str, connections: int, seconds: float, reopen: bool, tmp: Path
) -> dict[str, object]:
    api, metrics, keda, dead = (_free_port() for _ in range(4))
    limits = (
        "max_connections: 65536, idle_timeout: 86400"
        if mode == "unbounded"
        else "max_connections: 512, idle_timeout: 15s"
    )
    config = tmp / f"{mode}.yaml"
    config.write_text(
        f"kafka: {{bootstrap_servers: '127.0.0.1:{dead}'}}\n"
        f"mqtt: {{host: 127.0.0.1, port: {dead}}}\n"
        "groups: [{name: g, autoscale: {min_members: 1}}]\n"
        f"http: {{port: {api}, metrics_port: {metrics}, {limits}}}\n"
        f"keda: {{enabled: true, port: {keda}"
        + (", max_streams: 100000" if mode == "unbounded" else "")
        + "}\n"
        "signing: {required: false}\nstartup: {timeout: 1h}\nlogging: {level: error}\n"
    )
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    floods: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", metrics), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError("the daemon did not listen") from None
                time.sleep(0.2)
        ports = f"{api},{metrics},{keda}"
        hold = seconds + 15
        floods = [
            subprocess.Popen(
                [sys.executable, __file__, "--flood", ports, str(connections // 2), str(hold)]
                + ([] if reopen else ["--no-reopen"])
            )
            for _ in range(2)
        ]
        await asyncio.sleep(5)  # the flood is in place
        out = await _probe(api, metrics, keda, seconds, daemon.pid)
        alive = daemon.poll() is None
        return {"daemon": mode, "connections": connections, "reopen": reopen, "alive": alive, **out}
    finally:
        for flood in floods:
            flood.kill()
            flood.wait()
        embedded.end_process(daemon, timeout=30)


def _raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--daemons", default="bounded,unbounded")
    parser.add_argument("--reopen", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--flood", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _raise_fd_limit()
    if args.flood:
        ports, count, hold = args.flood
        hosts = [int(p) for p in ports.split(",")]
        asyncio.run(_flood(hosts, int(count), float(hold), args.reopen))
        return
    with tempfile.TemporaryDirectory(prefix="ballast-flood-") as tmp:
        for mode in args.daemons.split(","):
            result = _one(mode, args.connections, args.seconds, args.reopen, Path(tmp))
            print(json.dumps(asyncio.run(result)))


if __name__ == "__main__":
    main()
