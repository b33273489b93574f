"""The controller daemon: starts and stops its parts, and routes what membership
observes to the led groups.

* ``ownership``: which groups this replica leads (acquire, fence, rebuild, release);
* ``group_loop``: one task per led group (tick the state, publish its plans);
* ``lag_ingest`` and ``metadata_watch``: lag and partition counts into the groups;
* ``membership`` (MQTT or Kafka heartbeats) calls ``_seen`` and ``_gone`` here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from controller import logs
from controller.adapters.connection import client_options
from controller.adapters.kafka_login import refused_login
from controller.adapters.topics import (
    ensure_pipeline_topics,
    ensure_topic,
)
from controller.config import Config
from controller.core.group import RejectedError
from controller.core.views import group_view, reading
from controller.errors import CredentialsError
from controller.runtime.assignment_log import AssignmentLog
from controller.runtime.constraint_store import ConstraintStore
from controller.runtime.election import ShardElection
from controller.runtime.health import Health
from controller.runtime.kafka_probe import probe_kafka
from controller.runtime.lag_ingest import LagIngest
from controller.runtime.membership import KafkaHeartbeats, MqttPresence, Sink, invalid_input
from controller.runtime.metadata_watch import watch_metadata
from controller.runtime.metrics import Metrics
from controller.runtime.offsets_reader import OffsetReader
from controller.runtime.ownership import Ownership
from controller.runtime.publisher import AssignmentPublisher
from controller.runtime.replica_state import ManagedGroup, ReplicaState
from controller.runtime.samples import SamplePublisher
from controller.runtime.startup import reach, wait_connected
from controller.runtime.trace import TraceRecorder
from controller.wire.records import Presence

log = logs.get("ballast.controller")

TASK_FIRST_BACKOFF = 1.0
TASK_MAX_BACKOFF = 30.0
TASK_QUIET_RESET = 60.0


class Controller:
    def __init__(
        self, cfg: Config, metrics: Metrics | None = None, record: Path | None = None
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics or Metrics()
        self.health = Health(self.metrics, on_change=self._show_ready)
        self.health.required = {
            "kafka",
            "mqtt" if cfg.membership.source == "mqtt" else "heartbeats",
        }
        self.state = ReplicaState()
        self._started = False
        self._stopping = False
        #: Signs what this replica writes; its public half checks what a takeover reads.
        self.signer = cfg.signing.signer()
        #: What a takeover counts: this key's records, its predecessors' (and, while
        #: signing is being turned on, unsigned ones).
        verifier = cfg.signing.verifier()
        self._log = AssignmentLog(
            cfg, on_invalid=lambda why: self._invalid("assignment", why), verifier=verifier
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._publisher = AssignmentPublisher(cfg, signer=self.signer)
        self.constraints = ConstraintStore(
            cfg,
            lambda why: self._invalid("constraints", why),
            signer=self.signer,
            verifier=verifier,
        )
        self._samples = (
            SamplePublisher(cfg, cfg.lag.samples_topic) if cfg.lag.samples_topic else None
        )
        self._membership: MqttPresence | KafkaHeartbeats | None = None
        self.replica = cfg.ha.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        self.failed = asyncio.Event()
        self.failure = ""
        self.failure_code = 1
        self._recorder = TraceRecorder(record) if record else None
        self.ownership = Ownership(
            cfg,
            self.metrics,
            self.replica,
            self.state,
            assignment_log=self._log,
            constraints=self.constraints,
            publisher=self._publisher,
            signer=self.signer,
            recorder=self._recorder,
            spawn=self._spawn,
            fail=self._fail,
            ready_changed=self._show_ready,
            stopping=lambda: self._stopping,
        )
        self._lag = LagIngest(cfg, self.state, self._samples, self._invalid, self.metrics)
        cap = cfg.metrics.per_member_cap if cfg.metrics.per_member else None
        self.metrics.group_gauges.source = lambda: [
            reading(g, cap) for _, g in sorted(self.state.groups.items())
        ]
        self.metrics.rebalance_delay.set(cfg.rebalance.delay)
        for group in cfg.groups:  # a group no replica leads reads 0 everywhere, not absent
            self.metrics.leader.labels(group.name).set(0)

    @property
    def groups(self) -> dict[str, ManagedGroup]:
        """The groups this replica leads now."""
        return self.state.groups

    @property
    def election(self) -> ShardElection | None:
        return self.ownership.election

    def group_view(self, name: str, partitions: bool = False) -> dict[str, object]:
        return group_view(self.state.groups[name], partitions, self.cfg.lag.auto_offset_reset)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Reach the brokers (retrying for ``startup.timeout``), then start every part.
        Raises ``UnreachableError`` when a broker never answered."""
        cfg = self.cfg
        began = time.monotonic()
        self._say_signing()
        await reach(
            "Kafka",
            cfg.kafka.bootstrap_servers,
            self._ensure_topics,
            cfg.startup.timeout,
            "check kafka.bootstrap_servers, kafka.security_protocol and that the brokers "
            "run (`ballast dev up` starts local ones)",
            refused=lambda: refused_login(client_options(cfg)),
            credentials="kafka.sasl_username, kafka.sasl_password (or sasl_password_file), "
            "kafka.ssl_cafile",
        )
        self.health.link("kafka", True)
        await self._publisher.start()
        sink = Sink(self._seen, self._gone, frozenset(g.name for g in cfg.groups))
        if cfg.membership.source == "mqtt":
            self._membership = MqttPresence(
                cfg,
                sink,
                self.metrics,
                self.health,
                replica=self.replica,
                on_refused=lambda why: self._fail(why, CredentialsError.exit_code),
            )
        else:
            self._membership = KafkaHeartbeats(cfg, sink, self.metrics, self.health)
            self.ownership.expect_heartbeats(self._membership.expect)
        if cfg.ha.enabled:
            own = self.ownership
            own.election = ShardElection(cfg, self.replica, own.acquire_shards, own.release_shards)
            await own.election.start()
            self._spawn(own.election.run, "election")
            self._spawn(own.follow, "standby-read")
        else:
            await self.ownership.acquire([g.name for g in cfg.groups], shard=None)
        self._spawn(self._membership.run, "membership")
        self._spawn(lambda: watch_metadata(cfg, self.state), "metadata")
        if cfg.lag.source == "poll" or self._samples is not None:
            if self._samples is not None:
                await self._samples.start()
            self._spawn(self._lag.poll, "lag-poll")
        if cfg.lag.source == "topic":
            self._spawn(self._lag.read_topic, "lag-topic")
        if isinstance(self._membership, MqttPresence):
            await wait_connected(
                "MQTT",
                f"{cfg.mqtt.host}:{cfg.mqtt.port}",
                self._membership.connected,
                max(cfg.startup.timeout - (time.monotonic() - began), 1.0),
                "check mqtt.host, mqtt.port, mqtt.tls and that the broker runs",
                given_up=self.failed,
            )
            if self.failed.is_set():
                raise CredentialsError(self.failure)
        # Last: spawned before the election's join, it delayed the join enough that the
        # first replica of three took every shard alone and the group took over a
        # minute to spread them (test_three_replicas_share_groups_...).
        self._spawn(lambda: probe_kafka(cfg, self.health), "kafka-probe")
        self._started = True
        self._show_ready()
        log.info("ready", groups=sorted(self.groups), replica=self.replica, ha=cfg.ha.enabled)

    def _say_signing(self) -> None:
        """How grants are vouched for, said once at start: unsigned operation is a
        choice an operator must see (docs/operations.md, "Signing")."""
        signing = self.cfg.signing
        if self.signer is None:
            log.warning(
                "unsigned_operation",
                detail="signing.private_key_file is unset: nothing is signed or checked, and "
                "anyone who may write the assignments topic can grant partitions",
            )
            return
        log.info(
            "signing",
            key_id=self.signer.key_id,
            previous_keys=len(signing.previous_public_keys),
            required=signing.required,
        )
        if not signing.required:
            log.warning(
                "unsigned_records_accepted",
                detail="signing.required is false: unsigned records on the topics count at "
                "takeover; set it to true once ballast_signing_members_behind reads 0",
            )

    async def _ensure_topics(self) -> None:
        cfg = self.cfg
        admin = AIOKafkaAdminClient(**client_options(cfg), client_id=cfg.kafka.client_id)
        try:
            with logs.quiet("aiokafka"):  # ``reach`` logs each failed attempt once
                await admin.start()
            rf, partitions = cfg.assignments.replication_factor, cfg.assignments.partitions
            # Read as "latest per key": they must be compacted.
            found = [
                await ensure_topic(
                    admin, name, count, rf, compacted=True, required=True, setting=setting
                )
                for name, count, setting in (
                    (cfg.assignments.name, partitions, "assignments.name"),
                    (cfg.assignments.constraints_topic, 1, "assignments.constraints_topic"),
                )
            ]
            unsafe = [u for ensured in found for u in ensured.unsafe]
            if cfg.membership.source == "kafka":  # read from where it is: taken as it is
                heartbeats = await ensure_topic(
                    admin,
                    cfg.membership.heartbeat_topic,
                    partitions,
                    rf,
                    compacted=True,
                    setting="membership.heartbeat_topic",
                )
                unsafe += heartbeats.unsafe
            if cfg.lag.source == "topic" or cfg.lag.samples_topic is not None:
                unsafe += await ensure_pipeline_topics(admin, cfg)
            self.metrics.unsafe_topic_settings.set(len(unsafe))
        finally:
            await admin.close()

    @property
    def ready(self) -> bool:
        return not self.not_ready()

    def not_ready(self) -> list[str]:
        """Why this replica is not ready (empty when it is): what ``/readyz`` says."""
        why = [] if self._started else ["starting"]
        if self._stopping:
            why.append("stopping")
        if self.ownership.rebuilding:
            why.append("rebuilding")
        return why + [f"{name} unreachable" for name in self.health.unreachable()]

    def _show_ready(self) -> None:
        self.metrics.ready.set(1 if self.ready else 0)

    def _fail(self, reason: str, code: int = 1) -> None:
        """Unrecoverable: log it and let ``run_daemon`` exit with ``code``."""
        if self.failed.is_set():
            return
        log.error("fatal", reason=reason)
        self.failure = reason
        self.failure_code = code
        self.failed.set()

    async def stop(self) -> None:
        """Drain: let in-flight publications finish, then stop every task and client."""
        self._stopping = True
        self._show_ready()
        if self.ownership.election is not None:
            # Leave the election first: another replica takes over without waiting for
            # this one's session to time out. Revocation stops the group loops.
            try:
                async with asyncio.timeout(10):
                    await self.ownership.election.stop()
            except Exception as exc:
                log.warning("election_did_not_stop", error=repr(exc))
        deadline = time.monotonic() + 10
        while any(g.publishing for g in self.groups.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        tasks = [*self._tasks, *self.ownership.group_tasks.values()]
        for task in tasks:
            task.cancel()
        # Bounded: a client stuck in a slow disconnect must not hold the shutdown up.
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=5)
            for task in stuck:
                log.warning("task_did_not_stop", task=task.get_name())
        clients: list[
            AssignmentPublisher | OffsetReader | SamplePublisher | AssignmentLog | ConstraintStore
        ]
        clients = [
            self._publisher,
            *self.ownership.shard_publishers.values(),
            *self.state.readers.values(),
            self._log,
            self.constraints,
        ]
        if self._samples is not None:
            clients.append(self._samples)
        for closing in (c.stop() for c in clients):
            try:
                async with asyncio.timeout(5):
                    await closing
            except Exception as exc:  # includes TimeoutError
                log.warning("client_did_not_stop", error=repr(exc))
            except asyncio.CancelledError:
                # aiokafka's fetcher re-raises the cancellation of its own fetch tasks from
                # ``stop()`` while a broker is unreachable: not ours unless we are cancelled.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                log.warning("client_did_not_stop", error="its close raised CancelledError")
        if self._recorder is not None:
            self._recorder.close()
        log.info("stopped")

    def _spawn(self, factory: Callable[[], Awaitable[None]], name: str) -> None:
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.create_task(self._guard(factory, name), name=name))

    async def _guard(self, factory: Callable[[], Awaitable[None]], name: str) -> None:
        """A failing background task is logged, counted and restarted with backoff
        (1 s doubling to 30 s; back to 1 s after a minute without failing), never
        silently lost; ``/v1/health`` shows each one's failures and last error."""
        backoff = TASK_FIRST_BACKOFF
        while True:
            self.health.task_running(name)
            began = time.monotonic()
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if time.monotonic() - began > TASK_QUIET_RESET:
                    backoff = TASK_FIRST_BACKOFF
                self.health.task_failed(name, repr(exc), backoff)
                log.error("task_failed", task=name, error=repr(exc), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, TASK_MAX_BACKOFF)

    # ------------------------------------------------------------------ observations

    def _seen(self, p: Presence) -> bool:
        """A valid presence; False when refused (a full group: ``membership.max_members``)."""
        heard = self.state.heard.setdefault(p.group, {})
        cap = self.cfg.membership.max_members
        if p.member not in heard and len(heard) >= cap and p.state == "active":
            self._invalid(
                "presence",
                f"{p.group}: member {p.member!r} refused: the group has {cap} members already "
                "(membership.max_members)",
            )
            return False
        if p.state == "active" or p.member in heard:  # a stranger's leave is not kept
            heard[p.member] = p
        self.state.last_seen.get(p.group, {}).pop(p.member, None)
        g = self.groups.get(p.group)
        if g is None:
            return True
        try:
            g.state.on_presence(p, time.monotonic())
        except RejectedError as exc:
            self._invalid("presence", str(exc))
            return True
        known = g.state.partitions_per_topic
        if any(t not in known for t in p.topics):
            self.state.metadata_wake.set()
        g.wake.set()
        return True

    def _gone(self, group: str, member: str, since: float | None) -> None:
        heard = self.state.heard.get(group, {}).pop(member, None) is not None
        g = self.groups.get(group)
        # Only members someone announced or the log names: a cleared topic of any name
        # must not grow this map (anyone may publish an empty message).
        if since is not None and (heard or (g is not None and g.state.knows(member))):
            self.state.last_seen.setdefault(group, {})[member] = since
        if g is not None:
            g.state.on_gone(member, time.monotonic(), since)
            g.wake.set()

    def _invalid(self, source: str, reason: str) -> None:
        invalid_input(self.metrics, source, reason)
