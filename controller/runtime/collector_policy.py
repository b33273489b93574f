"""The daemon's use of Python's cyclic garbage collector: thresholds, and when a group's
state is frozen out of the collector's sight (``assignors.collector`` does the pausing
and the freezing).

A group's state holds one partition object per partition, mostly in acyclic containers
that reference counting frees. Left in the collector's generations, that state is walked
by every full collection: at 1 000 members x 100 000 partitions such a collection costs
about 100 ms, in the middle of a tick (``benchmarks/controller_scale.py``). After a wave
that built much state (a group rebuilt, or publications of many records until the group
settled), the state is frozen: full collections then walk only what is new. Once per
wave, not per publication: a scale-out's handoffs re-grant most receivers in each of
some twenty publications, and freezing after each stalled the loop 20 x 140 ms.
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


class Waves:
    """One per group: whether a mass change is in flight, to freeze once it settles."""

    def __init__(self) -> None:
        self._mass = False

    def stepped(self, records: int, members: int, settled: bool) -> None:
        """Call after each step of a group of ``members`` (``records``: what it published;
        ``settled``: nothing left in flight). A publication that rewrites at least half
        the group (a cold start, a scale-out) is a mass change; the state is frozen once
        the group settles after it."""
        if records >= max(FREEZE_MIN_RECORDS, members // 2):
            self._mass = True
        if settled and self._mass:
            self._mass = False
            built()


def built() -> None:
    """Call after a group's state was built from scratch (takeover, recovery)."""
    freeze_built()
