"""KEDA's external scaler on a live controller, called the way KEDA calls it: a gRPC
client with stubs generated from KEDA's proto. The metric spec, the recommended count,
activity (once and streamed), and bad requests answered INVALID_ARGUMENT and counted."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiokafka import AIOKafkaProducer

from controller.config import AutoscaleSettings, GroupSettings
from controller.runtime import keda_scaler
from controller.runtime.daemon import Controller
from controller.runtime.keda_scaler import KedaScaler
from controller.tools import embedded
from tests.brokers import kafka_yaml, make_config, managed_member, start_daemon
from tests.keda import stubs

pytestmark = pytest.mark.integration

pb, pb_grpc = stubs()
#: keda.max_streams of the served scaler.
STREAMS = 20


@pytest.fixture
async def served(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> AsyncIterator[tuple[Controller, str, grpc.aio.Channel]]:
    """A controller leading ``group`` (autoscale on), 20 records waiting on its topic, and
    a channel to its scaler."""
    group, topic = names
    await embedded.create_topics(kafka.address, {topic: 2})
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()
    for i in range(20):
        await producer.send_and_wait(topic, b"x", partition=i % 2)
    await producer.stop()
    cfg = make_config(
        kafka, mqtt, group,
        lag={"source": "poll", "poll_interval": 0.3, "auto_offset_reset": "earliest"},
        keda={"enabled": True, "port": 0, "max_streams": STREAMS},
    )  # fmt: skip
    cfg = cfg.model_copy(
        update={"groups": [GroupSettings(name=group, autoscale=AutoscaleSettings(min_members=2))]}
    )
    ctl = Controller(cfg)
    scaler = KedaScaler(cfg, ctl.state, ctl.metrics)
    await scaler.start()
    await ctl.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{scaler.port}")
    member = managed_member(kafka, mqtt, group, "m", topic)  # so the group polls its topic
    try:
        await member.start()
        deadline = time.monotonic() + 30
        while ctl.group_view(group)["autoscale"] is None:
            assert time.monotonic() < deadline, "no recommendation within 30 s"
            await asyncio.sleep(0.1)
        yield ctl, group, channel
    finally:
        await member.close()
        await channel.close()
        await scaler.stop()
        await ctl.stop()


async def test_the_scaler_answers_as_keda_asks(
    served: tuple[Controller, str, grpc.aio.Channel],
) -> None:
    ctl, group, channel = served
    stub = pb_grpc.ExternalScalerStub(channel)
    ref = pb.ScaledObjectRef(name="fleet", namespace="prod", scalerMetadata={"group": group})
    spec = await stub.GetMetricSpec(ref)
    assert [(s.metricName, s.targetSizeFloat) for s in spec.metricSpecs] == [
        ("ballast-desired-members", 1.0)
    ]
    got = await stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref, metricName="ballast-desired-members")
    )
    desired = ctl.group_view(group)["autoscale"]["desired"]  # type: ignore[index]
    assert desired == 2  # min_members: one member, nothing measured yet
    assert [(v.metricName, v.metricValueFloat, v.metricValue) for v in got.metricValues] == [
        ("ballast-desired-members", 2.0, 2)
    ]
    assert (await stub.IsActive(ref)).result is True  # 20 records wait
    stream = stub.StreamIsActive(ref)
    first = await stream.read()
    assert first.result is True
    stream.cancel()


async def test_bad_requests_are_refused_and_counted(
    served: tuple[Controller, str, grpc.aio.Channel],
) -> None:
    ctl, _, channel = served
    stub = pb_grpc.ExternalScalerStub(channel)
    for metadata, says in (({}, "names no group"), ({"group": "other"}, "no autoscale settings")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetMetricSpec(pb.ScaledObjectRef(scalerMetadata=metadata))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert says in (err.value.details() or "")
    raw = channel.unary_unary("/externalscaler.ExternalScaler/IsActive")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await raw(b"\x0b\x00")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "wire type 3" in (err.value.details() or "")
    counted = ctl.metrics.registry.get_sample_value(
        "ballast_invalid_records_total", {"source": "keda"}
    )
    assert counted == 1


async def test_streams_are_capped_and_share_one_look_per_group(
    served: tuple[Controller, str, grpc.aio.Channel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """keda.max_streams streams are served and one more is RESOURCE_EXHAUSTED; while
    they are open and the group's activity does not change, the scaler looks at the
    group once a STREAM_CHECK and no stream looks at all (polling per stream made
    STREAMS looks a second)."""
    ctl, group, channel = served
    looks = 0

    def counted(_: Any) -> bool:
        nonlocal looks
        looks += 1
        return True  # activity held still: no stream has a reason to wake

    monkeypatch.setattr(keda_scaler, "_active", counted)
    stub = pb_grpc.ExternalScalerStub(channel)
    ref = pb.ScaledObjectRef(name="fleet", namespace="prod", scalerMetadata={"group": group})
    streams = [stub.StreamIsActive(ref) for _ in range(STREAMS)]
    try:
        for stream in streams:
            await stream.read()
        assert ctl.metrics.registry.get_sample_value("ballast_keda_streams") == STREAMS
        extra = stub.StreamIsActive(ref)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await extra.read()
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "keda.max_streams" in (err.value.details() or "")
        await asyncio.sleep(keda_scaler.STREAM_CHECK * 1.5)  # the watch has seen "True"
        looks = 0
        await asyncio.sleep(3)
        # the watch's ticks in 3 s (a loaded machine makes fewer, never more)
        assert looks <= 4, looks
    finally:
        for stream in streams:
            stream.cancel()
    deadline = time.monotonic() + 10
    while ctl.metrics.registry.get_sample_value("ballast_keda_streams") != 0:
        assert time.monotonic() < deadline, "cancelled streams are still counted"
        await asyncio.sleep(0.1)


async def _once_led(stub: Any, request: Any) -> Any:
    """GetMetrics' answer once the daemon leads the group (UNAVAILABLE until then)."""
    deadline = time.monotonic() + 60
    codes = []
    while time.monotonic() < deadline:
        try:
            return await stub.GetMetrics(request)
        except grpc.aio.AioRpcError as exc:
            codes.append(exc.code())
        await asyncio.sleep(0.2)
    assert set(codes) == {grpc.StatusCode.UNAVAILABLE}
    raise AssertionError("the daemon did not lead the group within 60 s")


def _daemon_config(
    path: Path, kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, group: str, port: int
) -> None:
    path.write_text(
        f"kafka: {kafka_yaml(kafka)}\n"
        f"mqtt: {{port: {mqtt.port}, client_id: ctl-{group}}}\n"
        f"groups: [{{name: {group}, autoscale: {{min_members: 3}}}}]\n"
        "signing: {required: false}\n"
        "http: {port: 0}\n"
        f"keda: {{enabled: true, port: {port}}}\n"
        "logging: {format: json}\n"
    )


async def test_ballast_run_serves_the_scaler(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    tmp_path: Path,
) -> None:
    group = names[0]
    port = embedded.free_port()
    _daemon_config(tmp_path / "b.yaml", kafka, mqtt, group, port)
    proc = start_daemon(tmp_path / "b.yaml", tmp_path / "daemon.log")
    try:
        embedded.wait_for_port(port, 60)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            ref = pb.ScaledObjectRef(scalerMetadata={"group": group})
            got = await _once_led(stub, pb.GetMetricsRequest(scaledObjectRef=ref))
            assert [v.metricName for v in got.metricValues] == ["ballast-desired-members"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    assert '"keda_scaler_listening"' in (tmp_path / "daemon.log").read_text()


def test_a_busy_keda_port_is_one_line_naming_the_key(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        _daemon_config(tmp_path / "b.yaml", kafka, mqtt, names[0], taken.getsockname()[1])
        proc = start_daemon(tmp_path / "b.yaml", tmp_path / "daemon.log")
        assert proc.wait(60) == 2
    failed = [
        json.loads(line)
        for line in (tmp_path / "daemon.log").read_text().splitlines()
        if '"startup_failed"' in line
    ]
    assert [f["error"].split(" on ")[0] for f in failed] == ["keda.port: cannot listen"]
