"""Reading a Metadata response of N partitions: aiokafka's decoder (``decode`` and
``to_object``, what the controller ran before reading counts and racks out of the objects)
against ``controller.wire.metadata.read_metadata`` (counts and racks straight from the
bytes), same bytes, same process, medians of ``--runs``. Version 5, 10 topics, replication
3 over 3 brokers with ``broker.rack`` set (or not, ``--no-racks``).

    python benchmarks/metadata_decode.py --partitions 100000
    python benchmarks/metadata_decode.py --partitions 1000000 --runs 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from aiokafka.protocol.metadata import MetadataResponse_v5

from controller.wire.metadata import read_metadata

TOPICS = 10


def response(partitions: int, racks: bool) -> bytes:
    brokers = [(b, "localhost", 9092 + b, f"az-{b}" if racks else None) for b in range(3)]
    per_topic = partitions // TOPICS
    topics: list[tuple[Any, ...]] = [
        (
            0,
            f"topic-{t:03d}",
            False,
            [
                (0, p, p % 3, [p % 3, (p + 1) % 3, (p + 2) % 3], [p % 3], [])
                for p in range(per_topic)
            ],
        )
        for t in range(TOPICS)
    ]
    body: bytes = MetadataResponse_v5(0, brokers, "cluster", 0, topics).encode()
    return body


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[Any, float]:
    times, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1000)
    return out, statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--partitions", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-racks", action="store_true")
    args = p.parse_args()
    body = response(args.partitions, not args.no_racks)
    decoded, aiokafka_ms = median_ms(
        lambda: MetadataResponse_v5.decode(body).to_object(), args.runs
    )
    read, ours_ms = median_ms(lambda: read_metadata(5, body), args.runs)
    assert read.counts == {t["topic"]: len(t["partitions"]) for t in decoded["topics"]}
    print(
        json.dumps(
            {
                "partitions": args.partitions,
                "bytes": len(body),
                "aiokafka_decode_ms": round(aiokafka_ms, 1),
                "read_metadata_ms": round(ours_ms, 1),
                "ratio": round(aiokafka_ms / ours_ms, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
