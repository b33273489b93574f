"""The daemon against a real Kafka-protocol broker (Tansu) and a real MQTT broker (amqtt)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiomqtt
import pytest
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.protocol.metadata import MetadataRequest

from assignors import TopicPartition
from controller.adapters.metadata import topic_metadata
from controller.adapters.topics import ensure_topic
from controller.client import PresenceOptions
from controller.client.consumer import ManagedConsumer
from controller.client.identity import State
from controller.config import Config
from controller.core.views import group_view
from controller.runtime.daemon import Controller
from controller.tasks import cancel_and_wait
from controller.tools import embedded
from controller.tools.simfleet import Fleet
from controller.wire.records import Presence
from tests.brokers import make_config, managed_member, needs_kafka, records_and_commits
from tests.cancellation import swallowing_wait

pytestmark = [pytest.mark.integration, pytest.mark.compat]


@contextlib.asynccontextmanager
async def running(cfg: Config) -> AsyncIterator[Controller]:
    ctl = Controller(cfg)
    await ctl.start()
    try:
        yield ctl
    finally:
        await ctl.stop()


@contextlib.asynccontextmanager
async def fleet_for(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, group: str
) -> AsyncIterator[Fleet]:
    fleet = Fleet(kafka.address, mqtt.port, group, keepalive=1)
    await fleet.start()
    try:
        yield fleet
    finally:
        await fleet.stop()


def all_of(topic: str, n: int = 12) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


def exclusive(fleet: Fleet) -> bool:
    return all(len(v) == 1 for v in fleet.owners().values())


async def test_join_leave_crash_and_restart_with_mqtt_presence(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    group = names[0]
    cfg = make_config(kafka, mqtt, group)
    violations: list[str] = []
    async with running(cfg) as ctl, fleet_for(kafka, mqtt, group) as fleet:
        fleet.on_apply = lambda _m: (
            None if exclusive(fleet) else violations.append(str(fleet.owners()))
        )
        for name in ("a", "b", "c"):
            await fleet.join(name, [topic])
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [4, 4, 4]
        )
        assert set(fleet.owners()) == all_of(topic)
        assert exclusive(fleet)

        # Clean leave: reassigned without waiting for any timeout.
        await fleet.leave("b")
        await fleet.wait_for(
            lambda: set(fleet.owners()) == all_of(topic) and len(fleet.members) == 2
        )
        assert sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6]

        # Crash: the Will clears presence; after leave_grace the partitions move.
        await fleet.join("d", [topic])
        await fleet.wait_for(lambda: len(fleet.members["d"].partitions) == 4)
        await fleet.crash("a")
        await fleet.wait_for(lambda: set(fleet.owners()) == all_of(topic), timeout=15)
        assert sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6]
        generation = ctl.groups[group].state.reconciler.generation
        held = {m.name: m.partitions for m in fleet.members.values()}
        invalid = ctl.metrics.invalid.labels("presence")._value.get()

    # Restart of the controller and of every member: recovered from the topic, nothing
    # moves, the epoch goes up. Each new process gets its grant issued again, to it. The
    # old processes' Wills may reach the broker after the new controller subscribed: it
    # then publishes their absence (one generation more), and keeps their grants.
    async with running(cfg) as ctl2, fleet_for(kafka, mqtt, group) as fleet2:
        g = ctl2.groups[group]
        assert generation <= g.state.reconciler.generation <= generation + 1
        assert g.state.reconciler.granted == held
        assert g.epoch == 2
        for name in held:
            await fleet2.join(name, [topic])
        await fleet2.wait_for(
            lambda: {m.name: m.partitions for m in fleet2.members.values()} == held
        )
        await asyncio.sleep(1.5)  # past rebalance_delay and leave_grace
        assert g.state.reconciler.granted == held
        assert {m.name: m.partitions for m in fleet2.members.values()} == held
        assert generation < g.state.reconciler.generation <= generation + 1 + len(held)
    assert violations == []
    assert invalid == 0


async def test_invalid_presence_is_counted_and_ignored(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    group = names[0]
    cfg = make_config(kafka, mqtt, group)
    async with running(cfg) as ctl, fleet_for(kafka, mqtt, group) as fleet:
        await fleet.join("good", [topic])
        await fleet.wait_for(lambda: set(fleet.owners()) == all_of(topic))
        bad_payloads = {
            f"ballast/{group}/members/x1": b"{not json",
            f"ballast/{group}/members/x2": b'{"group": "%s", "member": "x2", "topics": "orders"}'
            % group.encode(),
            f"ballast/{group}/members/x3": Presence(
                group="other", member="x3", topics=[topic]
            ).encode(),
            f"ballast/{group}/members/x4": b"x" * (2 << 20),
        }
        # Well-formed, but claiming a partition no record grants: corrected (its record
        # written again), counted apart from malformed input.
        stray = Presence(group=group, member="good", topics=[topic], partitions=[("nope", 1)])
        async with aiomqtt.Client("127.0.0.1", mqtt.port) as c:
            for t, payload in bad_payloads.items():
                await c.publish(t, payload, qos=1)
            await c.publish(f"ballast/{group}/members/good", stray.encode(), qos=1)
        counter = ctl.metrics.invalid.labels("presence")
        corrected = ctl.metrics.stray_claims.labels(group)
        await fleet.wait_for(
            lambda: counter._value.get() >= len(bad_payloads) and corrected._value.get() >= 1
        )
        assert counter._value.get() == len(bad_payloads)
        assert corrected._value.get() == 1
        # Still serving: a new member joins and gets its share.
        await fleet.join("later", [topic])
        await fleet.wait_for(
            lambda: len(fleet.members["later"].partitions) == 6 and exclusive(fleet)
        )


async def test_committed_offsets_drive_lag(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    group = names[0]
    cfg = make_config(
        kafka, mqtt, group, lag={"source": "poll", "poll_interval": 0.3, "smoothing": 1.0}
    )
    await records_and_commits(kafka.address, group, topic)
    async with running(cfg) as ctl, fleet_for(kafka, mqtt, group) as fleet:
        await fleet.join("a", [topic])
        await fleet.wait_for(
            lambda: ctl.groups[group].state.lag.get(TopicPartition(topic, 0)) == 20
        )
        state = ctl.groups[group].state
        assert state.lag[TopicPartition(topic, 1)] == 0
        assert state.lag[TopicPartition(topic, 2)] == 0  # never committed, latest -> 0
        await fleet.wait_for(lambda: ctl.group_view(group)["quality"]["total_lag"] == 20)  # type: ignore[index]


async def test_a_commit_past_the_log_end_costs_neither_the_lag_nor_the_other_samples(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """A committed offset past the log's end (a topic recreated under its group, a
    consumer committing ahead) cannot be an offset sample for the Spark job. It is
    counted and left out; the poll's lag and the other partitions' samples are kept
    (the whole poll used to fail on it: no lag, no sample)."""
    group = names[0]
    samples = f"samples-{group}"
    await embedded.create_topics(kafka.address, {samples: 3})
    await records_and_commits(kafka.address, group, topic)
    committer = AIOKafkaConsumer(
        bootstrap_servers=kafka.address, group_id=group, enable_auto_commit=False
    )
    await committer.start()
    try:
        committer.assign([KafkaTP(topic, 2)])
        await committer.commit({KafkaTP(topic, 2): 7})  # nothing was written there
    finally:
        await committer.stop()
    cfg = make_config(
        kafka,
        mqtt,
        group,
        lag={"source": "poll", "poll_interval": 0.3, "smoothing": 1.0, "samples_topic": samples},
    )
    async with running(cfg) as ctl, fleet_for(kafka, mqtt, group) as fleet:
        await fleet.join("a", [topic])
        await fleet.wait_for(
            lambda: ctl.groups[group].state.lag.get(TopicPartition(topic, 0)) == 20
        )
        assert ctl.groups[group].state.lag[TopicPartition(topic, 2)] == 0
        refused = ctl.metrics.invalid.labels("offsets")
        await fleet.wait_for(lambda: refused._value.get() >= 1)
    reader = AIOKafkaConsumer(
        samples, bootstrap_servers=kafka.address, auto_offset_reset="earliest"
    )
    await reader.start()
    try:
        written: set[bytes] = set()
        async with asyncio.timeout(20):
            while len(written) < 11:
                for batch in (await reader.getmany(timeout_ms=500)).values():
                    written |= {m.key for m in batch if m.key is not None}
    finally:
        await reader.stop()
    assert written == {f"{group}/{topic}/{p}".encode() for p in range(12) if p != 2}


async def test_a_managed_consumer_with_kafka_heartbeats_joins_applies_and_leaves(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """``ManagedConsumer(presence="kafka")`` (no test ran it before): it heartbeats on
    the heartbeat topic, holds what the controller grants, and its clean leave is a
    tombstone that frees its partitions."""
    group = names[0]
    hb_topic = f"hb-{group}"
    await embedded.create_topics(kafka.address, {hb_topic: 3})
    cfg = make_config(
        kafka,
        mqtt,
        group,
        membership={"source": "kafka", "heartbeat_topic": hb_topic, "session_timeout": 1.5},
    )
    async with running(cfg) as ctl:
        g = ctl.groups[group]
        members = [
            ManagedConsumer(
                group,
                name,
                [topic],
                bootstrap_servers=kafka.address,
                presence=PresenceOptions(
                    via="kafka", heartbeat_topic=hb_topic, heartbeat_interval=0.3
                ),
            )
            for name in ("a", "b")
        ]
        try:
            for member in members:
                await member.start()
            await _until(lambda: sorted(len(m.assignment) for m in members) == [6, 6])
            await members[0].close()  # a clean leave
            await _until(lambda: len(members[1].assignment) == 12)
            assert sorted(g.state.reconciler.granted) == ["b"]
        finally:
            for member in members:
                await member.close()


async def test_a_member_that_hands_off_reads_each_partition_until_another_is_granted_it(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """``hand_off()``: the member says ``draining`` and reads on; the controller revokes
    its partitions and grants each to the other member only once it acknowledged, so
    every one of them is released by the leaver before the other is assigned it (a
    clean leave releases all of them at once, before the controller even knows). Its
    iteration ends by itself, holding nothing; ``close()`` then leaves."""
    group = names[0]
    cfg = make_config(kafka, mqtt, group)
    events: list[tuple[str, str, frozenset[KafkaTP]]] = []

    def noted(name: str, kind: str) -> Any:
        return lambda tps: events.append((name, kind, frozenset(tps)))

    async def read(c: ManagedConsumer) -> None:
        async for _ in c:
            pass

    async with running(cfg) as ctl:
        g = ctl.groups[group]
        a, b = (
            managed_member(
                kafka,
                mqtt,
                group,
                name,
                topic,
                on_partitions_assigned=noted(name, "+"),
                on_partitions_revoked=noted(name, "-"),
            )
            for name in ("a", "b")
        )
        await a.start()
        await b.start()
        readers = [asyncio.create_task(read(c)) for c in (a, b)]
        try:
            await _until(lambda: len(a.assignment) == 6 and len(b.assignment) == 6)
            leaving = b.assignment
            b.hand_off(timeout=30)
            b.hand_off(timeout=1)  # asked again: the first deadline holds
            async with asyncio.timeout(20):
                await readers[1]  # ends by itself once a record takes everything
            assert b.handed_off
            assert not b.assignment
            assert g.state.handing_off == {"b"}
            assert group_view(g)["members"]["b"]["state"] == "handing-off"  # type: ignore[index]
            await b.close()
            await _until(lambda: len(a.assignment) == 12 and "b" not in g.state.reconciler.granted)
            assert g.state.reconciler.granted == {"a": all_of(topic)}
        finally:
            await cancel_and_wait(*readers)
            await a.close()
            await b.close()
    order = {(name, kind, tp): i for i, (name, kind, tps) in enumerate(events) for tp in tps}
    for tp in leaving:
        assert order[("b", "-", tp)] < order[("a", "+", tp)], tp
    assert ("b", "+", next(iter(leaving))) in order  # the callbacks were recorded at all


async def test_heartbeat_topic_membership(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    group = names[0]
    hb_topic = f"hb-{group}"
    cfg = make_config(
        kafka,
        mqtt,
        group,
        membership={"source": "kafka", "heartbeat_topic": hb_topic, "session_timeout": 1.5},
    )
    await embedded.create_topics(kafka.address, {hb_topic: 3})
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()
    async with running(cfg) as ctl:
        g = ctl.groups[group]

        async def beat(member: str, stop: asyncio.Event) -> None:
            while not stop.is_set():
                body = Presence(
                    group=group,
                    member=member,
                    topics=[topic],
                    generation=g.state.reconciler.generation,
                )
                await producer.send_and_wait(
                    hb_topic, body.encode(), key=f"{group}/{member}".encode()
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.3):
                        await stop.wait()

        stops = {m: asyncio.Event() for m in ("a", "b", "c")}
        tasks = [asyncio.create_task(beat(m, s)) for m, s in stops.items()]
        try:
            await _until(
                lambda: sorted(len(v) for v in g.state.reconciler.granted.values()) == [4, 4, 4]
            )
            # Clean leave: a tombstone.
            stops["a"].set()
            await producer.send_and_wait(hb_topic, None, key=f"{group}/a".encode())
            await _until(
                lambda: (
                    sorted(g.state.reconciler.granted) == ["b", "c"]
                    and sum(len(v) for v in g.state.reconciler.granted.values()) == 12
                )
            )
            # Silence: the session expires, then leave_grace, then reassignment.
            stops["b"].set()
            await _until(
                lambda: (
                    sorted(g.state.reconciler.granted) == ["c"]
                    and len(g.state.reconciler.granted["c"]) == 12
                ),
                timeout=20,
            )
        finally:
            for s in stops.values():
                s.set()
            await asyncio.gather(*tasks)
            await producer.stop()


async def test_refuses_a_non_compacted_assignments_topic(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: PLC0415

    from controller.adapters.topics import BrokerRefusalError  # noqa: PLC0415

    bad = f"plain-{names[0]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    await admin.create_topics([NewTopic(bad, 1, 1, topic_configs={"cleanup.policy": "delete"})])
    await admin.close()
    cfg = make_config(kafka, mqtt, names[0], assignments={"name": bad})
    with pytest.raises(BrokerRefusalError, match="must be compacted"):
        await Controller(cfg).start()


async def test_a_group_reads_led_by_none_until_it_is_led(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """``ballast_group_leader`` of a configured group is 0 before any replica leads it
    (an alert can see a group no replica leads), 1 once this one does."""
    cfg = make_config(kafka, mqtt, names[0])
    labels = {"group": names[0]}
    idle = Controller(cfg).metrics.registry.get_sample_value("ballast_group_leader", labels)
    assert idle == 0
    async with running(cfg) as ctl:
        assert ctl.metrics.registry.get_sample_value("ballast_group_leader", labels) == 1


async def test_unsafe_settings_of_an_existing_topic_are_counted_and_logged(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
) -> None:
    """A compacted assignments topic whose segments roll weekly and whose tombstones go
    after a second: taken as it is, each setting named in a warning and counted."""
    from aiokafka.admin import NewTopic  # noqa: PLC0415

    risky = f"risky-{names[0]}"
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "604800000",
        "delete.retention.ms": "1000",
    }
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
    await admin.start()
    await admin.create_topics([NewTopic(risky, 2, 1, topic_configs=configs)])
    await admin.close()
    cfg = make_config(kafka, mqtt, names[0], assignments={"name": risky})
    with structlog.testing.capture_logs() as logged:
        async with running(cfg) as ctl:
            count = ctl.metrics.registry.get_sample_value("ballast_unsafe_topic_settings")
    assert count == 2
    warned = [e for e in logged if e["event"] == "unsafe_topic_setting"]
    assert sorted(e["setting"] for e in warned) == ["delete.retention.ms", "segment.ms"]
    assert all(e["topic"] == risky and e["log_level"] == "warning" for e in warned)


async def _until(predicate: object, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_lag_topic_source_accepts_good_records_and_counts_bad_ones(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    from controller.wire.records import LagRecord  # noqa: PLC0415

    group = names[0]
    lag_topic = f"lag-{group}"
    await embedded.create_topics(kafka.address, {lag_topic: 3})  # as the pipeline's operator
    cfg = make_config(
        kafka, mqtt, group, lag={"source": "topic", "topic": lag_topic, "smoothing": 1.0}
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()
    await producer.send_and_wait(
        lag_topic, b"created", key=b"not/a/valid-key-shape/at-all"
    )  # bad: key
    async with running(cfg) as ctl, fleet_for(kafka, mqtt, group) as fleet:
        await fleet.join("a", [topic])
        await fleet.wait_for(lambda: len(fleet.members["a"].partitions) == 12)

        def rec(partition: int, lag: int) -> bytes:
            return LagRecord(
                group=group, topic=topic, partition=partition, lag=lag, observed_at=1.0
            ).encode()

        try:
            good = {3: 700, 4: 9}
            for p, lag in good.items():
                await producer.send_and_wait(
                    lag_topic, rec(p, lag), key=f"{group}/{topic}/{p}".encode()
                )
            bad = [
                (
                    f"{group}/{topic}/5".encode(),
                    b'{"group": "%s", "topic": "%s", "partition": 5, "lag": -1, "observed_at": 1}'
                    % (group.encode(), topic.encode()),
                ),
                (f"{group}/{topic}/99".encode(), rec(99, 5)),  # not a partition of the topic
                (f"{group}/{topic}/6".encode(), rec(7, 5)),  # key and body disagree
                (f"{group}/{topic}/8".encode(), b"\x00garbage"),
            ]
            for key, value in bad:
                await producer.send_and_wait(lag_topic, value, key=key)
        finally:
            await producer.stop()
        state = ctl.groups[group].state
        counter = ctl.metrics.invalid.labels("lag")
        await fleet.wait_for(lambda: counter._value.get() >= len(bad) + 1)
        # the good records sit in different partitions of the lag topic: wait for each
        await fleet.wait_for(
            lambda: all(state.lag.get(TopicPartition(topic, p)) == lag for p, lag in good.items())
        )
        assert TopicPartition(topic, 5) not in state.lag
        assert counter._value.get() == len(bad) + 1
        # each good record's age when it became a weight: observed at t=1 s, so ~now
        age = ctl.metrics.registry.get_sample_value
        assert age("ballast_lag_record_age_seconds_count", {"group": group}) == len(good)
        total_age = age("ballast_lag_record_age_seconds_sum", {"group": group}) or 0.0
        assert total_age > len(good) * (time.time() - 60)


async def test_lag_weight_time_and_tombstones_from_the_lag_topic(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    from controller.wire.records import LagRecord  # noqa: PLC0415

    group = names[0]
    lag_topic = f"lag-{group}"
    await embedded.create_topics(kafka.address, {lag_topic: 3})  # as the pipeline's operator
    cfg = make_config(
        kafka,
        mqtt,
        group,
        lag={"source": "topic", "topic": lag_topic, "smoothing": 1.0, "weight": "time"},
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()
    try:
        async with running(cfg) as ctl, fleet_for(kafka, mqtt, group) as fleet:
            await fleet.join("a", [topic])
            await fleet.wait_for(lambda: len(fleet.members["a"].partitions) == 12)

            async def send(partition: int, value: bytes | None) -> None:
                # One partition of the lag topic for all: each wait below then also
                # means every record sent before it was read.
                key = f"{group}/{topic}/{partition}".encode()
                await producer.send_and_wait(lag_topic, value, key=key, partition=0)

            def rec(partition: int, lag: int, time_lag: float | None) -> bytes:
                return LagRecord(
                    group=group,
                    topic=topic,
                    partition=partition,
                    lag=lag,
                    time_lag=time_lag,
                    observed_at=1.0,
                ).encode()

            state = ctl.groups[group].state
            await send(0, rec(0, 10, 2.5))  # 2.5 s behind weighs 2500 (ms), not 10
            await send(1, rec(1, 90_000, 0.0004))  # rounds up: behind at all weighs >= 1
            await fleet.wait_for(lambda: state.lag.get(TopicPartition(topic, 1)) == 1)
            assert state.lag[TopicPartition(topic, 0)] == 2500
            await send(0, rec(0, 99, None))  # no time lag in it: the reading stands
            await send(1, None)  # tombstone: partition 1 stopped reporting
            await fleet.wait_for(lambda: TopicPartition(topic, 1) not in state.lag)
            assert state.lag[TopicPartition(topic, 0)] == 2500
            assert ctl.metrics.invalid.labels("lag")._value.get() == 0
    finally:
        await producer.stop()


async def test_a_lag_topic_backlog_is_read_a_batch_at_a_time(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backlog of lag records (a restart, a burst from the Spark job) is handled
    ``lag.batch`` records between two yields of the event loop, never in one go: the
    group loops' due rebalances run in between. Every record is still read."""
    from controller.wire.records import LagRecord  # noqa: PLC0415

    group = names[0]
    lag_topic = f"lag-{group}"
    await embedded.create_topics(kafka.address, {lag_topic: 3})  # as the pipeline's operator
    backlog = 1200
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=5)
    await producer.start()
    try:
        for i in range(backlog):
            p = i % 12
            value = LagRecord(group=group, topic=topic, partition=p, lag=i, observed_at=1.0)
            await producer.send(lag_topic, value.encode(), key=f"{group}/{topic}/{p}".encode())
        await producer.flush()
    finally:
        await producer.stop()
    handed: list[int] = []
    getmany = AIOKafkaConsumer.getmany

    async def spy(self: AIOKafkaConsumer, *a: Any, **kw: Any) -> Any:
        batch = await getmany(self, *a, **kw)
        if any(tp.topic == lag_topic for tp in batch):
            handed.append(sum(len(v) for v in batch.values()))
        return batch

    monkeypatch.setattr(AIOKafkaConsumer, "getmany", spy)
    cfg = make_config(kafka, mqtt, group, lag={"source": "topic", "topic": lag_topic, "batch": 100})
    async with running(cfg):
        await _until(lambda: sum(handed) >= backlog)
    assert sum(handed) == backlog
    assert max(handed) <= 100


async def test_a_member_rack_reaches_the_controller(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """``ManagedConsumer(rack=...)`` is the member's ``client.rack``: the controller's
    engine and group view carry it. Tansu names no broker rack, so, as Kafka counts
    them, all six partitions of the member with a rack are cross-rack and those of the
    member without one are not."""
    group = names[0]
    cfg = make_config(kafka, mqtt, group)
    with pytest.raises(ValueError, match="rack: String should match pattern"):
        ManagedConsumer(group, "bad", [topic], bootstrap_servers=kafka.address, rack="zone 1")
    async with running(cfg) as ctl:
        members = [
            ManagedConsumer(
                group,
                m,
                [topic],
                bootstrap_servers=kafka.address,
                presence=PresenceOptions(mqtt_port=mqtt.port, mqtt_keepalive=1),
                rack=rack,
                auto_offset_reset="earliest",  # records sent before a position resolves count
            )
            for m, rack in (("m1", "az-1"), ("m2", None))
        ]
        for c in members:
            await c.start()
        try:
            g = ctl.groups[group]
            for _ in range(200):
                for c in members:
                    await c.getmany(timeout_ms=20)
                if sorted(len(c.assignment) for c in members) == [6, 6]:
                    break
            assert sorted(len(c.assignment) for c in members) == [6, 6]
            assert members[0].consumer._client_rack == "az-1"  # follower fetching too
            assert g.state.engine.rack_of("m1") == "az-1"
            assert g.state.engine.rack_of("m2") is None
            view: Any = group_view(g, partitions=False)
            assert view["members"]["m1"]["rack"] == "az-1"
            assert view["quality"]["cross_rack"] == 6
            assert g.state.replica_racks == {}
            # Fetching with a rack id works on a broker that ignores it.
            producer = AIOKafkaProducer(bootstrap_servers=kafka.address)
            await producer.start()
            try:
                for p in range(12):
                    await producer.send_and_wait(topic, b"x", partition=p)
            finally:
                await producer.stop()
            got = 0
            for _ in range(200):
                for c in members:
                    got += sum(map(len, (await c.getmany(timeout_ms=20)).values()))
                if got == 12:
                    break
            assert got == 12
        finally:
            for c in members:
                await c.close()


async def _poll_for_ten_minutes(c: ManagedConsumer) -> None:
    while True:
        await c.getmany(timeout_ms=600_000)


async def test_a_long_poll_on_a_quiet_topic_returns_when_the_assignment_changes(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """An application waiting in ``getmany`` with a long timeout on a topic with no
    traffic (``async for`` waits the same way) must not hold a revoke for that timeout:
    the call returns when a new record arrives and the next one applies it. Here the
    first member polls with a ten-minute timeout; the second member's share can only
    reach it if the first one's wait is cut short (its revoke watchdog needs the lock
    the wait holds)."""
    group = names[0]
    cfg = make_config(kafka, mqtt, group)

    async with running(cfg):
        first, second = (managed_member(kafka, mqtt, group, n, topic) for n in ("first", "second"))
        await first.start()
        polls = [asyncio.create_task(_poll_for_ten_minutes(first))]
        try:
            while len(first.assignment) != 12:
                await asyncio.sleep(0.05)
            await second.start()
            polls.append(asyncio.create_task(_poll_for_ten_minutes(second)))
            # A liveness bound, not a performance target: without the early return the
            # first member's revoke waits out its ten-minute poll.
            async with asyncio.timeout(60):
                while sorted(len(c.assignment) for c in (first, second)) != [6, 6]:
                    await asyncio.sleep(0.05)
        finally:
            for t in polls:
                t.cancel()
            await asyncio.gather(*polls, return_exceptions=True)
            for c in (first, second):
                await c.close()


async def test_a_poll_cancelled_during_its_acknowledgement_ends(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """A poll cancelled as the acknowledgement's PUBACK arrives: Python 3.11's
    ``wait_for`` in aiomqtt's ``publish`` drops the cancellation, and the call went on
    into its fetch, in slices, for the rest of a ten-minute timeout (a test's teardown
    hung in CI). The moment is made on purpose: the first member's acknowledgement of
    its revoke cancels the polling task in the turn it completes."""
    group = names[0]
    cfg = make_config(kafka, mqtt, group)

    async with running(cfg):
        first, second = (managed_member(kafka, mqtt, group, n, topic) for n in ("first", "second"))
        await first.start()
        polling = asyncio.create_task(_poll_for_ten_minutes(first))
        swallowed: list[int] = []
        announce = first._announcer.announce

        async def ack_that_swallows_a_cancel(state: State = "active") -> None:
            await announce(state)
            if asyncio.current_task() is polling and not swallowed:
                swallowed.append(await swallowing_wait(asyncio.Future(), polling))

        try:
            while len(first.assignment) != 12:
                await asyncio.sleep(0.05)
            first._announcer.announce = ack_that_swallows_a_cancel  # type: ignore[method-assign]
            await second.start()
            # A liveness bound, not a performance target: unchecked, the poll runs on for
            # its ten minutes.
            await asyncio.wait([polling], timeout=60)
            assert swallowed == [1]  # the moment happened, and the cancel was dropped
            assert polling.cancelled()
            assert len(first.assignment) == 6  # the revoke was applied before it ended
        finally:
            await cancel_and_wait(polling)
            for c in (first, second):
                await c.close()


async def test_no_client_asks_for_the_metadata_of_every_topic(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka refreshes a client's metadata every ``metadata_max_age_ms`` and, for a
    client that tracks no topic, asks about every topic of the cluster (``topics``
    null): seconds of a blocked event loop in a large cluster (``metadata_scope``).
    Here every client refreshes every 0.2 s, and every Metadata request sent by the
    controller's clients and by two members (one of which holds nothing) is recorded."""
    asked: list[tuple[str, list[str] | None]] = []
    send = AIOKafkaConnection.send

    def recording_send(self: AIOKafkaConnection, request: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(request, MetadataRequest):
            asked.append((self._client_id, request._topics))
        return send(self, request, *args, **kw)

    init = AIOKafkaClient.__init__

    def refreshing_often(self: AIOKafkaClient, *args: Any, **kw: Any) -> None:
        init(self, *args, **{**kw, "metadata_max_age_ms": 200})

    monkeypatch.setattr(AIOKafkaConnection, "send", recording_send)
    monkeypatch.setattr(AIOKafkaClient, "__init__", refreshing_often)
    group, one = names[0], f"{names[1]}-one"
    await embedded.create_topics(kafka.address, {one: 1})
    members = [
        ManagedConsumer(
            group,
            m,
            [one],
            bootstrap_servers=kafka.address,
            presence=PresenceOptions(mqtt_port=mqtt.port),
        )
        for m in ("a", "b")
    ]
    async with running(make_config(kafka, mqtt, group)):
        try:
            for c in members:
                await c.start()
            async with asyncio.timeout(30):
                while sorted(len(c.assignment) for c in members) != [0, 1]:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # five refreshes of every client
        finally:
            for c in members:
                await c.close()
    refreshes = [who for who, topics in asked if topics]
    assert len(refreshes) > 20, asked  # the refreshes ran, and were recorded
    assert Counter(who for who, topics in asked if topics is None) == {}


async def test_a_member_started_before_the_assignments_topic_exists_does_not_create_it(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    """Brokers create a topic a Metadata request names (``auto.create.topics.enable``,
    Tansu always), and one created so is not compacted: the controller would then refuse
    it. A member waits for the topic without naming it in such a request."""
    group, assignments = names[0], f"{names[1]}-assignments"
    member = ManagedConsumer(
        group,
        "early",
        [names[1]],
        bootstrap_servers=kafka.address,
        presence=PresenceOptions(mqtt_port=mqtt.port),
        assignments_topic=assignments,
    )
    starting = asyncio.create_task(member.start())
    try:
        await asyncio.sleep(1.0)  # its start-up looks for the topic meanwhile
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka.address)
        await admin.start()
        try:
            assert (await topic_metadata(admin, [assignments])).counts == {}
            await ensure_topic(
                admin, assignments, 3, 1, compacted=True, required=True, setting="assignments.name"
            )
        finally:
            await admin.close()
        async with asyncio.timeout(30):
            await starting
    finally:
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await member.close()


@needs_kafka
async def test_the_controller_and_a_member_work_when_a_bootstrap_learns_no_topic(
    kafka: embedded.BrokerProcess, mqtt: embedded.BrokerProcess, names: tuple[str, str], topic: str
) -> None:
    """On Kafka a client's bootstrap learns no topic (an empty Metadata topic list asks
    about none; Tansu answers it with all of them). Everything that looks a topic up
    right after starting must ask for it: the controller reading its topics at start-up
    (recovery), a member finding its partition of the assignments topic."""
    group = names[0]
    cfg = make_config(kafka, mqtt, group)
    async with running(cfg) as ctl:
        member = ManagedConsumer(
            group,
            "a",
            [topic],
            bootstrap_servers=kafka.address,
            presence=PresenceOptions(mqtt_port=mqtt.port),
        )
        await member.start()
        try:
            async with asyncio.timeout(30):
                while len(member.assignment) != 12:
                    await asyncio.sleep(0.05)
        finally:
            await member.close(leave=False)
        first = ctl.groups[group].state.reconciler
    # As the first run stopped (its group may still have stepped while it stopped).
    assert first.granted == {"a": all_of(topic)}
    async with running(cfg) as again:
        recovered = again.groups[group]
        assert recovered.epoch == 2  # it read the fence of the first run
        assert recovered.state.reconciler.generation == first.generation
        assert recovered.state.reconciler.granted == first.granted
