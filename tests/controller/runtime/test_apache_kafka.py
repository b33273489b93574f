"""What only a real Apache Kafka can show (Tansu has no ``broker.rack``, no log cleaner
and no ACLs): racks end to end from the brokers' own metadata, the assignments topic
compacted by the log cleaner and a takeover that recovers from what is left, and Kafka's
ACLs making the controller's principal the only writer of Ballast's topics."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from assignors import TopicPartition
from controller.adapters import topics as topics_module
from controller.adapters.metadata import topic_metadata
from controller.adapters.topics import BrokerRefusalError, ensure_topic, partition_count
from controller.client import PresenceOptions
from controller.client.confluent import BallastConsumer
from controller.client.consumer import ManagedConsumer
from controller.config import Config
from controller.core.views import group_view
from controller.errors import CredentialsError
from controller.runtime.daemon import Controller
from controller.tasks import cancel_and_wait
from controller.tools import apache_kafka, embedded
from controller.tools.audit import run_audit
from controller.wire.assignments import READ_ISOLATION
from controller.wire.records import Assignment, assignment_key
from tests.brokers import make_config, needs_kafka
from tests.certs import server_cert
from tests.controller.runtime.test_controller import running

pytestmark = [pytest.mark.integration, needs_kafka]


@contextlib.asynccontextmanager
async def members(
    group: str, topic: str, bootstrap: str, mqtt: embedded.BrokerProcess, **racks: str | None
) -> AsyncIterator[dict[str, ManagedConsumer]]:
    """One started ``ManagedConsumer`` per keyword (member -> its rack), polled in the
    background so that grants and revokes are applied."""
    started: dict[str, ManagedConsumer] = {}
    stack = contextlib.AsyncExitStack()
    async with stack:
        for name, rack in racks.items():
            started[name] = await stack.enter_async_context(
                _member(group, name, topic, bootstrap, mqtt, rack=rack)
            )
        yield started


@contextlib.asynccontextmanager
async def _member(
    group: str,
    name: str,
    topic: str,
    bootstrap: str,
    mqtt: embedded.BrokerProcess,
    *,
    rack: str | None = None,
    **options: Any,
) -> AsyncIterator[ManagedConsumer]:
    member = ManagedConsumer(
        group,
        name,
        [topic],
        bootstrap_servers=bootstrap,
        presence=PresenceOptions(mqtt_port=mqtt.port, mqtt_keepalive=1),
        rack=rack,
        **options,
    )
    await member.start()

    async def poll() -> None:
        while True:
            await member.getmany(timeout_ms=50)

    task = asyncio.create_task(poll())
    try:
        yield member
    finally:
        await cancel_and_wait(task)
        await member.close()


async def until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        await asyncio.sleep(0.1)


def held(consumers: dict[str, ManagedConsumer]) -> dict[str, set[TopicPartition]]:
    return {
        n: {TopicPartition(tp.topic, tp.partition) for tp in c.assignment}
        for n, c in consumers.items()
    }


# ------------------------------------------------------------------ racks


def cross_rack(g: Any) -> int:
    view: Any = group_view(g, partitions=False)
    return int(view["quality"]["cross_rack"])


@pytest.fixture(scope="module")
def zoned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[apache_kafka.KafkaCluster]:
    """Three KRaft nodes, ``broker.rack`` a, b and c."""
    with apache_kafka.cluster(tmp_path_factory.mktemp("zoned")).start() as cluster:
        yield cluster


async def test_partitions_follow_the_racks_the_brokers_report(
    zoned: apache_kafka.KafkaCluster, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """Six single-replica partitions, two on each broker (racks a, b and c): a member per
    rack gets exactly the two whose replica shares its rack, as the brokers report it.
    When rack c's member leaves, its two go cross-rack; a new member in rack c takes
    them back."""
    group, topic = names
    admin = AIOKafkaAdminClient(bootstrap_servers=zoned.address)
    await admin.start()
    try:
        placed = {p: [p % 3 + 1] for p in range(6)}  # node ids 1, 2, 3: racks a, b, c
        await admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=placed)])
        deadline = time.monotonic() + 30
        while True:  # a new topic reaches the brokers' metadata a moment after its create
            racks = (await topic_metadata(admin, [topic])).racks
            if len(racks) == 6 and all(racks.values()):
                break
            assert time.monotonic() < deadline, f"no racks for {topic}: {racks}"
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    by_rack: dict[str, set[TopicPartition]] = {}
    for tp, replica_racks in racks.items():
        (rack,) = replica_racks
        by_rack.setdefault(rack, set()).add(TopicPartition(tp.topic, tp.partition))
    assert sorted(len(v) for v in by_rack.values()) == [2, 2, 2], by_rack
    cfg = make_config(zoned, mqtt, group)
    async with (
        running(cfg) as ctl,
        members(group, topic, zoned.address, mqtt, ma="a", mb="b") as fleet,
    ):
        g = ctl.groups[group]
        async with _member(group, "mc", topic, zoned.address, mqtt, rack="c") as mc:
            fleet["mc"] = mc
            want = {"ma": by_rack["a"], "mb": by_rack["b"], "mc": by_rack["c"]}
            await until(lambda: held(fleet) == want, 60, f"rack-local grants {want}")
            assert cross_rack(g) == 0
        del fleet["mc"]
        await until(lambda: sum(map(len, held(fleet).values())) == 6, 60, "c's partitions moved")
        assert cross_rack(g) == 2
        async with _member(group, "mc2", topic, zoned.address, mqtt, rack="c") as mc2:
            fleet["mc2"] = mc2
            want = {"ma": by_rack["a"], "mb": by_rack["b"], "mc2": by_rack["c"]}
            await until(lambda: held(fleet) == want, 60, "rack c's partitions back in rack c")
            assert cross_rack(g) == 0


async def test_topics_are_created_to_survive_a_broker_and_risky_ones_are_named(
    zoned: apache_kafka.KafkaCluster, names: tuple[str, str]
) -> None:
    """On three brokers an unset replication factor means three replicas and
    ``min.insync.replicas`` 2, compaction settings stated; asking for four is refused
    before Kafka is asked; a topic made by hand with one replica, unclean leader
    election and Kafka's weekly segments is taken, with each named."""
    made, hand_made = f"made-{names[0]}", f"hand-{names[0]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=zoned.address)
    await admin.start()
    try:
        deadline = time.monotonic() + 30  # a node registers a moment after it starts
        while (await topic_metadata(admin, [made])).brokers < 3:
            assert time.monotonic() < deadline, "the cluster never listed 3 brokers"
            await asyncio.sleep(0.1)
        ensured = await ensure_topic(
            admin, made, 2, None, compacted=True, required=True, setting="assignments.name"
        )
        assert ensured == (2, True, [])
        deadline = time.monotonic() + 30
        while (await topic_metadata(admin, [made])).replicas.get(made) != 3:
            assert time.monotonic() < deadline, "the created topic never showed 3 replicas"
            await asyncio.sleep(0.1)
        again = await ensure_topic(
            admin, made, 2, None, compacted=True, required=True, setting="assignments.name"
        )
        assert again == (2, False, [])
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, made)])
        configs = {e[0]: e[1] for r in described for res in r.resources for e in res[4]}
        assert configs["min.insync.replicas"] == "2"
        assert configs["cleanup.policy"] == "compact"
        assert configs["delete.retention.ms"] == "86400000"
        with pytest.raises(BrokerRefusalError, match="is 4 but the cluster has 3 brokers"):
            await ensure_topic(
                admin, f"four-{names[0]}", 1, 4, compacted=False, setting="lag.samples_topic"
            )
        risky = {"cleanup.policy": "compact", "unclean.leader.election.enable": "true"}
        await admin.create_topics([NewTopic(hand_made, 1, 1, topic_configs=risky)])
        await partition_count(admin, hand_made)
        found = await ensure_topic(
            admin, hand_made, 1, None, compacted=True, required=True, setting="assignments.name"
        )
        assert [(u.setting, u.value) for u in found.unsafe] == [
            ("replication factor", "1"),
            ("unclean.leader.election.enable", "true"),
            ("segment.ms", "604800000"),  # Kafka's default: compacted a week late
        ]
    finally:
        await admin.close()


async def test_a_topic_a_lagging_broker_has_not_heard_of_is_still_checked(
    kafka: embedded.BrokerProcess, names: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Metadata request goes to any broker, and one may not know a topic that another
    has just listed. Ballast then tries to create it, is told it exists, and once took
    it unchecked: on the three-broker CI cluster a hand-made topic with one replica
    passed for safe. The broker that has not heard of it is made here by leaving the
    topic out of the answers of the first second and more; the topic must still be
    checked and named, and the wait said in the log."""
    hand_made = f"lagged-{names[0]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    try:
        risky = {"cleanup.policy": "compact", "unclean.leader.election.enable": "true"}
        await admin.create_topics([NewTopic(hand_made, 1, 1, topic_configs=risky)])
        await partition_count(admin, hand_made)
        answers = 0
        lagging_until = time.monotonic() + 1.3

        async def answers_lag(client: Any, topics: list[str]) -> Any:
            nonlocal answers
            answers += 1
            meta = await topic_metadata(client, topics)
            if time.monotonic() < lagging_until:
                return meta._replace(counts={}, replicas={})
            return meta

        monkeypatch.setattr(topics_module, "topic_metadata", answers_lag)
        with structlog.testing.capture_logs() as logged:
            found = await ensure_topic(
                admin, hand_made, 1, None, compacted=True, required=True, setting="assignments.name"
            )
        assert answers >= 3
        waits = [e for e in logged if e["event"] == "topic_not_yet_visible"]
        assert waits == [
            {
                "event": "topic_not_yet_visible",
                "log_level": "info",
                "topic": hand_made,
                "asked": "metadata",
            }
        ]
        assert found.created is False
        assert ("unclean.leader.election.enable", "true") in [
            (u.setting, u.value) for u in found.unsafe
        ]
        with pytest.raises(BrokerRefusalError, match="would not describe topic 'no-such-"):
            await topics_module._described(admin, f"no-such-{names[0]}", timeout=0.3)
    finally:
        await admin.close()


async def test_a_topic_the_brokers_refuse_is_not_taken_for_created(
    kafka: embedded.BrokerProcess, names: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KRaft writes a CreateTopics request's records in one batch and refuses more than
    10 000: aiokafka hands back the refusal without raising, and Ballast once went on as
    if its topic existed. Now start-up stops with the brokers' reason. The test tool
    creates such a topic in requests KRaft accepts (here 3 partitions a request)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    try:
        with pytest.raises(BrokerRefusalError, match=r"PolicyViolationError.*excessively large"):
            await ensure_topic(
                admin, f"huge-{names[0]}", 10_000, 1, compacted=True, setting="assignments.name"
            )
        assert f"huge-{names[0]}" not in (await topic_metadata(admin, [f"huge-{names[0]}"])).counts
        monkeypatch.setattr(embedded, "PARTITIONS_PER_REQUEST", 3)
        await embedded.create_topics(kafka.address, {f"grown-{names[0]}": 7})
        deadline = time.monotonic() + 30  # added partitions reach the metadata a moment later
        while (await topic_metadata(admin, [f"grown-{names[0]}"])).counts.get(
            f"grown-{names[0]}"
        ) != 7:
            assert time.monotonic() < deadline, "the grown topic never showed 7 partitions"
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


# ------------------------------------------------------------------ compaction


async def _read_all(address: str, topic: str) -> tuple[int, int]:
    """(records read from the beginning, offsets the log spans): fewer records than
    offsets means the cleaner removed superseded ones."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=address, enable_auto_commit=False, isolation_level=READ_ISOLATION
    )
    await consumer.start()
    try:
        count = (await topic_metadata(consumer, [topic])).counts[topic]
        tps = [KafkaTP(topic, p) for p in range(count)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        read = 0
        deadline = time.monotonic() + 60
        while behind := {tp: p for tp in tps if (p := await consumer.position(tp)) < ends[tp]}:
            assert time.monotonic() < deadline, f"read stuck at {behind} of {ends}"
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                read += len(msgs)
        return read, sum(ends.values())
    finally:
        await consumer.stop()


async def test_the_cleaner_compacts_the_assignments_and_a_takeover_recovers_from_what_is_left(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
) -> None:
    """Small segments and an eager cleaner: after churn the cleaner removes superseded
    assignment records (offsets with no record left). A new controller reads only what
    is left and takes over with the same grants: nothing moves."""
    group = names[0]
    assignments = f"assignments-{group}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    try:
        eager = {
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        }
        await admin.create_topics([NewTopic(assignments, 2, 1, topic_configs=eager)])
    finally:
        await admin.close()
    cfg = make_config(kafka, mqtt, group, assignments={"name": assignments})
    options = {"assignments_topic": assignments}
    async with contextlib.AsyncExitStack() as stack:
        fleet: dict[str, ManagedConsumer] = {}
        for name in ("m0", "m1"):
            fleet[name] = await stack.enter_async_context(
                _member(group, name, topic, kafka.address, mqtt, **options)
            )
        async with running(cfg) as ctl:
            for step in range(6):  # a join and a leave per step, each a generation
                name = f"x{step}"
                async with _member(group, name, topic, kafka.address, mqtt, **options) as m:
                    fleet[name] = m
                    await until(
                        lambda: [len(c.assignment) for c in fleet.values()] == [4] * 3,
                        60,
                        "x joined",
                    )
                    del fleet[name]
                await until(
                    lambda: [len(c.assignment) for c in fleet.values()] == [6, 6], 60, "x left"
                )
                await asyncio.sleep(0.2)  # past segment.ms: the next write rolls a segment
            deadline = time.monotonic() + 90
            while True:
                read, spanned = await _read_all(kafka.address, assignments)
                if read < spanned:
                    break
                assert time.monotonic() < deadline, f"nothing compacted: {read} of {spanned}"
                await asyncio.sleep(1.0)
        # What it last published, read once it has stopped: a controller may publish a
        # generation more after the churn (a presence heard late is granted again).
        first = ctl.groups[group].state.reconciler
        generation, granted = first.generation, dict(first.granted)
        before = held(fleet)
        print(f"compacted: {read} records left of {spanned} offsets")
        async with running(cfg) as again:
            # It starts from the generation the first one left. Under load it may first
            # count the members gone (their presence heard after leave_grace, 1 s here)
            # and grant them the same partitions again when it hears them, under a new
            # generation (`stray_claims_corrected`): the generation is never behind, and
            # the grants come back to what they were within a presence, a leave_grace
            # and a publication (30 s for a loaded machine), with nothing held otherwise.
            state = again.groups[group].state
            assert state.reconciler.generation >= generation
            await until(lambda: dict(state.reconciler.granted) == granted, 30, "the same grants")
            await asyncio.sleep(2.0)  # a takeover that moved something would show it by now
            assert dict(state.reconciler.granted) == granted
        assert held(fleet) == before


# ------------------------------------------------------------------ refusals


async def test_a_session_timeout_the_brokers_refuse_stops_start_up_with_one_line(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """Kafka refuses a group session shorter than ``group.min.session.timeout.ms`` (6 s by
    default; 2 s on the test brokers); the HA election says which setting to change
    instead of failing with the client's error."""
    group = names[0]
    ha = {"enabled": True, "session_timeout": 1.0, "heartbeat_interval": 0.3}
    cfg = make_config(kafka, mqtt, group, ha={**ha, "election_group": f"ctl-{group}"})
    ctl = Controller(cfg)
    try:
        with pytest.raises(BrokerRefusalError, match=r"ha\.session_timeout 1s.*6 s"):
            await ctl.start()
    finally:
        await ctl.stop()


# ------------------------------------------------------------------ ACLs

USERS = {"admin": "admin-secret", "ballast-controller": "ctl-secret", "fleet": "fleet-secret"}


def _sasl(user: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": apache_kafka.SCRAM,
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


#: Seconds for the broker to apply ACLs the controller committed (a metadata replay).
ACL_PROPAGATION = 30.0


def _grant(address: str, *acls: tuple[str, ResourceType, str, ACLOperation]) -> None:
    """As an operator would with ``kafka-acls.sh`` (docs/operations.md, "Kafka ACLs")."""
    admin = KafkaAdminClient(
        bootstrap_servers=address,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=apache_kafka.SCRAM,
        sasl_plain_username="admin",
        sasl_plain_password=USERS["admin"],
    )
    try:
        result = admin.create_acls(
            [
                ACL(
                    f"User:{user}",
                    "*",
                    operation,
                    ACLPermissionType.ALLOW,
                    ResourcePattern(kind, name, ACLResourcePatternType.LITERAL),
                )
                for user, kind, name, operation in acls
            ]
        )
        assert not result["failed"], result["failed"]
        # The controller acknowledges CreateAcls once committed; the broker's authorizer
        # applies them when it replays the metadata log, later on a loaded machine (a CI
        # run saw TopicAuthorizationFailed right after the grant). DescribeAcls is answered
        # from that authorizer: wait until it lists every one (bound: ACL_PROPAGATION).
        every = ACLFilter(
            None,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        wanted = {(f"User:{u}", k, n, o) for u, k, n, o in acls}
        deadline = time.monotonic() + ACL_PROPAGATION
        while True:
            listed, _ = admin.describe_acls(every)
            seen = {
                (a.principal, a.resource_pattern.resource_type, a.resource_pattern.resource_name,
                 a.operation)
                for a in listed
            }  # fmt: skip
            missing = wanted - seen
            if not missing:
                return
            assert time.monotonic() < deadline, f"ACLs not applied by the broker: {missing}"
            time.sleep(0.2)
    finally:
        admin.close()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[embedded.BrokerProcess]:
    """One node whose clients authenticate with SCRAM and whose ACLs apply."""
    workdir = tmp_path_factory.mktemp("secured")
    with apache_kafka.kafka(workdir, users=USERS).start(timeout=60.0) as broker:
        yield broker


async def test_only_the_controllers_principal_writes_ballasts_topics(
    secured: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """The ACLs of docs/operations.md: the controller's principal owns the assignments and
    constraints topics; the fleet's reads the assignments and its own topic. A member
    is granted its partitions and reads records, and a forged grant or constraint from
    its principal is refused by the broker (``TopicAuthorizationFailed``)."""
    group, topic = names
    ctl, fleet = "ballast-controller", "fleet"
    assignments, constraints = "ballast.assignments", "ballast.constraints"
    admin = AIOKafkaAdminClient(bootstrap_servers=secured.address, **_sasl("admin"))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 4, 1)])
    finally:
        await admin.close()
    topic_, group_ = ResourceType.TOPIC, ResourceType.GROUP
    await asyncio.to_thread(
        _grant,
        secured.address,
        (ctl, topic_, assignments, ACLOperation.ALL),
        (ctl, topic_, constraints, ACLOperation.ALL),
        (ctl, topic_, topic, ACLOperation.DESCRIBE),
        (ctl, group_, group, ACLOperation.READ),
        (ctl, group_, group, ACLOperation.DESCRIBE),
        (fleet, topic_, assignments, ACLOperation.READ),
        (fleet, topic_, assignments, ACLOperation.DESCRIBE),
        (fleet, topic_, topic, ACLOperation.READ),
        (fleet, topic_, topic, ACLOperation.DESCRIBE),
        (fleet, group_, group, ACLOperation.READ),
    )
    cfg = make_config(secured, mqtt, group)
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": apache_kafka.SCRAM,
        "sasl_username": ctl,
        "sasl_password": USERS[ctl],
    }
    cfg = cfg.model_copy(update={"kafka": cfg.kafka.model_copy(update=sasl)})
    cfg = Config.model_validate(cfg.model_dump())  # the password as a secret again
    producer = AIOKafkaProducer(bootstrap_servers=secured.address, **_sasl(fleet))
    async with (
        running(cfg),
        _member(group, "m1", topic, secured.address, mqtt, kafka_security=_sasl(fleet)) as m1,
    ):
        await until(lambda: len(m1.assignment) == 4, 60, "m1 granted the topic")
        forged = Assignment(
            group=group,
            member="m2",
            generation=10**6,
            controller_epoch=10**6,
            partitions=[TopicPartition(topic, 0)],
            issued_at=time.time(),
        )
        await producer.start()
        try:
            for target in (assignments, constraints):
                with pytest.raises(TopicAuthorizationFailedError):
                    await producer.send_and_wait(
                        target, forged.encode(), key=assignment_key(group, "m2")
                    )
        finally:
            await producer.stop()
        assert len(m1.assignment) == 4
    reports = await run_audit(secured.address, assignments, [group], 30.0, security=_sasl(ctl))
    assert reports[0].ok, reports[0].render()


def test_clients_without_credentials_get_nothing(secured: embedded.BrokerProcess) -> None:
    """The secured listener refuses a plaintext client outright: nothing above passed
    because the broker let everyone in."""

    async def connect() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=secured.address, request_timeout_ms=3000)
        try:
            await consumer.start()
            await consumer.topics()
        finally:
            await consumer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(connect())


async def test_a_refused_sasl_login_fails_fast_and_names_the_credential(
    secured: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """A wrong SASL password is permanent: the controller's start and a member's start
    end with ``CredentialsError`` naming what to check, instead of being retried as a
    broker not up yet (for ``startup.timeout``: 300 s here, while the bound below is
    a liveness bound of 60 s)."""
    group = names[0]
    wrong = {**_sasl("ballast-controller"), "sasl_plain_password": "not-the-password"}
    cfg = make_config(secured, mqtt, group, startup={"timeout": 300.0})
    kafka = type(cfg.kafka).model_validate(
        {
            **cfg.kafka.model_dump(),
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": apache_kafka.SCRAM,
            "sasl_username": "ballast-controller",
            "sasl_password": "not-the-password",
        }
    )
    ctl = Controller(cfg.model_copy(update={"kafka": kafka}))
    try:
        async with asyncio.timeout(60):
            with pytest.raises(CredentialsError) as err:
                await ctl.start()
    finally:
        await ctl.stop()
    assert "SASL login was refused" in str(err.value)
    assert "kafka.sasl_password" in str(err.value)
    member = ManagedConsumer(
        group,
        "m1",
        ["t"],
        bootstrap_servers=secured.address,
        kafka_security=wrong,
        presence=PresenceOptions(mqtt_port=mqtt.port),
    )
    async with asyncio.timeout(60):
        with pytest.raises(CredentialsError, match=r"SASL login was refused.*kafka_security"):
            await member.start()


def test_a_refused_sasl_login_ends_the_confluent_bindings_start(
    secured: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """librdkafka reports a refused login only to ``error_cb`` and then fails with a
    transport error: the binding's start ends with ``CredentialsError`` naming the
    settings to check, and closes its clients (the ``with`` never enters)."""
    wrong = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": apache_kafka.SCRAM,
        "sasl.username": "fleet",
        "sasl.password": "not-the-password",
    }
    with pytest.raises(CredentialsError, match=r"SASL login was refused.*sasl\.password"):
        _confluent_member(secured.address, names[0], wrong).start()


def _confluent_member(address: str, group: str, kafka_config: dict[str, str]) -> BallastConsumer:
    return BallastConsumer(
        group,
        "m1",
        ["t"],
        bootstrap_servers=address,
        kafka_config=kafka_config,
        presence=PresenceOptions(via="kafka"),
    )


async def test_an_unverified_broker_certificate_fails_fast_and_names_the_setting(
    mqtt: embedded.BrokerProcess, names: tuple[str, str], tmp_path: Path
) -> None:
    """A broker whose certificate the configured CA did not sign is refused for good: the
    controller's start, ``ManagedConsumer.start()`` and ``BallastConsumer.start()`` end
    with ``CredentialsError`` naming the CA setting, instead of retrying it as a broker
    not up yet (``startup.timeout`` is 300 s here; the bound below is a liveness bound)."""
    (tmp_path / "ours").mkdir()
    (tmp_path / "other").mkdir()
    ours, other = server_cert(tmp_path / "ours"), server_cert(tmp_path / "other")
    with apache_kafka.kafka(tmp_path, tls=(ours.cert, ours.key)).start(timeout=60.0) as broker:
        cfg = make_config(broker, mqtt, names[0], startup={"timeout": 300.0})
        kafka = type(cfg.kafka).model_validate(
            {**cfg.kafka.model_dump(), "security_protocol": "SSL", "ssl_cafile": str(other.ca)}
        )
        ctl = Controller(cfg.model_copy(update={"kafka": kafka}))
        try:
            async with asyncio.timeout(60):
                with pytest.raises(CredentialsError, match=r"certificate did not verify"):
                    await ctl.start()
        finally:
            await ctl.stop()
        member = ManagedConsumer(
            names[0],
            "m1",
            ["t"],
            bootstrap_servers=broker.address,
            kafka_security={
                "security_protocol": "SSL",
                "ssl_context": ssl.create_default_context(cafile=str(other.ca)),
            },
            presence=PresenceOptions(mqtt_port=mqtt.port),
        )
        async with asyncio.timeout(60):
            with pytest.raises(CredentialsError, match=r"certificate did not verify.*ssl_context"):
                await member.start()
        tls = {"security.protocol": "SSL", "ssl.ca.location": str(other.ca)}
        binding = _confluent_member(broker.address, names[0], tls)
        with pytest.raises(CredentialsError, match=r"certificate did not verify.*ssl\.ca"):
            await asyncio.to_thread(binding.start)
