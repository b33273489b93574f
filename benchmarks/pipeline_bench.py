"""Spark pipeline throughput: samples/s through the streaming lag job, and the backtest's
groups per minute, on local Spark against a real (Tansu) broker on loopback.

Streaming: preloads the samples topic, then runs the lag job with
``maxOffsetsPerTrigger`` so it works through the backlog in equal micro-batches; the
rate is samples read over the batches' wall time, the first batch (JIT, Python worker
start-up) left out as warm-up.

    python benchmarks/pipeline_bench.py stream --samples 400000 --partitions 2000
    python benchmarks/pipeline_bench.py backtest --groups 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from assignors import STRATEGIES
from controller.config import Config
from controller.tools import apache_kafka, embedded
from controller.wire.records import OffsetSample, partition_key
from pipeline import lagjob
from pipeline.backtest import backtest
from pipeline.session import session
from pipeline.traces import synthesize, write_jsonl


async def preload(address: str, topic: str, samples: int, partitions: int) -> float:
    await embedded.create_topics(address, {topic: 4})
    producer = AIOKafkaProducer(bootstrap_servers=address, linger_ms=20, max_batch_size=512_000)
    await producer.start()
    started = time.perf_counter()
    t0 = time.time() - samples / partitions  # one sample per partition per second
    try:
        pending = []
        for i in range(samples):
            p, tick = i % partitions, i // partitions
            s = OffsetSample(
                group="bench",
                topic="orders",
                partition=p,
                committed=tick * 90,
                log_end=tick * 100,
                sampled_at=t0 + tick,
            )
            pending.append(
                await producer.send(topic, s.encode(), key=partition_key("bench", "orders", p))
            )
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return time.perf_counter() - started


def stream(args: argparse.Namespace) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        apache_kafka.running(args.broker, Path(tmp)) as broker,
    ):
        loaded = asyncio.run(preload(broker.address, "samples", args.samples, args.partitions))
        cfg = Config.model_validate(
            {
                "kafka": apache_kafka.kafka_settings(args.broker, broker.address),
                "lag": {"source": "topic", "topic": "lag", "samples_topic": "samples"},
                "groups": [{"name": "bench"}],
                "pipeline": {
                    "trigger_interval": 0.1,
                    "lateness": 3600,
                    "shuffle_partitions": args.shuffle,
                    "max_offsets_per_trigger": args.per_trigger,
                },
            }
        )
        asyncio.run(lagjob.create_topics(cfg))  # as `ballast pipeline lag` does
        spark = session(args.master, args.shuffle)
        query = lagjob.start(spark, cfg, checkpoint=str(Path(tmp) / "cp"))
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        batches = [p for p in query.recentProgress if p.numInputRows > 0]
        spark.stop()
    warm = batches[1:] or batches
    rows = sum(p.numInputRows for p in warm)
    seconds = sum(p.batchDuration for p in warm) / 1000
    return {
        "bench": "stream",
        "master": args.master,
        "samples": args.samples,
        "partitions": args.partitions,
        "batches": len(batches),
        "rows": sum(p.numInputRows for p in batches),
        "rows_after_warmup": rows,
        "seconds_after_warmup": round(seconds, 2),
        "samples_per_second": round(rows / seconds) if seconds else None,
        "first_batch_seconds": round(batches[0].batchDuration / 1000, 2) if batches else None,
        "preload_seconds": round(loaded, 1),
    }


def run_backtest(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        events = write_jsonl(synthesize(args.groups, max_members=args.max_members), trace)
        spark = session(args.master, args.tasks)
        try:
            report = backtest(spark, trace, args.strategies.split(","), Path(args.out), args.tasks)
        finally:
            spark.stop()
    return {
        "bench": "backtest",
        "master": args.master,
        "groups": report.groups,
        "events": events,
        "strategies": args.strategies,
        "seconds": round(report.seconds, 1),
        "groups_per_minute": round(report.groups_per_minute, 1),
        "out": args.out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="bench", required=True)
    s = sub.add_parser("stream")
    s.add_argument("--samples", type=int, default=400_000)
    s.add_argument("--partitions", type=int, default=2_000, help="distinct partitions sampled")
    s.add_argument("--per-trigger", type=int, default=100_000)
    s.add_argument("--shuffle", type=int, default=4)
    s.add_argument("--master", default="local[2]")
    s.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    b = sub.add_parser("backtest")
    b.add_argument("--groups", type=int, default=500)
    b.add_argument("--max-members", type=int, default=1000)
    b.add_argument("--strategies", default=",".join(STRATEGIES))
    b.add_argument("--tasks", type=int, default=16)
    b.add_argument("--master", default="local[2]")
    b.add_argument("--out", default="backtest-out")
    args = parser.parse_args()
    result = stream(args) if args.bench == "stream" else run_backtest(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
