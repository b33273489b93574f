"""Reading the assignments topic: which partition a member's key lands on, and what a
message on it means (a member's record, its tombstone, or a fence marker). The
controller, every client, ``ballast audit`` and the simulated fleet read it this way."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from controller.wire.records import (
    MAX_COUNTER,
    Assignment,
    DecodeError,
    Fence,
    Logged,
    LoggedFence,
    LoggedRecord,
    decode,
    split_key,
)
from controller.wire.signing import Verifier

#: How every reader of the assignments topic reads it. With ``ha.transactional_id_prefix``
#: a deposed leader's open transaction is aborted when its successor starts; read
#: uncommitted, its records would still reach a member (and be applied) until the abort.
READ_ISOLATION = "read_committed"
#: Headers on every record of a publication, tombstones included (their value is null).
GENERATION_HEADER = "ballast-generation"
EPOCH_HEADER = "ballast-epoch"


def assignments_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner: murmur2 of the key, as the controller's producer uses."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


_M32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 as Kafka's clients compute it (``Utils.murmur2``, seed 0x9747b28c), as
    an unsigned 32-bit number: every Kafka client places a keyed record by it."""
    m, length = 0x5BD1E995, len(data)
    h = 0x9747B28C ^ length
    whole = length - length % 4
    for (word,) in struct.iter_unpack("<I", data[:whole]):
        k = (word * m) & _M32
        k ^= k >> 24
        h = ((h * m) & _M32) ^ ((k * m) & _M32)
    tail = data[whole:]
    if tail:
        for at in range(len(tail) - 1, -1, -1):
            h ^= tail[at] << (8 * at)
        h = (h * m) & _M32
    h ^= h >> 13
    h = (h * m) & _M32
    return h ^ (h >> 15)


def log_entry(
    msg: Any,
    on_invalid: Callable[[str], None] | None = None,
    verifier: Verifier | None = None,
    on_unverified: Callable[[Logged], None] | None = None,
) -> Logged | None:
    """One message of the assignments topic as a log entry (a member's record, its
    tombstone, or a fence marker); None, after ``on_invalid``, when it is malformed or
    (with a ``verifier``) not signed by an accepted key. A well-formed record that does
    not verify is still shown to ``on_unverified``: it grants nothing, but it proves its
    epoch and generation were used (``AssignmentView.count``). Never raises."""
    source = f"{msg.topic}[{msg.partition}]@{msg.offset}"
    headers = list(msg.headers or ())
    checked = None
    if verifier is not None:
        checked = verifier.check("assignments", msg.key or b"", msg.value, headers)
    try:
        entry = _parsed(msg, source, headers, None if checked is None else checked.key_id)
        if checked is not None and checked.problem is not None:
            if on_unverified is not None:
                on_unverified(entry)
            raise DecodeError(source, checked.problem)
    except DecodeError as exc:
        if on_invalid:
            on_invalid(f"{source} key {_shown(msg.key)}: {exc.reason}")
        return None
    return entry


def _parsed(
    msg: Any, source: str, headers: list[tuple[str, bytes]], signed_by: str | None
) -> Logged:
    """The entry ``msg`` holds; ``DecodeError`` when it is malformed."""
    if msg.key and b"/" not in msg.key:
        fence = decode(Fence, msg.value, source)
        if fence.group.encode() != msg.key:
            raise DecodeError(source, "fence key disagrees with its body")
        return LoggedFence(
            fence.group, fence.controller_epoch, msg.partition, msg.offset, signed_by
        )
    group, member = split_key(msg.key, source)
    rec = None if msg.value is None else decode(Assignment, msg.value, source)
    if rec is not None and (rec.group != group or rec.member != member):
        raise DecodeError(source, "key disagrees with the record body")
    named = dict(headers)
    generation = int_header(named.get(GENERATION_HEADER), GENERATION_HEADER, source)
    epoch = int_header(named.get(EPOCH_HEADER), EPOCH_HEADER, source)
    return LoggedRecord(group, member, rec, msg.partition, msg.offset, generation, epoch, signed_by)


def int_header(raw: object, name: str, source: str) -> int | None:
    """A counter header (generation, epoch, sequence; None if absent); one out of range
    spoils the record (``DecodeError``)."""
    if raw is None:
        return None
    if not (isinstance(raw, bytes) and 0 < len(raw) <= 19 and raw.isdigit()):
        raise DecodeError(source, f"header {name} is not a number in range")
    value = int(raw)
    if value > MAX_COUNTER:
        raise DecodeError(source, f"header {name} is out of range")
    return value


def _shown(key: object) -> str:
    """A key for a log line: bounded, printable."""
    if not isinstance(key, bytes):
        return "(none)"
    text = repr(key[:80])
    return text + ("..." if len(key) > 80 else "")
