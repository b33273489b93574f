"""What freezing a built state costs, and what it keeps.

``assignors.freeze_built()`` unfreezes what the last build froze, collects everything
once and freezes again, so cycles among replaced states are freed; the freeze before it
(a young collection, then ``gc.freeze()``, never undone) cost nothing but could keep
them for good. This rebuilds an engine of 1 000 members x 100 000 partitions (interned
partitions, as the controller holds them) 20 times with one or the other, and reports
the freeze's time and the objects frozen at the end:

    python benchmarks/freeze_cost.py            # freeze_built
    python benchmarks/freeze_cost.py --never-undone
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from assignors import IncrementalAssignor, freeze_built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--never-undone", action="store_true", help="the freeze before")
    parser.add_argument("--rebuilds", type=int, default=20)
    args = parser.parse_args()
    ppt = {f"topic-{i:03d}": 1_000 for i in range(100)}
    subs = {f"member-{i:04d}": list(ppt) for i in range(1_000)}
    times = []
    for _ in range(args.rebuilds):
        eng, _ = IncrementalAssignor.from_snapshot(ppt, subs)  # replaces the last one
        eng.intern_partitions()
        started = time.perf_counter()
        if args.never_undone:
            gc.collect(1)
            gc.freeze()
        else:
            freeze_built()
        times.append((time.perf_counter() - started) * 1000)
    print(
        f"freeze: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms; "
        f"frozen objects after {args.rebuilds} rebuilds: {gc.get_freeze_count()}"
    )


if __name__ == "__main__":
    main()
