"""Log end offsets and a group's committed offsets of every partition a fleet reads: the
requests written and their answers read by ``controller.wire.offsets``, sent through an
aiokafka client's connections (its cluster metadata names each partition's leader)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from functools import partial
from itertools import groupby, repeat
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.commit import OffsetFetchRequest
from aiokafka.protocol.offset import OffsetRequest

from assignors import TopicPartition
from controller.adapters.metadata_scope import Client, inner_client
from controller.adapters.undecoded import AnsweredUndecoded, Undecoded
from controller.wire.offsets import (
    LATEST,
    LIST_OFFSETS_VERSIONS,
    OFFSET_FETCH_VERSIONS,
    Offsets,
    encode_list_offsets,
    encode_offset_fetch,
    read_list_offsets,
    read_offset_fetch,
)

_new_tuple = tuple.__new__


class _ListOffsetsAnsweredUndecoded(AnsweredUndecoded, OffsetRequest):  # type: ignore[misc]
    """Encoded here too, for the versions ``encode_list_offsets`` writes."""

    def __init__(self, topics: list[tuple[str, list[tuple[int, int]]]]) -> None:
        super().__init__(-1, 0, topics)
        self._asked = topics

    def build(self, request_struct_class: Any) -> Any:
        struct_ = super().build(request_struct_class)
        if struct_.API_VERSION in LIST_OFFSETS_VERSIONS:
            struct_.encode = partial(encode_list_offsets, struct_.API_VERSION, self._asked)
        return struct_


class _OffsetFetchAnsweredUndecoded(AnsweredUndecoded, OffsetFetchRequest):  # type: ignore[misc]
    """Encoded here too, for the versions whose answers are read here."""

    def __init__(self, group: str, topics: list[tuple[str, list[int]]]) -> None:
        super().__init__(group, topics)
        self._asked = (group, topics)

    def build(self, request_struct_class: Any) -> Any:
        struct_ = super().build(request_struct_class)
        if struct_.API_VERSION in OFFSET_FETCH_VERSIONS:
            struct_.encode = partial(encode_offset_fetch, *self._asked)
        return struct_


def by_leader_of(
    partitions_per_topic: Mapping[str, int],
    leader_of: Callable[[KafkaTP], int | None],
    timestamp: int,
) -> tuple[dict[int, dict[str, list[tuple[int, int]]]], list[TopicPartition]]:
    """Every partition's ``(partition, timestamp)`` under its leader and topic, in
    order; the partitions without a leader apart. Grouped in C-level passes instead of a
    dict step per partition: with ``encode_offset_fetch``, 0.13 s less CPU a poll of
    100 000 partitions."""
    by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
    unled: list[TopicPartition] = []
    for topic, count in partitions_per_topic.items():
        asked = map(_new_tuple, repeat(KafkaTP, count), zip(repeat(topic), range(count)))
        leaders = [-1 if leader is None else leader for leader in map(leader_of, asked)]
        lead = leaders.__getitem__
        for leader, led in groupby(sorted(range(count), key=lead), lead):
            if leader < 0:
                unled += (TopicPartition(topic, p) for p in led)
            else:
                by_leader.setdefault(leader, {})[topic] = list(zip(led, repeat(timestamp)))
    return by_leader, unled


async def list_offsets(
    client: Client, partitions_per_topic: Mapping[str, int], timestamp: int = LATEST
) -> Offsets:
    """Log end (or start, ``EARLIEST``) offsets of every partition: one ListOffsets per
    leader, sent together. ``client`` must know the topics' leaders
    (``metadata_scope.track_topics``)."""
    inner = inner_client(client)
    by_leader, unled = by_leader_of(
        partitions_per_topic, inner.cluster.leader_for_partition, timestamp
    )
    answers: list[Undecoded] = await asyncio.gather(
        *(
            inner.send(node, _ListOffsetsAnsweredUndecoded(list(topics.items())))
            for node, topics in by_leader.items()
        )
    )
    found: dict[TopicPartition, int] = {}
    for answer in answers:
        got = read_list_offsets(answer.version, answer.body())
        if found:
            found.update(got.found)
        else:  # the first (often the only) answer's own: no copy of it
            found = got.found
        unled += got.failed
    return Offsets(found, unled)


async def committed_offsets(
    admin: AIOKafkaAdminClient, group: str, partitions_per_topic: Mapping[str, int]
) -> Offsets:
    """The group's committed offsets of every partition (-1: none), one OffsetFetch to
    the group's coordinator."""
    coordinator = await admin.find_coordinator(group)
    asked: list[tuple[str, list[int]]] = [
        (topic, list(range(count))) for topic, count in partitions_per_topic.items()
    ]
    inner = inner_client(admin)
    answer: Any = await inner.send(coordinator, _OffsetFetchAnsweredUndecoded(group, asked))
    return read_offset_fetch(answer.version, answer.body())


async def committed_through_coordinator(
    consumer: AIOKafkaConsumer, asked: list[KafkaTP]
) -> dict[KafkaTP, int | None]:
    """The consumer group's committed offsets of ``asked`` (None: no commit) in one
    request, the slow way that retries and follows the coordinator. ``committed()``, the
    public call, asks one partition at a time (15 s for 100 000 here), so this uses the
    consumer's coordinator (private: ``_coordinator.fetch_committed_offsets``)."""
    fetched = await consumer._coordinator.fetch_committed_offsets(asked)
    out: dict[KafkaTP, int | None] = {}
    for tp in asked:
        done = fetched.get(tp)
        out[tp] = None if done is None else done.offset
    return out
