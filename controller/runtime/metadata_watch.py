"""Topic metadata for the led groups: a changed partition count is a rebalance input."""

from __future__ import annotations

import asyncio
import contextlib
import time

from controller import logs
from controller.runtime.config import Config
from controller.runtime.replica_state import ReplicaState, subscribed

log = logs.get("ballast.controller")


async def watch_metadata(cfg: Config, state: ReplicaState) -> None:
    """Partition counts of the topics each led group's members subscribe to, on
    demand (``metadata_wake``) and every ``lag.poll_interval``."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.metadata_wake.wait(), cfg.lag.poll_interval)
        state.metadata_wake.clear()
        for g in list(state.groups.values()):
            topics = subscribed(g.state.engine.members) | {
                t for p in g.state.presence.values() for t in p.topics
            }
            counts = await state.readers[g.name].partition_counts(topics)
            for topic in sorted(topics - counts.keys() - g.warned_topics):
                g.warned_topics.add(topic)
                log.warning("unknown_topic", group=g.name, topic=topic)
            if counts:
                g.state.on_partitions(counts, time.monotonic())
                g.wake.set()
