"""Long fault runs (docs/fencing.md, docs/operations.md "Fault suite"):

    .venv/bin/python benchmarks/chaos_bench.py --seeds 1 2 3 --faults 100 [--broker tansu]

One JSON line per seed: faults by kind, records produced/processed, lost, duplicates by
cause, overlaps, longest ungranted gap, audit result. Exit 1 if any run broke an
invariant. Each run starts and stops its own brokers and processes on loopback."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from controller.tools import apache_kafka
from controller.tools.chaos.nemesis import Run


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--broker", choices=apache_kafka.BROKER_KINDS, default="kafka")
    parser.add_argument(
        "--no-transactions", action="store_true", help="on Kafka: epoch fencing only"
    )
    parser.add_argument("--keep", type=Path, help="keep each run's files under this folder")
    args = parser.parse_args()
    ok = True
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix=f"chaos-{seed}-") as tmp:
            workdir = args.keep / f"seed-{seed}" if args.keep else Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            async with Run(
                workdir,
                replicas=args.replicas,
                broker=args.broker,
                transactions=not args.no_transactions,
            ) as run:
                result = await run.run(seed=seed, faults=args.faults)
        print(json.dumps(result), flush=True)
        ok = ok and bool(result["ok"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
