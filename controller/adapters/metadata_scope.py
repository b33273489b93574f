"""Keeping an aiokafka client's own metadata refreshes to a topic it uses.

aiokafka refreshes each client's cluster metadata every ``metadata_max_age_ms`` (5 min by
default) and after a broken connection, asking about the topics the client tracks. A
client that tracks none (an admin client; a consumer assigned nothing; a producer that
has not needed to look a topic up) asks about *every* topic of the cluster (a Metadata
request with ``topics: null``) and decodes the answer in the event loop. With 100 000
partitions in the cluster that answer is 3 MB and took 1.7 s of CPU on the CI machine,
and 10 times as long at a million partitions: time in which the process runs nothing
else (no MQTT keepalive, no lease renewal, no rebalance). Java's clients ask about no
topic when they need only the brokers; aiokafka has no option for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient

#: The clients Ballast builds; each wraps one ``AIOKafkaClient``.
Client: TypeAlias = AIOKafkaConsumer | AIOKafkaProducer | AIOKafkaAdminClient


def inner_client(client: Client) -> AIOKafkaClient:
    """The connection pool and cluster metadata a consumer, producer or admin client wraps
    (the producer names it ``client``, the others ``_client``)."""
    inner: AIOKafkaClient = (
        client.client if isinstance(client, AIOKafkaProducer) else client._client  # private
    )
    return inner


def track_when_idle(client: Client, topic: str) -> None:
    """Have ``client``'s refreshes ask about ``topic`` while it tracks no other.

    A producer must be given the topic it writes: a refresh replaces what the client
    knows with what it asked about, and a topic learnt only from the bootstrap (Tansu
    names every topic there) is never added to what it asks about, so its sends would
    wait for a leader until they time out (40 s). ``topic`` must exist or be one the
    client writes: Metadata requests from aiokafka allow the broker to create the topics
    they name. Call it before ``start()`` when the topic is known to exist (the first
    refresh then names it: a start that waits on the brokers, an idempotent producer's
    producer id or a coordinator lookup, can outlast ``metadata_max_age_ms``), else
    after it, and after an ``assign()`` that may have left the consumer with nothing:
    ``assign([])`` itself asks for a refresh, which runs at the loop's next turn and so
    reads the topic set here."""
    inner = inner_client(client)
    if not inner._topics:  # private: aiokafka offers no reader for it
        inner.set_topics([topic])


async def track_topics(client: AIOKafkaConsumer, topics: Iterable[str]) -> None:
    """Track ``topics`` too, refreshed at once in one request. A consumer asked for
    offsets of partitions whose leaders it does not know adds their topics one at a time,
    a refresh each: ten topics of 10 000 partitions cost 55 topics' worth of decoding
    (11 s of CPU here) instead of ten."""
    inner = inner_client(client)
    wanted = set(topics)
    if not wanted <= inner._topics:
        await inner.set_topics(sorted(wanted | inner._topics))
