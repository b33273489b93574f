"""Does a Kafka broker answer? One Metadata request naming only the assignments topic
every ``kafka.probe_interval`` (it creates nothing and costs the broker next to nothing);
what it finds goes to ``Health``, which readiness and ``ballast_connection_up`` read.

A broker that stopped makes the request fail at once (connection refused); one that hangs
(a frozen process, a partition) counts as unreachable when the request times out."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient

from controller import logs
from controller.adapters.connection import client_options
from controller.adapters.metadata import topic_metadata
from controller.adapters.metadata_scope import track_when_idle
from controller.config import Config
from controller.runtime.health import Health
from controller.runtime.startup import reason

log = logs.get("ballast.health")


def probe_timeout(cfg: Config) -> float:
    return min(cfg.kafka.request_timeout, 3 * cfg.kafka.probe_interval)


async def probe_kafka(cfg: Config, health: Health) -> None:
    admin = AIOKafkaAdminClient(**client_options(cfg), client_id=f"{cfg.kafka.client_id}-probe")
    started = False
    down_since: float | None = None
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                async with asyncio.timeout(probe_timeout(cfg)):
                    if not started:
                        await admin.start()
                        # Its own refreshes ask about this topic, not about every topic.
                        track_when_idle(admin, cfg.assignments.name)
                        started = True
                    await topic_metadata(admin, [cfg.assignments.name])
            except Exception as exc:  # any failure means: no answer
                error = reason(exc) if str(exc) else f"no answer within {probe_timeout(cfg):g}s"
                if health.link("kafka", False, error):
                    down_since = loop.time()
                    log.warning("kafka_unreachable", error=error)
            else:
                if health.link("kafka", True) and down_since is not None:
                    log.info("kafka_reachable", down_s=round(loop.time() - down_since, 1))
            await asyncio.sleep(cfg.kafka.probe_interval)
    finally:
        await admin.close()
