"""Real brokers on loopback for the integration tests: started once per session, stopped
at the end. Tests isolate themselves with unique group and topic names.

The Kafka-protocol broker is Apache Kafka (``apache_kafka.VERSION``, KRaft) unless
``BALLAST_TEST_BROKER=tansu`` picks Tansu; ``BALLAST_TEST_KAFKA_VERSION`` picks another
Kafka (``apache_kafka.OLDEST``: the compatibility run)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP

from controller.client.consumer import ManagedConsumer
from controller.client.identity import PresenceOptions
from controller.config import Config
from controller.tools import apache_kafka, embedded

_counter = itertools.count()


@pytest.fixture(scope="session")
def broker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("brokers")


_kind = os.environ.get("BALLAST_TEST_BROKER", "kafka")
if _kind not in apache_kafka.BROKER_KINDS:
    raise ValueError(f"BALLAST_TEST_BROKER={_kind!r}: one of {apache_kafka.BROKER_KINDS}")
BROKER: apache_kafka.BrokerKind = _kind
KAFKA_VERSION = os.environ.get("BALLAST_TEST_KAFKA_VERSION", apache_kafka.VERSION)
#: What Tansu lacks (docs/compatibility.md); tests of those skip on it.
needs_kafka = pytest.mark.skipif(BROKER != "kafka", reason="needs Apache Kafka")


@contextlib.contextmanager
def restartable_broker(workdir: Path) -> Iterator[embedded.BrokerProcess]:
    """A started broker of the session's kind, of its own, whose topics, records and
    commits survive ``stop()`` and ``start()``: Kafka keeps its log directory; Tansu
    needs S3 storage (moto on loopback)."""
    if BROKER == "kafka":
        with apache_kafka.running(BROKER, workdir, KAFKA_VERSION) as broker:
            yield broker
        return
    with (
        embedded.s3(workdir).start() as store,
        embedded.durable_tansu(workdir, store).start() as broker,
    ):
        yield broker


@pytest.fixture(scope="session")
def kafka(broker_dir: Path) -> Iterator[embedded.BrokerProcess]:
    with apache_kafka.running(BROKER, broker_dir, KAFKA_VERSION) as proc:
        yield proc


@pytest.fixture(scope="session")
def mqtt(broker_dir: Path) -> Iterator[embedded.BrokerProcess]:
    with embedded.amqtt(broker_dir).start() as proc:
        yield proc


@pytest.fixture
def names() -> tuple[str, str]:
    """A unique (group, topic) pair for one test."""
    n = next(_counter)
    suffix = uuid.uuid4().hex[:6]
    return f"group-{n}-{suffix}", f"orders-{n}-{suffix}"


@pytest.fixture
async def topic(kafka: embedded.BrokerProcess, names: tuple[str, str]) -> str:
    await embedded.create_topics(kafka.address, {names[1]: 12})
    return names[1]


def kafka_yaml(kafka: embedded.BrokerProcess) -> str:
    """The ``kafka:`` section of a test's YAML config for ``kafka`` (a flow mapping)."""
    return json.dumps(apache_kafka.kafka_settings(BROKER, kafka.address))


def make_config(
    kafka: embedded.BrokerProcess | apache_kafka.KafkaCluster,
    mqtt: embedded.BrokerProcess,
    group: str,
    **over: object,
) -> Config:
    raw: dict[str, object] = {
        "kafka": {**apache_kafka.kafka_settings(BROKER, kafka.address), "metadata_interval": 0.5},
        "mqtt": {
            "port": mqtt.port,
            "client_id": f"ctl-{group}-{uuid.uuid4().hex[:4]}",
            "keepalive": 2,
        },
        "rebalance": {"delay": 0.2, "leave_grace": 1.0, "handoff_timeout": 5.0},
        "lag": {"source": "none", "poll_interval": 0.5},
        "groups": [{"name": group}],
        "http": {"port": 0},
    }
    for key, value in over.items():
        section = raw.setdefault(key, {})
        assert isinstance(section, dict)
        assert isinstance(value, dict)
        section.update(value)
    return Config.model_validate(raw)


def start_daemon(
    config: Path, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``ballast run`` as its own process, stderr (the JSON log) appended to ``log``."""
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "ballast"), "run", "--config", str(config)],
        stderr=log.open("ab"),
        stdout=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


async def records_and_commits(address: str, group: str, topic: str) -> None:
    """30 and 5 records in partitions 0 and 1 of ``topic``; ``group`` committed 10 and 5
    (lag 20 and 0; the other partitions: nothing written, nothing committed)."""
    producer = AIOKafkaProducer(bootstrap_servers=address, linger_ms=0)
    await producer.start()
    try:
        # One record per request: Tansu's ListOffsets is exact only at batch boundaries.
        for p, count in ((0, 30), (1, 5)):
            for _ in range(count):
                await producer.send_and_wait(topic, b"m", partition=p)
    finally:
        await producer.stop()
    committer = AIOKafkaConsumer(
        bootstrap_servers=address, group_id=group, enable_auto_commit=False
    )
    await committer.start()
    try:
        committer.assign([KafkaTP(topic, 0), KafkaTP(topic, 1)])
        await committer.commit({KafkaTP(topic, 0): 10, KafkaTP(topic, 1): 5})
    finally:
        await committer.stop()


async def read_records(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes, bytes]]:
    """The first ``count`` records of ``topic``, as (partition, key, value)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    out: list[tuple[int, bytes, bytes]] = []
    try:
        while len(out) < count:
            batch = await consumer.getmany(timeout_ms=2000)
            assert batch, f"only {len(out)} of {count} records arrived"
            for msgs in batch.values():
                out += [(m.partition, m.key, m.value) for m in msgs]
    finally:
        await consumer.stop()
    return out


def managed_member(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    group: str,
    name: str,
    topic: str,
    **kw: Any,
) -> ManagedConsumer:
    """A ``ManagedConsumer`` of ``topic`` on the session's brokers (MQTT keepalive 1 s)."""
    return ManagedConsumer(
        group,
        name,
        [topic],
        bootstrap_servers=kafka.address,
        presence=PresenceOptions(mqtt_port=mqtt.port, mqtt_keepalive=1),
        **kw,
    )
