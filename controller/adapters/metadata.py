"""The Metadata request the controller and its clients send: only about Ballast's topics,
creating none, its answer read by ``controller.wire.metadata`` in a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from aiokafka.protocol.metadata import MetadataRequest

from assignors import collector_paused
from controller.adapters.metadata_scope import Client, inner_client
from controller.adapters.undecoded import AnsweredUndecoded, Undecoded
from controller.wire.metadata import TopicMetadata, read_metadata


class _MetadataRequestDecodedByCaller(AnsweredUndecoded, MetadataRequest):  # type: ignore[misc]
    """The connection decodes a response in the event loop; for 100 000 partitions
    that held the loop for ~0.9 s (every due rebalance waited). This request's response
    reaches the caller undecoded, to be decoded in a thread."""


def _read_paused(response: Undecoded) -> TopicMetadata:
    with collector_paused():
        return read_metadata(response.version, response.body())


async def topic_metadata(client: Client, topics: Iterable[str]) -> TopicMetadata:
    """Partition counts and replica racks, from one Metadata request through any of our
    clients. aiokafka's own calls either ask about every topic of the cluster
    (``list_topics``, ``describe_cluster``, a consumer's ``topics()``, which does not even
    keep what it learnt) or let the broker create a topic they merely name; this asks
    only about ours and creates nothing. The answer is handed over undecoded and read in
    a worker thread: one entry per partition must not hold the event loop."""
    wanted = sorted(set(topics))
    if not wanted:
        return TopicMetadata({}, {}, [], 0, {})
    inner = inner_client(client)
    request = _MetadataRequestDecodedByCaller(wanted, allow_auto_topic_creation=False)
    response: Undecoded = await inner.send(inner.get_random_node(), request)
    return await asyncio.to_thread(_read_paused, response)
