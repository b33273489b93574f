"""Partition counts and replica racks, read from a Metadata response's bytes.

aiokafka's generic decoder builds Python objects for every field of every partition
(error code, leader, replicas, in-sync replicas), then ``to_object()`` turns them into
dicts: at 100 000 partitions ~0.8 s of CPU, at a million ten times that, every
``kafka.metadata_interval``, in a worker thread that holds the GIL most of that time.
The controller needs two things per partition: that it exists, and the racks of its
replicas. This reads those with ``struct`` at known offsets and skips the rest, for the
versions aiokafka's ``MetadataRequest`` asks for (0 to 5, none of them flexible);
``controller.adapters.metadata`` asks.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from assignors import TopicPartition, valid_rack
from controller.wire.raw_answers import (
    I16,
    I32,
    RawDecodeError,
    read_checked,
    read_count,
    read_string,
)

#: The versions whose layout this reads (aiokafka negotiates within them).
VERSIONS = range(6)

#: A partition's head: error code, partition index, leader, replica count.
_HEAD = struct.Struct(">hiii")
_new_tuple = tuple.__new__


class TopicMetadata(NamedTuple):
    counts: dict[str, int]
    #: Replica racks of every partition read (an empty set: no broker rack known).
    racks: dict[TopicPartition, frozenset[str]]
    #: Broker racks that no ``client.rack`` could match (whitespace, control characters).
    unusable_racks: list[str]
    #: Brokers the answer lists (0: nothing was asked).
    brokers: int
    #: Replicas of each topic's first partition: its replication factor.
    replicas: dict[str, int]


class MetadataDecodeError(RawDecodeError):
    """The bytes are not a Metadata response of the version they were asked as."""


def read_metadata(version: int, body: bytes) -> TopicMetadata:
    """The response body (after the response header) of Metadata ``version``. A topic
    with an error is left out."""
    return read_checked("Metadata", VERSIONS, version, body, _read, error=MetadataDecodeError)


def _read(version: int, buf: bytes) -> TopicMetadata:
    at = 4 if version >= 3 else 0  # throttle_time_ms
    rack_of: dict[int, str] = {}
    unusable: list[str] = []
    brokers, at = read_count(buf, at)
    for _ in range(brokers):
        (node,) = I32.unpack_from(buf, at)
        _, at = read_string(buf, at + 4)  # host
        at += 4  # port
        if version >= 1:
            rack, at = read_string(buf, at)
            if rack is not None:
                if valid_rack(rack):
                    rack_of[node] = rack
                else:
                    unusable.append(rack)
    if version >= 2:
        _, at = read_string(buf, at)  # cluster_id
    if version >= 1:
        at += 4  # controller_id
    counts: dict[str, int] = {}
    replicated: dict[str, int] = {}
    racks: dict[TopicPartition, frozenset[str]] = {}
    #: replica list (its bytes) -> the racks it spans: clusters have few distinct lists.
    spans: dict[bytes, frozenset[str]] = {}
    topics, at = read_count(buf, at)
    head, i32, span_of = _HEAD.unpack_from, I32.unpack_from, spans.get
    for _ in range(topics):
        (error,) = I16.unpack_from(buf, at)
        topic, at = read_string(buf, at + 2)
        if version >= 1:
            at += 1  # is_internal
        parts, at = read_count(buf, at)
        first = max(head(buf, at)[3], 0) if parts else 0
        mine: dict[TopicPartition, frozenset[str]] = {}
        for _ in range(parts):  # the hot loop: local names, few calls
            _, partition, _, replicas = head(buf, at)
            if partition < 0:
                raise MetadataDecodeError(f"partition {partition} of {topic!r}")
            at += 14
            end = at + 4 * replicas if replicas > 0 else at
            key = buf[at:end]
            named = span_of(key)
            if named is None:
                named = spans[key] = _racks_of(key, rack_of)
            (isr,) = i32(buf, end)
            at = end + 4 + 4 * isr if isr > 0 else end + 4
            if version >= 5:  # offline replicas
                (offline,) = i32(buf, at)
                at += 4 + 4 * offline if offline > 0 else 4
            mine[_new_tuple(TopicPartition, (topic, partition))] = named
        if error == 0 and topic is not None:
            counts[topic] = parts
            replicated[topic] = first
            racks.update(mine)
    if at != len(buf):
        raise MetadataDecodeError(f"Metadata v{version} response: {len(buf) - at} bytes left over")
    return TopicMetadata(counts, racks, sorted(set(unusable)), brokers, replicated)


def _racks_of(replicas: bytes, rack_of: dict[int, str]) -> frozenset[str]:
    nodes = struct.unpack(f">{len(replicas) // 4}i", replicas)
    return frozenset(rack_of[n] for n in nodes if n in rack_of)
