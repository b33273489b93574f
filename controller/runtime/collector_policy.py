"""The daemon's use of Python's cyclic garbage collector: thresholds, and when a group's
state is frozen out of the collector's sight (``assignors.collector`` does the pausing
and the freezing).

A group's state holds one partition object per partition, mostly in acyclic containers
that reference counting frees. Left in the collector's generations, that state is walked
by every full collection: at 1 000 members x 100 000 partitions such a collection costs
about 100 ms, in the middle of a tick (``benchmarks/controller_scale.py``). After a step
that built much state (a group rebuilt, or a publication of many records), the state is
frozen: full collections then walk only what is new.
"""

from __future__ import annotations

import gc

from assignors import freeze_built

#: Young collections every 10 000 allocations (not 700), full ones after 20 x 100 of
#: them: the churn of a busy group (partition objects of readings and records) then
#: rarely promotes into a full collection. Measured in docs/operations.md.
THRESHOLDS = (10_000, 20, 100)

#: Below this many records a publication is never a mass change.
FREEZE_MIN_RECORDS = 100


def configure() -> None:
    """Once, when the daemon starts."""
    gc.set_threshold(*THRESHOLDS)


def settled(records: int, members: int) -> None:
    """Call after a step that published ``records`` records to a group of ``members``;
    freezes after a mass change (at least half the group rewritten, as in a cold start)."""
    if records >= max(FREEZE_MIN_RECORDS, members // 2):
        built()


def built() -> None:
    """Call after a group's state was built from scratch (takeover, recovery)."""
    freeze_built()
