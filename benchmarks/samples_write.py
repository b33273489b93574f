"""Offset samples at fleet scale: what writing one poll's samples costs the controller.

With ``lag.samples_topic`` set, every poll writes one ``OffsetSample`` per partition for
the Spark lag job, on the controller's event loop. Against an embedded Tansu, one poll's
samples of ``--partitions`` partitions over 10 topics are written ``--writes`` times each
way, alternating, through one producer, with the daemon's garbage-collector settings:

* ``per_sample``: what ``SamplePublisher.publish`` did until 2026-11-26, kept here as
  the reference: the record validated and written by pydantic for each sample and each
  key placed by aiokafka's partitioner (murmur2 in Python);
* ``bulk``: ``SamplePublisher.publish`` as it is (``encode_samples``: the record writes
  one sample per topic and the others follow its text; each key's place remembered).

A ticker on the loop, waking every 5 ms, records how late it woke: the longest lateness
is how long a write held the loop. Medians of the writes after each way's first.

    python benchmarks/samples_write.py --partitions 100000 --writes 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from loop_hold import timed

from assignors import TopicPartition
from controller.adapters.packed_send import PackedSender
from controller.config import Config
from controller.runtime import collector_policy
from controller.runtime.samples import SamplePublisher
from controller.tools import apache_kafka
from controller.wire.offsets import PartitionOffsets
from controller.wire.records import OffsetSample, partition_key

TOPICS = 10
GROUP = "fleet"


async def _per_sample(
    publisher: SamplePublisher,
    group: str,
    offsets: Mapping[TopicPartition, PartitionOffsets],
    sampled_at: float,
) -> list[str]:
    """The reference: a model and a partitioner call per sample."""
    out = PackedSender(publisher._producer)
    for tp, o in sorted(offsets.items()):
        sample = OffsetSample(
            group=group,
            topic=tp.topic,
            partition=tp.partition,
            committed=o.committed,
            log_end=o.log_end,
            log_start=o.log_start,
            sampled_at=sampled_at,
        )
        await out.add(
            publisher._topic, partition_key(group, tp.topic, tp.partition), sample.encode()
        )
    await out.flush()
    return []


async def _timed(write: Callable[[], Awaitable[list[str]]]) -> dict[str, float]:
    refused, row = await timed(write)
    assert not refused
    return row


async def bench(partitions: int, writes: int, broker: apache_kafka.BrokerKind) -> dict[str, Any]:
    collector_policy.configure()
    rng = random.Random(7)
    per_topic = partitions // TOPICS
    offsets: dict[TopicPartition, PartitionOffsets] = {}
    for t in range(TOPICS):
        for p in range(per_topic):
            end = rng.randrange(1_000, 10**9)
            committed = None if rng.random() < 0.01 else end - rng.randrange(0, 1_000)
            offsets[TopicPartition(f"orders-{t}", p)] = PartitionOffsets(committed, end, None)
    with (
        tempfile.TemporaryDirectory(prefix="ballast-samples-") as tmp,
        apache_kafka.running(broker, Path(tmp)) as kafka,
    ):
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
        await admin.start()
        await admin.create_topics([NewTopic("samples", 8, 1)])
        await admin.close()
        cfg = Config.model_validate(
            {
                "kafka": apache_kafka.kafka_settings(broker, kafka.address),
                "groups": [{"name": GROUP}],
            }
        )
        publisher = SamplePublisher(cfg, "samples")
        await publisher.start()
        ways: dict[str, Callable[[float], Awaitable[list[str]]]] = {
            "per_sample": lambda at: _per_sample(publisher, GROUP, offsets, at),
            "bulk": lambda at: publisher.publish(GROUP, offsets, at),
        }
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
        try:
            for i in range(writes):
                for name, write in ways.items():
                    rows[name].append(await _timed(partial(write, 1_764_140_000.0 + i)))
        finally:
            await publisher.stop()
    out: dict[str, Any] = {"partitions": per_topic * TOPICS, "writes": writes}
    for name, runs in rows.items():
        later = runs[1:] or runs
        out[name] = {
            "first_cpu_s": round(runs[0]["cpu_s"], 3),
            "cpu_s": round(statistics.median(r["cpu_s"] for r in later), 3),
            "wall_s": round(statistics.median(r["wall_s"] for r in later), 3),
            "longest_hold_ms": round(max(r["hold_ms"] for r in later), 1),
        }
    out["cpu_ratio"] = round(out["per_sample"]["cpu_s"] / out["bulk"]["cpu_s"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--writes", type=int, default=4)
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.partitions, args.writes, args.broker)), indent=1))


if __name__ == "__main__":
    main()
