"""The lag poll at fleet scale: what one poll of every partition costs, and how long it
holds the event loop that asked for it.

Against an embedded Tansu with ``--partitions`` partitions over 10 topics, an
``OffsetReader`` (the controller's, with its group-commit fallback) polls committed and
end offsets of every partition ``--polls`` times, with the daemon's garbage-collector
settings. A ticker on the caller's loop, waking every 5 ms, records how late it woke:
the longest lateness is how long the poll held that loop (a rebalance, a presence, a
lease renewal waits that long). Three ways in one run: the reader's clients on their own
thread's loop reading the answers with aiokafka's decoder (``side_loop_aiokafka``, what
the controller did until 2026-11-26), the same reading them from their bytes
(``side_loop``, what it does), and that on the caller's loop (``caller_loop``, what it
did before the side loop).

    python benchmarks/lag_poll.py --partitions 100000 --polls 3 --broker tansu
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient
from loop_hold import timed

from assignors import TopicPartition
from controller.config import Config
from controller.runtime import collector_policy, offsets_reader
from controller.runtime.offsets_reader import OffsetReader
from controller.tools import apache_kafka, embedded
from controller.wire.offsets import LATEST, Offsets, PartitionOffsets

TOPICS = 10


async def _polls(
    poll: Callable[[], Awaitable[dict[Any, PartitionOffsets]]], polls: int
) -> tuple[dict[str, Any], dict[Any, PartitionOffsets]]:
    """Timings, and what the last poll read."""
    first: dict[str, float] = {}
    walls, cpus, stalls = [], [], []
    for i in range(polls):
        got, timing = await timed(poll)
        wall, cpu = timing["wall_s"], timing["cpu_s"]
        row = {"wall_s": wall, "cpu_s": cpu, "stall_ms": timing["hold_ms"]}
        if i == 0:
            first = row  # it also looks the topics' leaders up
        else:
            walls.append(wall)
            cpus.append(cpu)
            stalls.append(row["stall_ms"])
        assert len(got) > 0
    return {
        "first_poll": {k: round(v, 3) for k, v in first.items()},
        "poll_wall_s": round(statistics.median(walls), 3) if walls else None,
        "poll_cpu_s": round(statistics.median(cpus), 3) if cpus else None,
        "longest_stall_ms": round(max(stalls), 1) if stalls else None,
    }, got


def _asked(ppt: dict[str, int]) -> list[KafkaTP]:
    return [KafkaTP(t, p) for t, n in ppt.items() for p in range(n)]


async def _aiokafka_listed(
    consumer: AIOKafkaConsumer, ppt: dict[str, int], timestamp: int = LATEST
) -> Offsets:
    """What the reader called before it read ListOffsets answers itself."""
    call = consumer.end_offsets if timestamp == LATEST else consumer.beginning_offsets
    got = await call(_asked(ppt))
    return Offsets({TopicPartition(tp.topic, tp.partition): o for tp, o in got.items()}, [])


async def _aiokafka_committed(
    admin: AIOKafkaAdminClient, group: str, ppt: dict[str, int]
) -> Offsets:
    """What it called before it read OffsetFetch answers itself."""
    got = await admin.list_consumer_group_offsets(group, partitions=_asked(ppt))
    return Offsets({TopicPartition(tp.topic, tp.partition): m.offset for tp, m in got.items()}, [])


async def _with_aiokafkas_decoder(
    poll: Callable[[], Awaitable[dict[Any, PartitionOffsets]]],
) -> dict[Any, PartitionOffsets]:
    with (
        mock.patch.object(offsets_reader, "list_offsets", _aiokafka_listed),
        mock.patch.object(offsets_reader, "committed_offsets", _aiokafka_committed),
    ):
        return await poll()


async def run(
    partitions: int, polls: int, broker: apache_kafka.BrokerKind = "kafka"
) -> dict[str, Any]:
    ppt = {f"t{i:02d}": partitions // TOPICS for i in range(TOPICS)}
    out: dict[str, Any] = {"partitions": sum(ppt.values()), "polls": polls}
    read: dict[str, dict[Any, PartitionOffsets]] = {}
    with (
        tempfile.TemporaryDirectory() as work,
        apache_kafka.running(broker, Path(work), partitions=partitions) as kafka,
    ):
        await embedded.create_topics(kafka.address, {**ppt, "ballast.assignments": 8})
        cfg = Config.model_validate(
            {
                "kafka": apache_kafka.kafka_settings(broker, kafka.address),
                "groups": [{"name": "bench"}],
            }
        )
        old, side = OffsetReader(cfg, "bench-fleet"), OffsetReader(cfg, "bench-fleet")
        here = OffsetReader(cfg, "bench-fleet")
        # ``here``: the same reader's work on the caller's loop (its private halves), as
        # the controller did before the side loop.
        for name, start, poll, stop in (
            (
                "side_loop_aiokafka",
                old.start,
                partial(_with_aiokafkas_decoder, partial(old.offsets, ppt, False)),
                old.stop,
            ),
            ("side_loop", side.start, partial(side.offsets, ppt, False), side.stop),
            ("caller_loop", here._start, partial(here._offsets, ppt, False), here._stop),
        ):
            await start()
            try:
                out[name], read[name] = await _polls(poll, polls)
            finally:
                await stop()
        assert read["side_loop"] == read["side_loop_aiokafka"] == read["caller_loop"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--partitions", type=int, default=100_000)
    p.add_argument("--polls", type=int, default=3, help="the first one is reported apart")
    p.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    args = p.parse_args()
    collector_policy.configure()  # as ``ballast run`` does
    print(json.dumps(asyncio.run(run(args.partitions, args.polls, args.broker))))


if __name__ == "__main__":
    main()
