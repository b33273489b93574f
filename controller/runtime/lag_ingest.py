"""Lag into the led groups: polled from offsets (``lag.source: poll``, also the raw
samples for the Spark job), or read from the lag topic the Spark job writes
(``lag.source: topic``), every record validated."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from aiokafka import AIOKafkaConsumer

from assignors import TopicPartition
from controller import logs
from controller.adapters.connection import client_options
from controller.config import Config
from controller.core.autoscale import AutoscaleRule, Recommender
from controller.runtime.metrics import Metrics
from controller.runtime.replica_state import ManagedGroup, ReplicaState
from controller.runtime.samples import SamplePublisher
from controller.wire.offsets import PartitionOffsets
from controller.wire.records import DecodeError, LagRecord, decode, split_key

log = logs.get("ballast.controller")


class LagIngest:
    def __init__(
        self,
        cfg: Config,
        state: ReplicaState,
        samples: SamplePublisher | None,
        invalid: Callable[[str, str], None],
        metrics: Metrics,
    ) -> None:
        self.cfg = cfg
        self._state = state
        self._samples = samples
        self._invalid = invalid
        self._age = metrics.lag_record_age
        self._poll_seconds = metrics.lag_poll
        self._invalid_offsets = metrics.invalid.labels("offsets")
        self._rules = {
            g.name: AutoscaleRule(
                a.min_members, a.max_members, a.headroom, a.drain_time, a.rate_window,
                a.scale_down_delay, a.start_time,
            )
            for g in cfg.groups
            if (a := g.autoscale) is not None
        }  # fmt: skip

    async def poll(self) -> None:
        """Offsets of every subscribed partition: lag for the groups (``source: poll``)
        and raw samples for the Spark job (``samples_topic``)."""
        reset = self.cfg.lag.auto_offset_reset
        use_lag = self.cfg.lag.source == "poll"
        while True:
            for g in list(self._state.groups.values()):
                topics = g.state.subscribed_topics()
                ppt = {
                    t: n for t, n in g.state.partitions_per_topic.items() if n > 0 and t in topics
                }
                began = time.perf_counter()
                try:
                    offsets = await self._state.readers[g.name].offsets(ppt, reset == "earliest")
                except Exception as exc:
                    log.warning("lag_poll_failed", group=g.name, error=repr(exc))
                    continue
                g.offsets = offsets
                if use_lag and offsets:
                    # In a worker thread: 100 000 lags took 84 ms, the loop's rebalances wait.
                    lags = await asyncio.to_thread(_lags, offsets, reset)
                    g.state.on_lag(lags, time.monotonic())
                    g.wake.set()
                if offsets and g.name in self._rules:
                    await self._size(g, offsets, reset)
                if self._samples is not None and offsets:  # failing, it costs no lag
                    await self._publish_samples(self._samples, g.name, offsets)
                self._poll_seconds.labels(g.name).observe(time.perf_counter() - began)
            await asyncio.sleep(self.cfg.lag.poll_interval)

    async def _size(
        self, g: ManagedGroup, offsets: Mapping[TopicPartition, PartitionOffsets], reset: str
    ) -> None:
        """The group's recommended member count, from this poll (in a worker thread: it
        reads every partition's offsets, as the lags do)."""
        if g.recommender is None:
            g.recommender = Recommender(self._rules[g.name])
        owners, capacities = g.state.holders()
        g.sizing = await asyncio.to_thread(
            g.recommender.observe, time.monotonic(), offsets, owners, capacities, reset
        )

    async def _publish_samples(
        self,
        samples: SamplePublisher,
        group: str,
        offsets: Mapping[TopicPartition, PartitionOffsets],
    ) -> None:
        try:
            refused = await samples.publish(group, offsets, time.time())
        except Exception as exc:
            log.warning("samples_not_written", group=group, error=repr(exc))
            return
        if refused:  # one line a poll, however many: a recreated topic refuses them all
            self._invalid_offsets.inc(len(refused))
            log.warning(
                "invalid_message",
                source="offsets",
                reason=f"{len(refused)} samples not written, first {refused[0]}",
            )

    async def read_topic(self) -> None:
        consumer = AIOKafkaConsumer(
            self.cfg.lag.topic,
            **client_options(self.cfg),
            client_id=f"{self.cfg.kafka.client_id}-lag-topic",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            while True:
                # At most ``lag.batch`` records between two yields: a backlog (a restart,
                # a Spark job's burst) must not hold the event loop, and with it every
                # group's due rebalance, for the whole fetch.
                await asyncio.sleep(0)
                batch = await consumer.getmany(timeout_ms=500, max_records=self.cfg.lag.batch)
                readings: dict[str, dict[TopicPartition, int | None]] = {}
                for records in batch.values():
                    for msg in records:
                        self.record(msg, readings)
                now = time.monotonic()
                for name, lag in readings.items():
                    if name not in self._state.groups:  # released meanwhile
                        continue
                    state = self._state.groups[name].state
                    state.forget_lag((tp for tp, v in lag.items() if v is None), now)
                    state.on_lag({tp: v for tp, v in lag.items() if v is not None}, now)
                    self._state.groups[name].wake.set()
        finally:
            await consumer.stop()

    def record(self, msg: object, readings: dict[str, dict[TopicPartition, int | None]]) -> None:
        """One lag record into ``readings`` (None: a tombstone, forget the partition)."""
        source = f"{msg.topic}[{msg.partition}]@{msg.offset}"  # type: ignore[attr-defined]
        try:
            group, topic, partition = split_key(msg.key, source, parts=3)  # type: ignore[attr-defined]
            if msg.value is None:  # type: ignore[attr-defined]
                if group in self._state.groups and partition.isdigit():
                    tp = TopicPartition(topic, int(partition))
                    readings.setdefault(group, {})[tp] = None
                return
            rec = decode(LagRecord, msg.value, source)  # type: ignore[attr-defined]
        except DecodeError as exc:
            self._invalid("lag", str(exc))
            return
        if (rec.group, rec.topic, str(rec.partition)) != (group, topic, partition):
            self._invalid(
                "lag", f"{source}: key {group}/{topic}/{partition} disagrees with the body"
            )
            return
        if group not in self._state.groups:
            return
        known = self._state.groups[group].state.partitions_per_topic
        if rec.partition >= known.get(rec.topic, 0):
            self._invalid(
                "lag",
                f"{source}: {rec.topic}-{rec.partition} is not a partition of a subscribed topic",
            )
            return
        weight = rec.weight(self.cfg.lag.weight)
        if weight is not None:
            readings.setdefault(group, {})[TopicPartition(rec.topic, rec.partition)] = weight
            # clocks of other hosts may run ahead: an age below 0 is 0
            self._age.labels(group).observe(max(0.0, time.time() - rec.observed_at))


def _lags(
    offsets: Mapping[TopicPartition, PartitionOffsets], reset: str
) -> dict[TopicPartition, int]:
    return {tp: o.lag(reset) for tp, o in offsets.items()}
