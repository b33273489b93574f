"""Replicas of one deployment share a config, so ``mqtt.client_id`` is the same in each.
An MQTT broker ends a session when another connects with its client id (MQTT 3.1.1,
3.1.4-2; Mosquitto does, amqtt does not): two replicas would take turns, each missing
presence while the other is connected."""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from controller.config import Config
from controller.runtime.membership import MqttPresence, Sink
from controller.runtime.metrics import Metrics
from controller.tasks import cancel_and_wait
from controller.tools import embedded


async def test_replicas_with_one_config_keep_their_own_mqtt_sessions(tmp_path: Path) -> None:
    with embedded.mosquitto(tmp_path).start() as broker:
        cfg = Config.model_validate(
            {"groups": [{"name": "g"}], "mqtt": {"port": broker.port, "keepalive": 2}}
        )
        sink = Sink(lambda *_: None, lambda *_: None, frozenset({"g"}))
        replicas = [MqttPresence(cfg, sink, Metrics(), replica=r) for r in ("pod-a", "pod-b")]
        with structlog.testing.capture_logs() as logged:
            tasks = [asyncio.create_task(r.run()) for r in replicas]
            try:
                async with asyncio.timeout(30):
                    for r in replicas:
                        await r.connected.wait()
                await asyncio.sleep(2.0)
            finally:
                await cancel_and_wait(*tasks)
    assert [e for e in logged if e["event"] == "mqtt_disconnected"] == []
    assert sorted(r.identifier for r in replicas) == [
        "ballast-controller-pod-a",
        "ballast-controller-pod-b",
    ]
