"""Topic metadata for the led groups: a changed partition count or replica rack is a
rebalance input."""

from __future__ import annotations

import asyncio
import contextlib
import time

from controller import logs
from controller.config import Config
from controller.runtime.replica_state import ReplicaState

log = logs.get("ballast.controller")


async def watch_metadata(cfg: Config, state: ReplicaState) -> None:
    """Partition counts of the topics each led group's members subscribe to, on
    demand (``metadata_wake``) and every ``kafka.metadata_interval``."""
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(cfg.kafka.metadata_interval):
                await state.metadata_wake.wait()
        state.metadata_wake.clear()
        for g in list(state.groups.values()):
            topics = g.state.subscribed_topics() | {
                t for p in g.state.presence.values() for t in p.topics
            }
            meta = await state.readers[g.name].topic_metadata(topics)
            counts = meta.counts
            for topic in sorted(topics - counts.keys() - g.warned_topics):
                g.warned_topics.add(topic)
                log.warning("unknown_topic", group=g.name, topic=topic)
            for rack in meta.unusable_racks:
                if rack not in g.warned_racks:
                    g.warned_racks.add(rack)
                    log.warning("unusable_broker_rack", group=g.name, rack=rack)
            if counts:
                now = time.monotonic()
                g.state.on_partitions(counts, now)
                g.state.on_partition_racks(meta.racks, now)
                g.wake.set()
