"""How far a member has processed each partition it holds: the self-reported lag in its
presence and the offset samples it sends the Spark lag job. One reading for every
binding; each binding only says what log end its last fetch saw."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from controller.client.grants import Partition
from controller.wire.records import OffsetSample


class Progress(NamedTuple):
    partition: Partition
    #: The log end the member's last fetch of the partition saw.
    log_end: int
    #: The next offset to process (what was handed to the application).
    done: int


def progress_of(
    held: Iterable[Partition],
    consumed: Mapping[Partition, int],
    log_end: Callable[[Partition], int | None],
) -> list[Progress]:
    """Held partitions with both a known log end and a processed position, sorted."""
    out = []
    for p in sorted(held):
        end, done = log_end(p), consumed.get(p)
        if end is not None and done is not None:
            out.append(Progress(p, end, done))
    return out


def lag_report(progress: Iterable[Progress]) -> list[tuple[str, int, int]]:
    """Presence's ``lag``: ``[topic, partition, lag]`` per partition."""
    return [(p.partition[0], p.partition[1], max(0, p.log_end - p.done)) for p in progress]


def offset_samples(group: str, progress: Iterable[Progress], now: float) -> list[OffsetSample]:
    """Self-reports for the Spark lag job: processed up to (as ``committed``) and the log end."""
    return [
        OffsetSample(
            group=group,
            topic=p.partition[0],
            partition=p.partition[1],
            committed=min(p.done, p.log_end),
            log_end=p.log_end,
            sampled_at=now,
            source="client",
        )
        for p in progress
    ]
