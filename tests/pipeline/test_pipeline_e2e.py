"""The Spark lag job end to end on the real broker: the controller's offset poller writes
samples, the streaming job turns them into lag records, the controller reads those back
and its view of the group changes. And a restart from the checkpoint counts nothing twice."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP

from assignors import TopicPartition
from controller.client import ManagedConsumer, PresenceOptions
from controller.config import Config
from controller.tools import embedded
from controller.wire.records import OffsetSample, partition_key
from tests.brokers import make_config
from tests.controller.runtime.test_controller import fleet_for, running
from tests.prometheus import PIPELINE_ROW, panel_queries, panels_without_data, start_prometheus

pytest.importorskip("pyspark", reason="the pipeline extra is not installed")

from pyspark.sql import SparkSession

from pipeline import lagjob
from pipeline.progress import ProgressReporter

pytestmark = pytest.mark.integration

FAST = {"trigger_interval": 0.3, "lateness": 30, "rate_window": 60, "shuffle_partitions": 2}


async def _commit(kafka: embedded.BrokerProcess, group: str, offsets: dict[KafkaTP, int]) -> None:
    committer = AIOKafkaConsumer(
        bootstrap_servers=kafka.address, group_id=group, enable_auto_commit=False
    )
    await committer.start()
    try:
        committer.assign(list(offsets))
        await committer.commit(offsets)
    finally:
        await committer.stop()


async def test_samples_to_spark_to_the_controllers_lag_view(  # noqa: PLR0917
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    group = names[0]
    cfg = make_config(
        kafka,
        mqtt,
        group,
        lag={
            "source": "topic",
            "topic": f"lag-{group}",
            "samples_topic": f"samples-{group}",
            "poll_interval": 0.3,
            "smoothing": 1.0,
        },
        pipeline=FAST,
    )
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()
    try:
        # One record per request: Tansu's ListOffsets is exact only at batch boundaries.
        for _ in range(40):
            await producer.send_and_wait(topic, b"m", partition=0)
    finally:
        await producer.stop()
    p0 = TopicPartition(topic, 0)
    await _commit(kafka, group, {KafkaTP(topic, 0): 10})
    # The job's metrics, scraped by a real Prometheus: the dashboard's pipeline row.
    metrics_port = embedded.free_port()
    reporter = ProgressReporter.install(spark, metrics_port)
    prom, prom_port = start_prometheus(tmp_path, metrics_port, rules=False)
    await lagjob.create_topics(cfg)
    query = lagjob.start(spark, cfg, checkpoint=str(tmp_path / "checkpoint"))
    try:
        async with running(cfg) as ctl, fleet_for(kafka, mqtt, group) as fleet:
            await fleet.join("a", [topic])
            state = ctl.groups[group].state
            # the controller only learns lag through Spark: lag.source is the lag topic
            # a dead query fails the wait at once rather than at the timeout
            await fleet.wait_for(lambda: state.lag.get(p0) == 30 or not query.isActive, 90)
            assert query.isActive
            await _commit(kafka, group, {KafkaTP(topic, 0): 35})
            await fleet.wait_for(lambda: state.lag.get(p0) == 5 or not query.isActive, 90)
            assert query.isActive
            assert ctl.metrics.invalid.labels("lag")._value.get() == 0
            # the loop's two halves as the controller measures them
            value = ctl.metrics.registry.get_sample_value
            assert (value("ballast_lag_poll_duration_seconds_count", {"group": group}) or 0) > 0
            assert (value("ballast_lag_record_age_seconds_count", {"group": group}) or 0) > 0
            queries = panel_queries(rows={PIPELINE_ROW})
            assert queries
            missing = await panels_without_data(prom_port, queries)
            assert not missing, "pipeline panels without data:\n" + "\n".join(missing)
    finally:
        query.stop()
        reporter.close(spark)
        prom.terminate()
        prom.wait(20)
    assert query.exception() is None


async def test_client_self_reports_reach_the_controller_through_spark(  # noqa: PLR0917
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    group = names[0]
    lag = {"source": "topic", "topic": f"lag-{group}", "smoothing": 1.0}
    samples = f"samples-{group}"
    controller_cfg = make_config(kafka, mqtt, group, lag=lag)  # polls nothing itself
    job_cfg = make_config(kafka, mqtt, group, lag=lag | {"samples_topic": samples}, pipeline=FAST)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=0)
    await producer.start()
    try:
        for i in range(20):
            await producer.send_and_wait(topic, b"%d" % i, partition=3)
    finally:
        await producer.stop()
    p3 = TopicPartition(topic, 3)
    await lagjob.create_topics(job_cfg)
    query = lagjob.start(spark, job_cfg, checkpoint=str(tmp_path / "checkpoint"))
    try:
        async with running(controller_cfg) as ctl:
            consumer = ManagedConsumer(
                group,
                "solo",
                [topic],
                bootstrap_servers=kafka.address,
                presence=PresenceOptions(mqtt_port=mqtt.port, mqtt_keepalive=1),
                auto_offset_reset="earliest",
                offset_samples_topic=samples,
                sample_interval=0.3,
            )
            async with consumer:
                got = 0
                while got == 0:  # process one record of partition 3, then stall
                    batch = await consumer.getmany(timeout_ms=200, max_records=1)
                    got = sum(len(v) for tp, v in batch.items() if tp.partition == 3)
                state = ctl.groups[group].state
                deadline = time.monotonic() + 90
                while state.lag.get(p3) != 19 and query.isActive:
                    assert time.monotonic() < deadline, f"lag of p3: {state.lag.get(p3)}"
                    await asyncio.sleep(0.1)
                assert query.isActive
                assert all(s.source == "client" for s in consumer.offset_samples(time.time()))
    finally:
        query.stop()
    assert query.exception() is None


def sample(group: str, partition: int, committed: int, log_end: int, t: float) -> OffsetSample:
    return OffsetSample(
        group=group,
        topic="t",
        partition=partition,
        committed=committed,
        log_end=log_end,
        sampled_at=t,
    )


async def produce_samples(
    kafka: embedded.BrokerProcess, topic: str, samples: list[OffsetSample]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=50)
    await producer.start()
    try:  # batched on purpose: the source must not rely on ListOffsets at batch ends
        futures = [
            await producer.send(topic, s.encode(), key=partition_key(s.group, s.topic, s.partition))
            for s in samples
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def lag_rows(topic: str, **client: Any) -> list[dict[str, Any] | None]:
    """Every record on ``topic`` (JSON, None for a tombstone), in offset order; ``client``:
    the connection settings (``bootstrap_servers`` and any TLS)."""
    consumer = AIOKafkaConsumer(
        topic, auto_offset_reset="earliest", group_id=None, enable_auto_commit=False, **client
    )
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=2000)
        rows = sorted((m for msgs in batch.values() for m in msgs), key=lambda m: m.offset)
        return [None if m.value is None else json.loads(m.value) for m in rows]
    finally:
        await consumer.stop()


def _drain(spark: SparkSession, cfg: Config, checkpoint: Path) -> int:
    """Run the job until it has read everything there is; samples it read."""
    query = lagjob.start(spark, cfg, checkpoint=str(checkpoint))
    try:
        query.processAllAvailable()
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    return sum(p.numInputRows for p in query.recentProgress)


async def test_restart_from_checkpoint_reads_on_and_keeps_state(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:6]
    group = f"g-{run}"
    cfg = make_config(
        kafka,
        mqtt,
        group,
        lag={"source": "topic", "topic": f"lag-{run}", "samples_topic": f"samples-{run}"},
        pipeline=FAST,
    )
    samples_topic, lag_topic = f"samples-{run}", f"lag-{run}"
    await lagjob.create_topics(cfg)
    now = time.time()
    first = [
        sample(group, p, 100 * i, 100 * i + 50, now + 10 * i) for i in range(3) for p in (0, 1)
    ]
    await produce_samples(kafka, samples_topic, first)
    assert _drain(spark, cfg, tmp_path / "cp") == len(first)  # Spark: the session's thread
    before = await lag_rows(lag_topic, bootstrap_servers=kafka.address)

    second = [sample(group, 0, 300, 400, now + 30)]
    await produce_samples(kafka, samples_topic, second)
    assert _drain(spark, cfg, tmp_path / "cp") == len(second)
    after = await lag_rows(lag_topic, bootstrap_servers=kafka.address)
    new = after[len(before) :]
    assert len(new) == 1
    assert new[0] is not None
    # the rate spans the restart: log end 50 at t=0 to 400 at t=30 (state came back)
    assert (new[0]["partition"], new[0]["lag"]) == (0, 100)
    assert new[0]["produce_rate"] == pytest.approx(350 / 30)
