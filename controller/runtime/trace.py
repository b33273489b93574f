"""``ballast run --record``: each group's assignment inputs as a replayable trace.

What is recorded is what the assignor saw (joins, leaves, subscription and partition
changes, lag readings), so ``ballast pipeline backtest`` can replay a real fleet's day
through every strategy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

from assignors import (
    Event,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionsChanged,
    SubscriptionChanged,
)
from controller.core.group import GroupState
from controller.wire.records import TraceEvent


class TraceRecorder:
    def __init__(self, path: Path) -> None:
        self._out: TextIO = path.open("a", encoding="utf-8")
        self._started = time.monotonic()

    def attach(self, state: GroupState) -> None:
        """Write the group as it stands (recovered members, known topics), then follow it."""
        now = time.monotonic()
        known = state.partitions_per_topic
        if known:
            self._write(
                TraceEvent(
                    group=state.name, t=self._t(now), kind="partitions", partitions=dict(known)
                )
            )
        for member, topics in state.subscriptions().items():
            self.record(state.name, MemberJoined(member, topics), now)
        state.recorder = lambda event, at: self.record(state.name, event, at)

    def record(self, group: str, event: Event, now: float) -> None:
        t = self._t(now)
        if isinstance(event, MemberJoined | SubscriptionChanged):
            e = TraceEvent(
                group=group, t=t, kind="join", member=event.member, topics=sorted(event.topics)
            )
        elif isinstance(event, MemberLeft):
            e = TraceEvent(group=group, t=t, kind="leave", member=event.member)
        elif isinstance(event, PartitionsChanged):
            e = TraceEvent(
                group=group, t=t, kind="partitions", partitions={event.topic: event.count}
            )
        elif isinstance(event, LagUpdated):
            lag = [(tp.topic, tp.partition, v) for tp, v in sorted(event.lag.items())]
            e = TraceEvent(group=group, t=t, kind="lag", lag=lag)
        else:
            return
        self._write(e)

    def _t(self, now: float) -> float:
        return round(max(0.0, now - self._started), 3)

    def _write(self, event: TraceEvent) -> None:
        self._out.write(event.model_dump_json(exclude_none=True) + "\n")
        self._out.flush()

    def close(self) -> None:
        self._out.close()
