"""``ballast worker``: a real consumer process on ``ManagedConsumer`` for demos and
end-to-end tests. It "processes" a record by appending ``topic partition offset value
time`` to a file, then commits each batch; the file tells exactly what was processed, and
twice. Beside it, ``<out>.events`` (JSON lines) says when partitions were granted and
revoked (revoke written before the acknowledgement leaves) and what each commit covered:
the fault suite's checker reads both (``controller.tools.chaos``).

SIGTERM closes cleanly: a clean leave by default, or with ``--restart`` a restart that
keeps the member's partitions for ``leave_grace``. SIGKILL is a crash.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Literal

from aiokafka.errors import KafkaError

from controller import logs
from controller.adapters.presence import MqttAuth
from controller.client import PresenceOptions
from controller.client.consumer import ManagedConsumer
from controller.wire.signing import Verifier

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
    rack: str | None = None,
    capacity: float | None = None,
    verify_key: Verifier | None = None,
    mqtt_auth: MqttAuth | None = None,
) -> None:
    logs.configure("info", "json")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    events = out.with_name(out.name + ".events").open("a", buffering=1)

    def note(kind: str, partitions: object) -> None:
        tps = sorted([tp.topic, tp.partition] for tp in partitions)  # type: ignore[attr-defined]
        events.write(json.dumps({"t": time.time(), "kind": kind, "partitions": tps}) + "\n")

    consumer = ManagedConsumer(
        group,
        member,
        topics,
        bootstrap_servers=bootstrap,
        presence=PresenceOptions(
            via=presence, mqtt_port=mqtt_port, mqtt_keepalive=1, mqtt_auth=mqtt_auth
        ),
        auto_offset_reset="earliest",
        report_lag=True,
        rack=rack,
        capacity=capacity,
        verify_key=verify_key,
        on_partitions_assigned=lambda tps: note("granted", tps),
        on_partitions_revoked=lambda tps: note("revoked", tps),
    )
    await consumer.start()
    with out.open("a", buffering=1) as sink:
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        value = r.value.decode() if r.value else ""
                        sink.write(
                            f"{r.topic} {r.partition} {r.offset} {value} {time.time():.6f}\n"
                        )
                if batch:
                    sink.flush()
                    try:
                        await consumer.commit()
                        done = [
                            [tp.topic, tp.partition, records[-1].offset + 1]
                            for tp, records in batch.items()
                            if records
                        ]
                        events.write(
                            json.dumps({"t": time.time(), "kind": "commit", "offsets": done}) + "\n"
                        )
                    except KafkaError as exc:
                        # Broker unreachable for a moment: the records stay uncommitted
                        # and the next batch's commit covers them.
                        log.warning("commit_failed", member=member, error=repr(exc))
                    if delay:
                        await asyncio.sleep(delay)
        finally:
            await consumer.close(leave=not restart)
            events.close()
