"""``ballast worker``: a real consumer process on ``ManagedConsumer`` for demos and
end-to-end tests. It "processes" a record by appending ``topic partition offset value``
to a file, then commits each batch; the file tells exactly what was processed, and twice.

SIGTERM closes cleanly: a clean leave by default, or with ``--restart`` a restart that
keeps the member's partitions for ``leave_grace``. SIGKILL is a crash.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Literal

from aiokafka.errors import KafkaError

from . import logs
from .client import ManagedConsumer

log = logs.get("ballast.worker")


async def run_worker(
    *,
    bootstrap: str,
    mqtt_port: int,
    group: str,
    member: str,
    topics: list[str],
    out: Path,
    restart: bool,
    presence: Literal["mqtt", "kafka"],
    delay: float,
) -> None:
    logs.configure("info", "json")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    consumer = ManagedConsumer(
        group,
        member,
        topics,
        bootstrap_servers=bootstrap,
        presence=presence,
        mqtt_port=mqtt_port,
        mqtt_keepalive=1,
        auto_offset_reset="earliest",
        report_lag=True,
    )
    await consumer.start()
    with out.open("a", buffering=1) as sink:
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        value = r.value.decode() if r.value else ""
                        sink.write(f"{r.topic} {r.partition} {r.offset} {value}\n")
                if batch:
                    sink.flush()
                    try:
                        await consumer.commit()
                    except KafkaError as exc:
                        # Broker unreachable for a moment: the records stay uncommitted
                        # and the next batch's commit covers them.
                        log.warning("commit_failed", member=member, error=repr(exc))
                    if delay:
                        await asyncio.sleep(delay)
        finally:
            await consumer.close(leave=not restart)
