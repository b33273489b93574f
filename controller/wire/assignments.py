"""Reading the assignments topic: which partition a member's key lands on, and what a
message on it means (a member's record, its tombstone, or a fence marker). The
controller, every client, ``ballast audit`` and the simulated fleet read it this way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiokafka.partitioner import murmur2

from controller.wire.records import (
    Assignment,
    DecodeError,
    Fence,
    Logged,
    LoggedFence,
    LoggedRecord,
    decode,
    split_key,
)

#: Headers on every record of a publication, tombstones included (their value is null).
GENERATION_HEADER = "ballast-generation"
EPOCH_HEADER = "ballast-epoch"


def assignments_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner: murmur2 of the key, as the controller's producer uses."""
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions


def log_entry(msg: Any, on_invalid: Callable[[str], None] | None = None) -> Logged | None:
    """One message of the assignments topic as a log entry (a member's record, its
    tombstone, or a fence marker); None, after ``on_invalid``, when it is malformed."""
    source = f"{msg.topic}[{msg.partition}]@{msg.offset}"
    try:
        if msg.key and b"/" not in msg.key:
            fence = decode(Fence, msg.value, source)
            if fence.group.encode() != msg.key:
                raise DecodeError(source, f"fence key {msg.key!r} disagrees with its body")
            return LoggedFence(fence.group, fence.controller_epoch, msg.partition, msg.offset)
        group, member = split_key(msg.key, source)
        rec = None if msg.value is None else decode(Assignment, msg.value, source)
    except DecodeError as exc:
        if on_invalid:
            on_invalid(str(exc))
        return None
    if rec is not None and (rec.group != group or rec.member != member):
        if on_invalid:
            on_invalid(f"{source}: key {group}/{member} disagrees with the record body")
        return None
    headers = dict(msg.headers or ())
    return LoggedRecord(
        group,
        member,
        rec,
        msg.partition,
        msg.offset,
        _int_header(headers.get(GENERATION_HEADER)),
        _int_header(headers.get(EPOCH_HEADER)),
    )


def _int_header(raw: bytes | None) -> int | None:
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None
