"""The topics Ballast creates and checks: the compacted assignments, lag and constraints
topics and the samples stream. Created where missing (Kafka clusters seldom create
topics on first use); one that exists but cannot serve is refused with the fix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from controller.adapters.metadata import topic_metadata
from controller.config import Config
from controller.errors import InputError


class BrokerRefusalError(InputError):
    """The brokers cannot serve Ballast as configured: a topic it needs exists but cannot
    be used as it is, or they refuse the producer or group session it asks for (the
    message says how to fix it). Like a bad config, it stops start-up with one line and
    exit code 2."""


#: The configs of a topic Ballast creates: compacted, and a segment rolled at least hourly
#: so the log cleaner can drop superseded records (only closed segments are cleaned; with
#: Kafka's 7-day default a takeover would read every record of the week).
COMPACTED_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": str(3_600_000)}


async def ensure_topic(
    admin: AIOKafkaAdminClient, name: str, partitions: int, rf: int, configs: Mapping[str, str]
) -> int | None:
    """Create ``name`` if missing (Kafka clusters seldom create topics on first use);
    its partition count if it existed, else None. Asks about this topic alone:
    ``list_topics`` would fetch and decode the metadata of every partition of the
    cluster (``metadata_scope``)."""
    existing = (await topic_metadata(admin, [name])).counts
    if name in existing:
        return existing[name]
    try:
        await admin.create_topics([NewTopic(name, partitions, rf, topic_configs=dict(configs))])
    except TopicAlreadyExistsError:  # another replica created it meanwhile
        return await partition_count(admin, name)
    return None


async def partition_count(admin: AIOKafkaAdminClient, name: str, timeout: float = 10.0) -> int:
    """The partition count of a topic known to exist. A new topic takes a moment to reach
    the brokers' metadata (Apache Kafka answers UnknownTopicOrPartition until then; Tansu
    never lags), so a replica that lost the race to create it asks again."""
    deadline = time.monotonic() + timeout
    while not (count := (await topic_metadata(admin, [name])).counts.get(name)):
        if time.monotonic() > deadline:
            raise BrokerRefusalError(f"topic {name!r} exists but no broker describes it yet")
        await asyncio.sleep(0.1)
    return count


async def ensure_pipeline_topics(admin: AIOKafkaAdminClient, cfg: Config) -> None:
    """The lag topic (latest per partition: compacted) and the samples topic (a stream),
    created where missing. The controller and the lag job each call it before they start:
    either may come first, and each reads what the other writes."""
    rf, partitions = cfg.assignments.replication_factor, cfg.assignments.partitions
    await ensure_topic(admin, cfg.lag.topic, partitions, rf, COMPACTED_TOPIC_CONFIGS)
    if cfg.lag.samples_topic is not None:
        await ensure_topic(admin, cfg.lag.samples_topic, partitions, rf, {})


async def ensure_compacted_topic(
    admin: AIOKafkaAdminClient, name: str, partitions: int, rf: int, setting: str
) -> int:
    """Create ``name`` compacted if missing; refuse a non-compacted one (``setting``
    names it in the config). Returns its partition count."""
    existing = await ensure_topic(admin, name, partitions, rf, COMPACTED_TOPIC_CONFIGS)
    if existing is None:
        return partitions
    described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    policy = None
    for response in described:
        for resource in response.resources:
            for entry in resource[4]:
                if entry[0] == "cleanup.policy":
                    policy = entry[1]
    if policy is None or "compact" not in policy.split(","):
        raise BrokerRefusalError(
            f"topic {name!r} exists with cleanup.policy={policy!r}; Ballast's topics must "
            f"be compacted (kafka-configs --alter --entity-type topics --entity-name {name} "
            f"--add-config cleanup.policy=compact), or configure another name ({setting})"
        )
    return existing
