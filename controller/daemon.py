"""The controller daemon: the I/O around ``GroupState``.

Taking a group (at start-up, or a shard won in the election): read the assignments topic,
take an epoch (from the election's register with HA, else above the log's highest),
write a fence marker to every partition, read the topic again up to those markers, and
rebuild the group from the records that count (``fencing``). Then membership and lag
observations feed each group's state; a task per group wakes on observations or
deadlines, ticks the state and publishes what it plans, retrying until the broker
accepts (nothing is granted before it is durably written). A group task that fails is
counted, and the group is rebuilt from the log within the same tenure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from assignors import TopicPartition

from . import faultpoints, logs
from .config import Config
from .election import ShardElection, shard_of
from .fencing import AssignmentView
from .group import GroupState, Rebalance, Recovered, RejectedError
from .handoff import Plan
from .kafka_io import (
    AssignmentLog,
    AssignmentPublisher,
    OffsetReader,
    SamplePublisher,
    client_options,
    ensure_compacted_topic,
)
from .membership import KafkaHeartbeats, MqttPresence, Sink
from .metrics import Metrics
from .records import DecodeError, LagRecord, Presence, decode, split_key
from .trace import TraceRecorder

log = logs.get("ballast.controller")


@dataclass
class ManagedGroup:
    name: str
    state: GroupState
    epoch: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    revoked_at: dict[TopicPartition, float] = field(default_factory=dict)
    publishing: bool = False
    warned_topics: set[str] = field(default_factory=set)


class Controller:
    def __init__(
        self, cfg: Config, metrics: Metrics | None = None, record: Path | None = None
    ) -> None:
        self.cfg = cfg
        self._recorder = TraceRecorder(record) if record else None
        self.metrics = metrics or Metrics()
        self.groups: dict[str, ManagedGroup] = {}
        self._started = False
        #: Groups whose task failed and that are being rebuilt (not ready meanwhile).
        self._rebuilding: set[str] = set()
        self._log = AssignmentLog(cfg, on_invalid=lambda why: self._invalid("assignment", why))
        self._tasks: list[asyncio.Task[None]] = []
        self._publisher = AssignmentPublisher(cfg)
        self._samples = (
            SamplePublisher(cfg, cfg.lag.samples_topic) if cfg.lag.samples_topic else None
        )
        self._readers: dict[str, OffsetReader] = {}
        self._metadata_wake = asyncio.Event()
        self._membership: MqttPresence | KafkaHeartbeats | None = None
        self._stopping = False
        self.replica = cfg.ha.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        self.election: ShardElection | None = None
        self._group_tasks: dict[str, asyncio.Task[None]] = {}
        self._shard_publishers: dict[int, AssignmentPublisher] = {}
        self.failed = asyncio.Event()
        self.failure = ""
        #: Latest presence of every member of every configured group, led or not: a
        #: replica taking a group over starts from what the fleet already announced.
        self._heard: dict[str, dict[str, Presence]] = {}
        #: When this replica saw members of every configured group leave (monotonic): a
        #: takeover counts their grace from there, not from the takeover.
        self._last_seen: dict[str, dict[str, float]] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.cfg
        admin = AIOKafkaAdminClient(**client_options(cfg), client_id=cfg.kafka.client_id)
        await admin.start()
        try:
            await ensure_compacted_topic(
                admin,
                cfg.assignments.name,
                cfg.assignments.partitions,
                cfg.assignments.replication_factor,
            )
        finally:
            await admin.close()
        self.metrics.connected.labels("kafka").set(1)
        await self._publisher.start()
        sink = Sink(self._seen, self._gone, frozenset(g.name for g in cfg.groups))
        if cfg.membership.source == "mqtt":
            self._membership = MqttPresence(cfg, sink, self.metrics)
        else:
            self._membership = KafkaHeartbeats(cfg, sink, self.metrics)
        if cfg.ha.enabled:
            self.election = ShardElection(
                cfg, self.replica, self._acquire_shards, self._release_shards
            )
            await self.election.start()
            self._spawn(self.election.run, "election")
        else:
            await self._acquire([g.name for g in cfg.groups], shard=None)
        self._spawn(self._membership.run, "membership")
        self._spawn(self._metadata_loop, "metadata")
        if cfg.lag.source == "poll" or self._samples is not None:
            if self._samples is not None:
                await self._samples.start()
            self._spawn(self._poll_lag_loop, "lag-poll")
        if cfg.lag.source == "topic":
            self._spawn(self._lag_topic_loop, "lag-topic")
        if isinstance(self._membership, MqttPresence):
            await asyncio.wait_for(self._membership.connected.wait(), timeout=30)
        self._started = True
        self._show_ready()
        log.info("ready", groups=sorted(self.groups), replica=self.replica, ha=cfg.ha.enabled)

    # ------------------------------------------------------------------ leadership

    @property
    def ready(self) -> bool:
        return self._started and not self._stopping and not self._rebuilding

    def _show_ready(self) -> None:
        self.metrics.ready.set(1 if self.ready else 0)

    async def _acquire_shards(self, shards: frozenset[int]) -> None:
        n = self.cfg.ha.shards
        prefix = self.cfg.ha.transactional_id_prefix
        if prefix is not None:
            for shard in sorted(shards - self._shard_publishers.keys()):
                publisher = AssignmentPublisher(self.cfg, f"{prefix}-{shard}")
                try:
                    await publisher.start()  # init_transactions: fences the old leader
                except Exception as exc:
                    self._fail(
                        f"ha.transactional_id_prefix: cannot start a transactional producer "
                        f"(does the broker support transactions?): {exc!r}"
                    )
                    return
                self._shard_publishers[shard] = publisher
        for shard in sorted(shards):
            names = [g.name for g in self.cfg.groups if shard_of(g.name, n) == shard]
            log.info("shards_acquired", shards=[shard], groups=len(names))
            self.metrics.leadership_changes.labels("acquired").inc(len(names))
            await self._acquire(names, shard)

    async def _release_shards(self, shards: frozenset[int]) -> None:
        faultpoints.reached("release.before_cancel")
        n = self.cfg.ha.shards
        names = [name for name in self.groups if shard_of(name, n) in shards]
        log.info("shards_released", shards=sorted(shards), groups=len(names))
        self.metrics.leadership_changes.labels("released").inc(len(names))
        await self._release(names)
        for shard in shards:
            publisher = self._shard_publishers.pop(shard, None)
            if publisher is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(publisher.stop(), 5)

    def _publisher_for(self, group: str) -> AssignmentPublisher:
        if not self._shard_publishers:
            return self._publisher
        return self._shard_publishers[shard_of(group, self.cfg.ha.shards)]

    def _fail(self, reason: str) -> None:
        """Unrecoverable: log it and let ``run_daemon`` exit non-zero."""
        log.error("fatal", reason=reason)
        self.failure = reason
        self.failed.set()

    async def _acquire(self, names: list[str], shard: int | None) -> None:
        """Lead these groups (docs/fencing.md): read the log, take an epoch no other
        tenure has, fence every partition of the topic, read up to the fences, rebuild."""
        names = [name for name in names if name not in self.groups]
        if not names:
            return
        view = await self._log.catch_up()
        faultpoints.reached("acquire.after_read")
        floor = max((view.max_epoch.get(name, 0) for name in names), default=0)
        if self.election is not None and shard is not None:
            epoch = await self.election.claim_epoch(shard, floor)
        else:
            epoch = floor + 1
        faultpoints.reached("acquire.before_fence")
        if epoch is None or not await self._fence(names, epoch, shard):
            log.warning("acquire_refused", shard=shard, groups=len(names))
            self._retry_acquire(names, shard)
            return
        view = await self._log.catch_up()
        for name in names:
            g = self.cfg.group(name)
            reader = OffsetReader(self.cfg, g.offsets_group)
            await reader.start()
            self._readers[name] = reader
            managed = await self._rebuild(name, view, epoch)
            self.groups[name] = managed
            self._group_tasks[name] = asyncio.create_task(
                self._supervise(name), name=f"group-{name}"
            )
            self.metrics.leader.labels(name).set(1)
            self.metrics.epoch.labels(name).set(epoch)
            self.metrics.generation.labels(name).set(managed.state.reconciler.generation)
            log.info(
                "group_acquired",
                group=name,
                members=len(managed.state.reconciler.granted),
                generation=managed.state.reconciler.generation,
                epoch=epoch,
                replica=self.replica,
            )
        self._metadata_wake.set()

    def _retry_acquire(self, names: list[str], shard: int | None) -> None:
        """A refusal can be passing (coordinator moving): try again while the election
        still gives us the shard. Deposed for good, the next rebalance releases it."""

        async def retry() -> None:
            await asyncio.sleep(1.0)
            if self.election is not None and shard in self.election.owned:
                await self._acquire(names, shard)

        self._spawn(retry, "acquire-retry")

    async def _fence(self, names: list[str], epoch: int, shard: int | None) -> bool:
        """Fence markers for every group, retried until written; False once deposed."""
        for name in names:
            backoff = 0.1
            while True:
                if not await self._still_leader(shard):
                    return False
                try:
                    await self._publisher_for(name).publish_fence(name, epoch, self.replica)
                    break
                except Exception as exc:
                    self.metrics.publish_errors.inc()
                    log.warning("fence_failed", group=name, error=repr(exc), retry_in=backoff)
                    if self._stopping:
                        return False
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
        return True

    async def _still_leader(self, shard: int | None) -> bool:
        """Without HA there is no one to ask; with HA, the coordinator (``confirm``)."""
        return self.election is None or shard is None or await self.election.confirm(shard)

    async def _rebuild(self, name: str, view: AssignmentView, epoch: int) -> ManagedGroup:
        """The group's state from the records that count, with what presence was heard."""
        records = {
            member: (view.order[(name, member)], logged.record)
            for member, logged in view.group_records(name).items()
        }
        recovered, conflicts = Recovered.from_records(
            records, max(view.max_generation.get(name, 0), 0), epoch, _state_clock
        )
        for detail in conflicts:
            self.metrics.recovery_conflicts.labels(name).inc()
            log.warning("recovery_conflict", group=name, detail=detail)
        topics = {t for ts in recovered.topics.values() for t in ts}
        counts = await self._readers[name].partition_counts(topics)
        now = time.monotonic()
        state = GroupState(
            name, self.cfg.rebalance.tuning(self.cfg.lag.smoothing), counts, recovered, now
        )
        for p in self._heard.get(name, {}).values():
            with contextlib.suppress(RejectedError):
                state.on_presence(p, now)
        for member, since in self._last_seen.get(name, {}).items():
            state.seen_absent(member, since)
        if isinstance(self._membership, KafkaHeartbeats):
            for member in recovered.granted:
                self._membership.expect(name, member)
        if self._recorder is not None:
            self._recorder.attach(state)
        managed = ManagedGroup(name, state, epoch)
        managed.wake.set()
        return managed

    async def _supervise(self, name: str) -> None:
        """Run the group's loop; if it fails, count it and rebuild the group from the log
        within the same tenure (same epoch: this replica still leads it)."""
        while True:
            try:
                await self._group_loop(self.groups[name])
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.task_failures.labels("group").inc()
                log.error("task_failed", task=f"group-{name}", error=repr(exc))
                self._rebuilding.add(name)
                self._show_ready()
                try:
                    await self._rebuild_until_done(name)
                finally:
                    self._rebuilding.discard(name)
                    self._show_ready()

    async def _rebuild_until_done(self, name: str) -> None:
        """Rebuild a failed group from the log, retrying (counted) until it works."""
        backoff = 1.0
        while True:
            await asyncio.sleep(backoff)
            try:
                # Whatever the failed loop handed the producer lands before we read.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._publisher_for(name).flush(), 10)
                epoch = self.groups[name].epoch
                self.groups[name] = await self._rebuild(name, await self._log.catch_up(), epoch)
                log.info("group_rebuilt", group=name, epoch=epoch)
                return
            except Exception as exc:
                self.metrics.task_failures.labels("group").inc()
                log.error("group_rebuild_failed", group=name, error=repr(exc), retry_in=backoff)
                backoff = min(backoff * 2, 30.0)

    async def _release(self, names: list[str]) -> None:
        """Stop leading these groups at once: no further publication."""
        for name in names:
            group = self.groups.pop(name, None)
            task = self._group_tasks.pop(name, None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            reader = self._readers.pop(name, None)
            if reader is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reader.stop(), 5)
            self.metrics.leader.labels(name).set(0)
            if group is not None:
                log.info("group_released", group=name, epoch=group.epoch, replica=self.replica)

    async def stop(self) -> None:
        """Drain: let in-flight publications finish, then stop every task and client."""
        self._stopping = True
        self._show_ready()
        if self.election is not None:
            # Leave the election first: another replica takes over without waiting for
            # this one's session to time out. Revocation stops the group loops.
            try:
                await asyncio.wait_for(self.election.stop(), 10)
            except Exception as exc:
                log.warning("election_did_not_stop", error=repr(exc))
        deadline = time.monotonic() + 10
        while any(g.publishing for g in self.groups.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        tasks = [*self._tasks, *self._group_tasks.values()]
        for task in tasks:
            task.cancel()
        # Bounded: a client stuck in a slow disconnect must not hold the shutdown up.
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=5)
            for task in stuck:
                log.warning("task_did_not_stop", task=task.get_name())
        clients: list[AssignmentPublisher | OffsetReader | SamplePublisher | AssignmentLog]
        clients = [
            self._publisher,
            *self._shard_publishers.values(),
            *self._readers.values(),
            self._log,
        ]
        if self._samples is not None:
            clients.append(self._samples)
        for closing in (c.stop() for c in clients):
            try:
                await asyncio.wait_for(closing, timeout=5)
            except Exception as exc:  # includes TimeoutError
                log.warning("client_did_not_stop", error=repr(exc))
        if self._recorder is not None:
            self._recorder.close()
        log.info("stopped")

    def _spawn(self, factory: Callable[[], Awaitable[None]], name: str) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.create_task(self._guard(factory, name), name=name))

    async def _guard(self, factory: Callable[[], Awaitable[None]], name: str) -> None:
        """A failing background task is logged and restarted, never silently lost."""
        while True:
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.task_failures.labels(name).inc()
                log.error("task_failed", task=name, error=repr(exc))
                await asyncio.sleep(1.0)

    # ------------------------------------------------------------------ observations

    def _seen(self, p: Presence) -> None:
        self._heard.setdefault(p.group, {})[p.member] = p
        self._last_seen.get(p.group, {}).pop(p.member, None)
        g = self.groups.get(p.group)
        if g is None:
            return
        try:
            g.state.on_presence(p, time.monotonic())
        except RejectedError as exc:
            self._invalid("presence", str(exc))
            return
        known = g.state.engine.partitions_per_topic
        if any(t not in known for t in p.topics):
            self._metadata_wake.set()
        g.wake.set()

    def _gone(self, group: str, member: str, since: float | None) -> None:
        self._heard.get(group, {}).pop(member, None)
        if since is not None:
            self._last_seen.setdefault(group, {})[member] = since
        g = self.groups.get(group)
        if g is not None:
            g.state.on_gone(member, time.monotonic(), since)
            g.wake.set()

    def _invalid(self, source: str, reason: str) -> None:
        self.metrics.invalid.labels(source).inc()
        log.warning("invalid_message", source=source, reason=reason)

    # ------------------------------------------------------------------ group loop

    async def _group_loop(self, g: ManagedGroup) -> None:
        while True:
            wake = g.state.next_wakeup()
            timeout = None if wake is None else max(0.0, wake - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(g.wake.wait(), timeout)
            g.wake.clear()
            # Acks that arrive together are granted together: one publication per
            # ``grant_batch`` during a wave of acks, not one per ack.
            while True:
                await asyncio.sleep(self.cfg.rebalance.grant_batch)
                if not await self._step(g):
                    break

    async def _step(self, g: ManagedGroup) -> bool:
        """One tick; True when it published (another step may now be possible)."""
        started = time.monotonic()
        rebalance, plan = g.state.tick(started)
        if plan is not None:
            # Commit first: a member can ack a record the moment it is durable, possibly
            # before this task resumes. Safe because a group's publications are sequential
            # and retried until they land, so no later plan is published before this one.
            self._observe_handoffs(g, plan)
            g.state.reconciler.commit(plan)
            g.publishing = True
            try:
                await self._publish(g, plan)
            finally:
                g.publishing = False
            self.metrics.generation.labels(g.name).set(plan.generation)
        for rel in g.state.reconciler.timed_out:
            self.metrics.handoff_timeouts.labels(g.name).inc()
            log.warning(
                "handoff_timeout", group=g.name, member=rel.member, generation=rel.generation
            )
        g.state.reconciler.timed_out.clear()
        if rebalance is not None:
            self._record_rebalance(g, rebalance, plan, started)
        self._update_gauges(g)
        return plan is not None

    async def _publish(self, g: ManagedGroup, plan: Plan) -> None:
        backoff = 0.1
        while True:
            if not await self._still_leader(shard_of(g.name, self.cfg.ha.shards)):
                # Deposed (e.g. paused past the session timeout): write nothing; the
                # revocation that follows stops this group's loop.
                self.metrics.fenced_publications.labels(g.name).inc()
                log.warning("publication_fenced", group=g.name, generation=plan.generation)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            faultpoints.reached("publish.after_confirm")
            try:
                await self._publisher_for(g.name).publish(
                    g.name,
                    g.epoch,
                    plan.generation,
                    plan.records,
                    g.state.engine.members,
                    wall_clock=_wall_clock,
                )
                self.metrics.connected.labels("kafka").set(1)
                return
            except Exception as exc:
                self.metrics.publish_errors.inc()
                self.metrics.connected.labels("kafka").set(0)
                log.warning(
                    "publish_failed",
                    group=g.name,
                    generation=plan.generation,
                    error=repr(exc),
                    retry_in=backoff,
                )
                if self._stopping:
                    raise
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _observe_handoffs(self, g: ManagedGroup, plan: Plan) -> None:
        now = time.monotonic()
        for tp in plan.releases:
            g.revoked_at.setdefault(tp, now)
        for rec in plan.records:
            for tp in rec.partitions or ():
                start = g.revoked_at.pop(tp, None)
                if start is not None:
                    self.metrics.handoff.labels(g.name).observe(now - start)

    def _record_rebalance(
        self, g: ManagedGroup, r: Rebalance, plan: Plan | None, started: float
    ) -> None:
        done = time.monotonic()
        m = self.metrics
        for reason in r.reasons:
            m.rebalances.labels(g.name, reason).inc()
        balance_moves = r.moved - r.moved_for_lag
        if balance_moves:
            m.moved.labels(g.name, "balance").inc(balance_moves)
        if r.moved_for_lag:
            m.moved.labels(g.name, "lag").inc(r.moved_for_lag)
        m.rebalance_latency.labels(g.name).observe(done - r.first_event_at)
        m.compute_seconds.labels(g.name).observe(done - started)
        member_lag = g.state.engine.member_lag()
        log.info(
            "rebalance",
            group=g.name,
            generation=plan.generation if plan else g.state.reconciler.generation,
            reason=",".join(r.reasons),
            moved=r.moved,
            moved_for_lag=r.moved_for_lag,
            changed_members=r.changed_members,
            records=len(plan.records) if plan else 0,
            duration_ms=round((done - started) * 1000, 3),
            latency_ms=round((done - r.first_event_at) * 1000, 3),
            skew=round(_skew(member_lag), 3),
        )

    def _update_gauges(self, g: ManagedGroup) -> None:
        m = self.metrics
        state = g.state
        engine = state.engine
        assignment_sizes = {name: len(v) for name, v in state.reconciler.granted.items()}
        total_parts = sum(
            engine.partitions_per_topic.get(t, 0) for t in _subscribed(engine.members)
        )
        granted = sum(assignment_sizes.values())
        m.members.labels(g.name).set(len(state.presence))
        m.partitions.labels(g.name, "assigned").set(granted)
        m.partitions.labels(g.name, "revoking").set(state.reconciler.revoking())
        m.partitions.labels(g.name, "unassigned").set(
            max(0, total_parts - granted - state.reconciler.revoking())
        )
        counts = list(assignment_sizes.values())
        m.imbalance.labels(g.name).set(max(counts) - min(counts) if counts else 0)
        member_lag = engine.member_lag()
        m.lag_total.labels(g.name).set(sum(member_lag.values()))
        m.lag_max_member.labels(g.name).set(max(member_lag.values(), default=0))
        m.lag_skew.labels(g.name).set(_skew(member_lag))
        if self.cfg.metrics.per_member:
            for name in sorted(member_lag)[: self.cfg.metrics.per_member_cap]:
                m.member_lag.labels(g.name, name).set(member_lag[name])
                m.member_partitions.labels(g.name, name).set(assignment_sizes.get(name, 0))

    # ------------------------------------------------------------------ metadata and lag

    async def _metadata_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._metadata_wake.wait(), self.cfg.lag.poll_interval)
            self._metadata_wake.clear()
            for g in list(self.groups.values()):
                topics = _subscribed(g.state.engine.members) | {
                    t for p in g.state.presence.values() for t in p.topics
                }
                counts = await self._readers[g.name].partition_counts(topics)
                for topic in sorted(topics - counts.keys() - g.warned_topics):
                    g.warned_topics.add(topic)
                    log.warning("unknown_topic", group=g.name, topic=topic)
                if counts:
                    g.state.on_partitions(counts, time.monotonic())
                    g.wake.set()

    async def _poll_lag_loop(self) -> None:
        """Offsets of every subscribed partition: lag for the groups (``source: poll``)
        and raw samples for the Spark job (``samples_topic``)."""
        reset = self.cfg.lag.auto_offset_reset
        use_lag = self.cfg.lag.source == "poll"
        while True:
            for g in list(self.groups.values()):
                subscribed = _subscribed(g.state.engine.members)
                ppt = {
                    t: n
                    for t, n in g.state.engine.partitions_per_topic.items()
                    if n > 0 and t in subscribed
                }
                try:
                    offsets = await self._readers[g.name].offsets(ppt, reset == "earliest")
                    if self._samples is not None and offsets:
                        await self._samples.publish(g.name, offsets, time.time())
                except Exception as exc:
                    log.warning("lag_poll_failed", group=g.name, error=repr(exc))
                    continue
                if use_lag and offsets:
                    g.state.on_lag(
                        {tp: o.lag(reset) for tp, o in offsets.items()}, time.monotonic()
                    )
                    g.wake.set()
            await asyncio.sleep(self.cfg.lag.poll_interval)

    async def _lag_topic_loop(self) -> None:
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
                batch = await consumer.getmany(timeout_ms=500)
                readings: dict[str, dict[TopicPartition, int | None]] = {}
                for records in batch.values():
                    for msg in records:
                        self._lag_record(msg, readings)
                now = time.monotonic()
                for name, lag in readings.items():
                    if name not in self.groups:  # released meanwhile
                        continue
                    state = self.groups[name].state
                    state.forget_lag((tp for tp, v in lag.items() if v is None), now)
                    state.on_lag({tp: v for tp, v in lag.items() if v is not None}, now)
                    self.groups[name].wake.set()
        finally:
            await consumer.stop()

    def _lag_record(
        self, msg: object, readings: dict[str, dict[TopicPartition, int | None]]
    ) -> None:
        """One lag record into ``readings`` (None: a tombstone, forget the partition)."""
        source = f"{msg.topic}[{msg.partition}]@{msg.offset}"  # type: ignore[attr-defined]
        try:
            group, topic, partition = split_key(msg.key, source, parts=3)  # type: ignore[attr-defined]
            if msg.value is None:  # type: ignore[attr-defined]
                if group in self.groups and partition.isdigit():
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
        if group not in self.groups:
            return
        known = self.groups[group].state.engine.partitions_per_topic
        if rec.partition >= known.get(rec.topic, 0):
            self._invalid(
                "lag",
                f"{source}: {rec.topic}-{rec.partition} is not a partition of a subscribed topic",
            )
            return
        weight = rec.weight(self.cfg.lag.weight)
        if weight is not None:
            readings.setdefault(group, {})[TopicPartition(rec.topic, rec.partition)] = weight

    # ------------------------------------------------------------------ read-only views

    def group_view(self, name: str) -> dict[str, object]:
        g = self.groups[name]
        engine = g.state.engine
        member_lag = engine.member_lag()
        granted = g.state.reconciler.granted
        members = {}
        for member, topics in engine.members.items():
            p = g.state.presence.get(member)
            members[member] = {
                "topics": sorted(topics),
                "live": p is not None,
                "in_leave_grace": member in g.state.grace,
                "applied_generation": g.state.reconciler.acked.get(member, -1),
                "granted": [[tp.topic, tp.partition] for tp in sorted(granted.get(member, ()))],
                "target": [[tp.topic, tp.partition] for tp in engine.partitions_of(member)],
                "lag": member_lag.get(member, 0),
                "rack": p.rack if p else None,
            }
        counts = [len(v) for v in granted.values()]
        return {
            "group": name,
            "generation": g.state.reconciler.generation,
            "controller_epoch": g.epoch,
            "members": members,
            "revoking": [
                {
                    "partition": [tp.topic, tp.partition],
                    "from": r.member,
                    "generation": r.generation,
                }
                for tp, r in sorted(g.state.reconciler.releasing.items())
            ],
            "quality": {
                "count_spread": max(counts) - min(counts) if counts else 0,
                "total_lag": sum(member_lag.values()),
                "max_member_lag": max(member_lag.values(), default=0),
                "lag_skew": _skew(member_lag),
            },
        }


def _state_clock(unix: float) -> float:
    """A Unix time from a record on the monotonic clock the group state runs on."""
    return time.monotonic() + (unix - time.time())


def _wall_clock(mono: float) -> float:
    return time.time() + (mono - time.monotonic())


def _subscribed(members: dict[str, frozenset[str]]) -> set[str]:
    return {t for topics in members.values() for t in topics}


def _skew(member_lag: dict[str, int]) -> float:
    if not member_lag:
        return 1.0
    mean = sum(member_lag.values()) / len(member_lag)
    return max(member_lag.values()) / mean if mean > 0 else 1.0
