"""The topics Ballast creates and checks: the compacted assignments, constraints, lag and
heartbeat topics, the samples stream, the control topic. Created where missing (Kafka
clusters seldom create topics on first use) with the settings of
``controller.wire.topic_settings``; one that exists but cannot serve is refused with the
fix, and each of its settings that puts Ballast's state at risk is logged as a warning."""

from __future__ import annotations

import asyncio
import time
from typing import Any, NamedTuple

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError, for_code

from controller import logs
from controller.adapters.metadata import topic_metadata
from controller.config import Config
from controller.errors import InputError
from controller.wire.metadata import TopicMetadata
from controller.wire.topic_settings import (
    Unsafe,
    created_configs,
    replication_factor,
    unsafe_settings,
)

log = logs.get("ballast.topics")


class BrokerRefusalError(InputError):
    """The brokers cannot serve Ballast as configured: a topic it needs exists but cannot
    be used as it is, or they refuse the producer or group session it asks for (the
    message says how to fix it). Like a bad config, it stops start-up with one line and
    exit code 2."""


class Ensured(NamedTuple):
    """A topic Ballast needs, as it found or made it."""

    partitions: int
    #: Created now (with ``partitions``) rather than found.
    created: bool
    #: What in a found topic's settings puts Ballast's state at risk (each logged).
    unsafe: list[Unsafe]


async def ensure_topic(
    admin: AIOKafkaAdminClient,
    name: str,
    partitions: int,
    replicas: int | None,
    *,
    compacted: bool,
    setting: str,
    required: bool = False,
) -> Ensured:
    """Create ``name`` if missing, with ``replicas`` replicas (None: three, or every
    broker of a smaller cluster) and the settings of ``topic_settings``; take a topic that
    exists as it is, warning about each unsafe setting. ``required``: a compacted topic
    that is not compacted is refused. ``setting`` names the config key of the topic's
    name, and ``replicas``' is ``assignments.replication_factor``. Asks about this topic
    alone: ``list_topics`` would fetch and decode the metadata of every partition of the
    cluster (``metadata_scope``)."""
    meta = await topic_metadata(admin, [name])
    if name not in meta.counts:
        if await _create(
            admin, name, partitions, replicas, meta=meta, compacted=compacted, setting=setting
        ):
            return Ensured(partitions, True, [])
        # Another replica created it meanwhile, or the broker asked had not heard of it
        # yet: either way it exists, and its settings are checked like any found topic's.
        meta = await _known(admin, name)
    configs = await _described(admin, name)
    policy = configs.get("cleanup.policy")
    if required and (policy is None or "compact" not in policy.split(",")):
        raise BrokerRefusalError(
            f"topic {name!r} exists with cleanup.policy={policy!r}; Ballast's topics must "
            f"be compacted (kafka-configs --alter --entity-type topics --entity-name {name} "
            f"--add-config cleanup.policy=compact), or configure another name ({setting})"
        )
    unsafe = unsafe_settings(
        name, configs, meta.replicas.get(name, 0), meta.brokers, compacted=compacted
    )
    for found in unsafe:
        log.warning(
            "unsafe_topic_setting",
            topic=name,
            setting=found.setting,
            value=found.value,
            detail=found.why,
        )
    return Ensured(meta.counts[name], False, unsafe)


async def _create(
    admin: AIOKafkaAdminClient,
    name: str,
    partitions: int,
    replicas: int | None,
    *,
    meta: TopicMetadata,
    compacted: bool,
    setting: str,
) -> bool:
    """Create the topic; False when the brokers answer that it exists already."""
    try:
        rf = replication_factor(replicas, meta.brokers, "assignments.replication_factor")
    except ValueError as exc:
        raise BrokerRefusalError(f"cannot create topic {name!r} ({setting}): {exc}") from None
    settings = created_configs(rf, compacted=compacted)
    answer = await admin.create_topics([NewTopic(name, partitions, rf, topic_configs=settings)])
    for _, code, message in refusals(answer):
        if code == TopicAlreadyExistsError.errno:
            return False
        raise BrokerRefusalError(
            f"the brokers refused to create topic {name!r} ({setting}): "
            f"{for_code(code).__name__}: {message}"
        )
    if rf < 3:
        log.warning(
            "topic_replication_below_3",
            topic=name,
            replicas=rf,
            brokers=meta.brokers,
            detail="the cluster has fewer than 3 brokers: the topic does not survive "
            "the loss of one",
        )
    log.info("topic_created", topic=name, partitions=partitions, replicas=rf, configs=settings)
    return True


def refusals(answer: Any) -> list[tuple[str, int, str | None]]:
    """``(topic, error code, message)`` of each topic a CreateTopics or CreatePartitions
    answer refused. aiokafka's ``create_topics`` returns the answer without raising: a
    topic the brokers would not create (a policy, a partition count KRaft will not write
    in one request, a denied ACL) must not pass for created."""
    out = []
    for entry in answer.topic_errors:
        topic, code = str(entry[0]), int(entry[1])
        if code:
            out.append((topic, code, str(entry[2]) if len(entry) > 2 and entry[2] else None))
    return out


#: How long a topic known to exist may take to reach the metadata of the broker asked.
#: Seconds as a rule; a single Kafka 4.4 broker that had just created 100 000
#: partitions listed a topic created after them 41 s later (``load_soak.py``).
VISIBLE_TIMEOUT = 120.0


class _Patience:
    """Waiting for a broker to hear of a topic that exists: a pause between asks, one
    log line once it takes long enough to notice, and the refusal at the deadline."""

    def __init__(self, name: str, what: str, timeout: float) -> None:
        self.name, self.what = name, what
        self.began = time.monotonic()
        self.deadline = self.began + timeout
        self.logged = False

    async def wait(self, refusal: str) -> None:
        now = time.monotonic()
        if now > self.deadline:
            raise BrokerRefusalError(refusal)
        if not self.logged and now - self.began >= 1.0:
            self.logged = True
            log.info("topic_not_yet_visible", topic=self.name, asked=self.what)
        await asyncio.sleep(0.1)


async def _described(
    admin: AIOKafkaAdminClient, name: str, timeout: float = VISIBLE_TIMEOUT
) -> dict[str, str | None]:
    """A topic's configs as the broker states them. The broker asked may be another than
    the one whose metadata listed the topic, and may not know it yet: it is asked again
    until it does, and any other error is the brokers' refusal: read as an empty answer,
    it would say "no cleanup.policy" and refuse a compacted topic for the wrong reason."""
    patience = _Patience(name, "describe_configs", timeout)
    while True:
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        configs: dict[str, str | None] = {}
        code, message = 0, None
        for response in described:
            for resource in response.resources:
                code, message = code or int(resource[0]), message or resource[1]
                for entry in resource[4]:
                    configs[str(entry[0])] = None if entry[1] is None else str(entry[1])
        if not code:
            return configs
        refusal = (
            f"the brokers would not describe topic {name!r}: {for_code(code).__name__}: {message}"
        )
        if code != UnknownTopicOrPartitionError.errno:
            raise BrokerRefusalError(refusal)
        await patience.wait(refusal)


async def partition_count(
    admin: AIOKafkaAdminClient, name: str, timeout: float = VISIBLE_TIMEOUT
) -> int:
    """The partition count of a topic known to exist."""
    return (await _known(admin, name, timeout)).counts[name]


async def _known(
    admin: AIOKafkaAdminClient, name: str, timeout: float = VISIBLE_TIMEOUT
) -> TopicMetadata:
    """Metadata that describes a topic known to exist. A new topic takes a while to
    reach every broker's metadata (Apache Kafka answers UnknownTopicOrPartition until
    then; Tansu never lags), and each request may go to another broker, so a caller
    told that the topic exists asks again until one describes it."""
    patience = _Patience(name, "metadata", timeout)
    while name not in (meta := await topic_metadata(admin, [name])).counts:
        await patience.wait(f"topic {name!r} exists but no broker describes it yet")
    return meta


async def ensure_pipeline_topics(admin: AIOKafkaAdminClient, cfg: Config) -> list[Unsafe]:
    """The lag topic (latest per partition: compacted) and the samples topic (a stream),
    created where missing. The controller and the lag job each call it before they start:
    either may come first, and each reads what the other writes."""
    rf, partitions = cfg.assignments.replication_factor, cfg.assignments.partitions
    lag = await ensure_topic(
        admin, cfg.lag.topic, partitions, rf, compacted=True, setting="lag.topic"
    )
    unsafe = lag.unsafe
    if cfg.lag.samples_topic is not None:
        samples = await ensure_topic(
            admin,
            cfg.lag.samples_topic,
            partitions,
            rf,
            compacted=False,
            setting="lag.samples_topic",
        )
        unsafe = unsafe + samples.unsafe
    return unsafe
