"""Synthetic assignments-log entries for the audit and fencing tests."""

from __future__ import annotations

from controller.wire.records import Assignment, LoggedRecord


def rec(
    member: str,
    gen: int,
    parts: list[int],
    *,
    epoch: int = 1,
    offset: int | None = None,
    partition: int | None = None,
    at: float | None = None,
    absent_since: float | None = None,
) -> LoggedRecord:
    """Member ``member``'s record of group ``g`` granting ``t-<parts>``; by default it sits
    at offset ``gen`` of partition ``hash(member) % 3`` and was issued at time ``gen``."""
    body = Assignment(
        group="g",
        member=member,
        generation=gen,
        controller_epoch=epoch,
        partitions=[("t", p) for p in parts],
        topics=["t"],
        issued_at=float(gen if at is None else at),
        absent_since=absent_since,
    )
    return LoggedRecord(
        "g",
        member,
        body,
        partition=hash(member) % 3 if partition is None else partition,
        offset=gen if offset is None else offset,
        generation=gen,
        epoch=epoch,
    )
