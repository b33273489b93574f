"""``ManagedConsumer``: a Kafka consumer whose partitions Ballast decides.

For fleets that use manual ``assign()``. The consumer announces its presence (MQTT with a
Will, or the heartbeat topic), reads only the partition of the assignments topic its key
hashes to, and applies its record the way Kafka applies a rebalance inside ``poll()``:
assignment changes take effect inside ``getmany()`` (and ``async for``). Records it
returned before have then been processed, so on revoke it stops fetching, calls
``on_partitions_revoked``, commits, and only then acknowledges the generation. On grant it
``assign()``s, starts from the committed offset (or ``auto_offset_reset``) and calls
``on_partitions_assigned``. If the application stops polling, a pending revoke is applied
anyway after ``revoke_timeout`` so that the fleet is never held up by one consumer.

Fail-stop: the tasks that keep this member's right to its partitions (the assignment
reader, presence, the revoke watchdog) are watched. When one dies, the consumer stops
fetching at once, stops acknowledging, and the next ``getmany`` (or ``async for``)
commits what it had handed out, releases everything, tells the controller it is leaving
and raises ``MemberFailedError``. It then holds nothing; make a new ``ManagedConsumer``.
With ``verify_key`` (the controller's public key, ``ballast keys generate``) it acts only
on assignment records the controller signed.

    async with ManagedConsumer("orders-fleet", "pod-7", ["orders"],
                               bootstrap_servers="kafka:9092", mqtt_host="mqtt") as consumer:
        async for record in consumer:
            handle(record)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

import aiomqtt
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from aiokafka import TopicPartition as KafkaTP
from aiokafka.errors import KafkaError
from prometheus_client import Counter
from pydantic import ValidationError

from controller import logs
from controller.adapters.metadata import topic_metadata
from controller.adapters.metadata_scope import track_when_idle
from controller.adapters.presence import MqttAuth, drop_link, member_client
from controller.tasks import cancel_and_wait, reraise_swallowed_cancel
from controller.wire.assignments import READ_ISOLATION, assignments_partition, log_entry
from controller.wire.fencing import AssignmentView, Verdict
from controller.wire.records import (
    LoggedFence,
    LoggedRecord,
    OffsetSample,
    Presence,
    assignment_key,
    fence_key,
    partition_key,
    presence_topic,
    problems,
)
from controller.wire.signing import Verifier

log = logs.get("ballast.client")

Callback = Callable[[set[KafkaTP]], Awaitable[None] | None]

#: How long a new assignment may wait for the ``getmany`` slice in progress (ms).
CHANGE_CHECK_MS = 50
#: How long a failed member waits for its last commit before it lets go anyway (s).
FAIL_STOP_COMMIT_TIMEOUT = 5.0

FAIL_STOPS = Counter(
    "ballast_client_fail_stops_total",
    "Managed consumers that stopped holding partitions because a task that keeps their "
    "right to them died, by task (assignments, presence, heartbeats, watchdog).",
    ["task"],
)


INVALID_RECORDS = Counter(
    "ballast_client_invalid_records_total",
    "Records of the assignments topic a managed consumer skipped: malformed, or not "
    "signed by the controller's key when one is configured.",
    ["source"],
)


class MemberFailedError(RuntimeError):
    """A task that keeps this member's right to its partitions died: the consumer has
    released everything and consumes nothing more (``__cause__`` says why)."""


class _Grant(NamedTuple):
    """What to hold next, and the generation that applying it acknowledges."""

    partitions: frozenset[KafkaTP]
    generation: int


class ManagedConsumer:
    def __init__(
        self,
        group: str,
        member: str,
        topics: Iterable[str],
        *,
        bootstrap_servers: str,
        presence: Literal["mqtt", "kafka"] = "mqtt",
        mqtt_host: str = "127.0.0.1",
        mqtt_port: int = 1883,
        mqtt_keepalive: int = 5,
        mqtt_prefix: str = "ballast",
        heartbeat_topic: str = "ballast.heartbeats",
        heartbeat_interval: float = 2.0,
        assignments_topic: str = "ballast.assignments",
        commit_group: str | None = None,
        auto_offset_reset: Literal["earliest", "latest"] = "latest",
        on_partitions_revoked: Callback | None = None,
        on_partitions_assigned: Callback | None = None,
        rack: str | None = None,
        capacity: float | None = None,
        report_lag: bool = False,
        revoke_timeout: float = 5.0,
        offset_samples_topic: str | None = None,
        sample_interval: float = 5.0,
        mqtt_auth: MqttAuth | None = None,
        kafka_security: Mapping[str, Any] | None = None,
        assignments_fetch_max_wait_ms: int = 500,
        verify_key: Path | str | Verifier | None = None,
        **consumer_options: Any,
    ) -> None:
        self.group = group
        self.member = member
        self.topics = sorted(set(topics))
        try:  # what it will announce, checked before anything connects
            Presence(group=group, member=member, topics=self.topics, rack=rack, capacity=capacity)
        except ValidationError as exc:
            raise ValueError(f"ManagedConsumer({group!r}, {member!r}): {problems(exc)}") from None
        #: TLS/SASL settings (aiokafka names) for every Kafka client of this member.
        self._kafka = {"bootstrap_servers": bootstrap_servers, **(kafka_security or {})}
        self._mqtt_auth = mqtt_auth
        if isinstance(verify_key, str | Path):
            verify_key = Verifier.from_file(Path(verify_key))
        self._verifier = verify_key
        self._presence_kind = presence
        self._mqtt = (mqtt_host, mqtt_port, mqtt_keepalive)
        self._presence_topic = presence_topic(mqtt_prefix, group, member)
        self._heartbeat_topic = heartbeat_topic
        self._heartbeat_interval = heartbeat_interval
        self._assignments_topic = assignments_topic
        self._on_revoked = on_partitions_revoked
        self._on_assigned = on_partitions_assigned
        self._rack = rack
        self._capacity = capacity
        self._report_lag = report_lag
        self._revoke_timeout = revoke_timeout
        self._samples_topic = offset_samples_topic
        self._sample_interval = sample_interval
        self._sample_producer: AIOKafkaProducer | None = None
        self._instance = uuid.uuid4().hex[:16]
        self._key = assignment_key(group, member)
        self._fence_key = fence_key(group)
        #: The fencing rule applied to our partition of the assignments topic.
        self._view = AssignmentView()
        if rack is not None:  # one rack setting: fetches from the replica in its zone too
            consumer_options.setdefault("client_rack", rack)
        self.consumer = AIOKafkaConsumer(
            **self._kafka,
            group_id=commit_group or group,  # commits only: it never subscribes
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            **consumer_options,
        )
        # Kafka answers a waiting fetch as soon as a record lands, so the wait only sets
        # how often an idle reader asks; a broker that answers late delivers records
        # sooner with less (docs/operations.md, "Failover").
        self._reader = AIOKafkaConsumer(
            **self._kafka,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=assignments_fetch_max_wait_ms,
            isolation_level=READ_ISOLATION,
        )
        self._mqtt_client: aiomqtt.Client | None = None
        self._producer: AIOKafkaProducer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._mqtt_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        #: Highest epoch seen for the group, and the last record applied.
        self.epoch = -1
        self.generation = -1
        self.assignment: frozenset[KafkaTP] = frozenset()
        self._pending: _Grant | None = None
        self._pending_since = 0.0
        self._consumed: dict[KafkaTP, int] = {}
        self._changed = asyncio.Event()
        self._closed = False
        #: Set when a task that keeps our right to partitions died (fail-stop).
        self.failure: MemberFailedError | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.consumer.start()
        # aiokafka's coordinator routine asserts when assign() replaces the assignment
        # while it is still looking the group coordinator up (seen with 100 consumers
        # starting at once). Resolve the coordinator before the first assign(): later
        # lookups then return without suspending, and the window is gone.
        coordinator = getattr(self.consumer, "_coordinator", None)
        if coordinator is not None and hasattr(coordinator, "ensure_coordinator_known"):
            await coordinator.ensure_coordinator_known()
        await self._reader.start()
        partition = await self._own_partition()
        # Only now that the topic is known to exist: a refresh may create what it names.
        track_when_idle(self.consumer, self._assignments_topic)  # until it holds something
        tp = KafkaTP(self._assignments_topic, partition)
        self._reader.assign([tp])
        await self._reader.seek_to_beginning(tp)
        # A restart first catches up with its own latest record, then announces itself.
        await self._read_until_current(tp)
        if self._pending is not None:
            await self._apply_pending()
        if self._presence_kind == "mqtt":
            connected = asyncio.Event()
            self._mqtt_task = self._watched("presence", self._mqtt_loop(connected))
            async with asyncio.timeout(30):
                await connected.wait()
        else:
            self._producer = AIOKafkaProducer(**self._kafka, linger_ms=0)
            await self._producer.start()
            track_when_idle(self._producer, self._heartbeat_topic)
            self._tasks.append(self._watched("heartbeats", self._heartbeat_loop()))
            await self._announce()
        self._tasks.append(self._watched("assignments", self._read_assignments()))
        self._tasks.append(self._watched("watchdog", self._watchdog()))
        if self._samples_topic is not None:
            self._sample_producer = AIOKafkaProducer(**self._kafka, linger_ms=20)
            await self._sample_producer.start()
            track_when_idle(self._sample_producer, self._samples_topic)
            self._tasks.append(asyncio.create_task(self._sample_loop(self._samples_topic)))

    async def close(self, *, leave: bool = True) -> None:
        """Stop. ``leave=True`` (default) is a clean leave: release everything, commit, and
        tell the controller so it reassigns at once. ``leave=False`` is a restart: the
        controller keeps this member's partitions for ``leave_grace``."""
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(*self._tasks)
        async with self._lock:
            if leave and self.assignment:
                self.consumer.pause(*self.assignment)
                await self._release(set(self.assignment))
                self._assign([])
                self.assignment = frozenset()
        if leave:
            with contextlib.suppress(Exception):
                await self._announce(state="leaving")
        if self._mqtt_client is not None:
            with contextlib.suppress(Exception):
                # Clearing presence: gone. Only a clean leave skips leave_grace, because
                # the "leaving" message above came first.
                await self._mqtt_client.publish(self._presence_topic, b"", qos=1, retain=True)
        if self._mqtt_task is not None:
            await cancel_and_wait(self._mqtt_task)  # a clean DISCONNECT: the Will is not sent
        if self._producer is not None:
            if leave:
                with contextlib.suppress(Exception):
                    await self._producer.send_and_wait(self._heartbeat_topic, None, key=self._key)
            await self._producer.stop()
        if self._sample_producer is not None:
            await self._sample_producer.stop()
        await self._reader.stop()
        await self.consumer.stop()

    async def abort(self) -> None:
        """Fault injection for demos and tests: die like a killed process. No commit, no
        leaving message, and the MQTT link is dropped without DISCONNECT, so the broker
        publishes the Will."""
        self._closed = True
        if self._mqtt_client is not None:
            drop_link(self._mqtt_client)
        await cancel_and_wait(*self._tasks, self._mqtt_task)
        for producer in (self._producer, self._sample_producer):
            if producer is not None:
                await producer.stop()
        await self._reader.stop()
        await self.consumer.stop()

    # ------------------------------------------------------------------ fail-stop

    def _watched(self, name: str, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task whose end, unless we are closing, is this member's fail-stop."""
        task = asyncio.create_task(work, name=f"ballast-{self.member}-{name}")
        task.add_done_callback(lambda t: self._task_ended(name, t))
        return task

    def _task_ended(self, name: str, task: asyncio.Task[None]) -> None:
        if self._closed:
            return
        cause = None if task.cancelled() else task.exception()
        self.fail_stop(name, cause or RuntimeError(f"the {name} task ended"))

    def fail_stop(self, task: str, cause: BaseException) -> None:
        """Stop fetching and acknowledging now; the next ``getmany`` releases everything
        and raises. Idempotent: the first cause is the one reported."""
        if self.failure is not None or self._closed:
            return
        self.failure = MemberFailedError(
            f"{self.group}/{self.member}: the {task} task died ({cause!r}); the member "
            "released its partitions and must be started again"
        )
        self.failure.__cause__ = cause
        held = self.consumer.assignment()
        if held:
            self.consumer.pause(*held)
        self._pending = None
        FAIL_STOPS.labels(task).inc()
        log.error(
            "member_failed", group=self.group, member=self.member, task=task, error=repr(cause)
        )
        self._changed.set()

    async def _let_go(self) -> None:
        """After a fail-stop: commit what was handed out (the application has processed
        it: it asked for more), hold nothing, and say so, so that the controller moves
        our partitions at once instead of after a handoff timeout."""
        if self.assignment:
            offsets = {tp: o for tp, o in self._consumed.items() if tp in self.assignment}
            if offsets:
                with contextlib.suppress(KafkaError, TimeoutError, OSError):
                    async with asyncio.timeout(FAIL_STOP_COMMIT_TIMEOUT):
                        await self.consumer.commit(offsets)
            self._consumed.clear()
            self._assign([])
            self.assignment = frozenset()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(FAIL_STOP_COMMIT_TIMEOUT):
                if self._mqtt_task is not None and self._mqtt_task.done():
                    await self._leave_over_new_link()  # the presence task is what died
                else:
                    await self._announce("leaving")

    async def _leave_over_new_link(self) -> None:
        """A clean leave on a short MQTT session of its own: the presence task's session
        ended with a DISCONNECT (no Will), so without this the retained presence would
        keep saying this member is here."""
        async with self._presence_link() as client:
            await client.publish(self._presence_topic, self._presence("leaving").encode(), qos=1)
            await client.publish(self._presence_topic, b"", qos=1, retain=True)

    async def __aenter__(self) -> ManagedConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ consuming

    async def getmany(
        self, timeout_ms: int = 1000, max_records: int | None = None
    ) -> dict[KafkaTP, list[ConsumerRecord]]:
        """Like ``AIOKafkaConsumer.getmany``; applies any new assignment first, and returns
        early (possibly empty, within ``CHANGE_CHECK_MS``) when one arrives while it waits,
        so that a grant or revoke takes effect at the next call instead of after a whole
        poll on a quiet topic."""
        reraise_swallowed_cancel()  # a poll loop cancelled inside the last call ends here
        async with self._lock:
            if self.failure is not None:
                await self._let_go()
                raise self.failure
            self._changed.clear()  # what arrives from here on ends this call's wait
            if self._pending is not None:
                await self._apply_pending()
            if self.assignment:
                batch = await self._fetch_until_changed(timeout_ms, max_records)
                batch = {tp: recs for tp, recs in batch.items() if tp in self.assignment}
                for tp, recs in batch.items():
                    if recs:
                        self._consumed[tp] = recs[-1].offset + 1
                return batch
        # Nothing assigned: wait for a change instead of spinning.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_ms / 1000):
                await self._changed.wait()
        return {}

    async def _fetch_until_changed(
        self, timeout_ms: int, max_records: int | None
    ) -> dict[KafkaTP, list[ConsumerRecord]]:
        """The data consumer's ``getmany`` in slices of at most ``CHANGE_CHECK_MS``, ending
        after the slice in which a new assignment arrived. Slices, not a race between the
        fetch and the change: aiokafka hands records out inside ``getmany``, so a fetch
        cancelled at the wrong moment would drop the records it had just taken."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            remaining = max(0, round((deadline - time.monotonic()) * 1000))
            batch: dict[KafkaTP, list[ConsumerRecord]] = await self.consumer.getmany(
                timeout_ms=min(remaining, CHANGE_CHECK_MS), max_records=max_records
            )
            if self.failure is not None:
                return {}  # fetched after the fail-stop: nobody may process it
            if batch or remaining <= CHANGE_CHECK_MS or self._changed.is_set():
                return batch

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for records in (await self.getmany()).values():
                for record in records:
                    yield record

    async def commit(self) -> None:
        """Commit everything returned so far on the partitions still assigned."""
        async with self._lock:
            offsets = {tp: o for tp, o in self._consumed.items() if tp in self.assignment}
            if offsets:
                await self.consumer.commit(offsets)

    # ------------------------------------------------------------------ assignment

    def _assign(self, partitions: list[KafkaTP]) -> None:
        """``assign()``; holding nothing, the consumer's metadata refreshes still ask
        about one topic, not the whole cluster (``metadata_scope``)."""
        self.consumer.assign(partitions)
        track_when_idle(self.consumer, self._assignments_topic)

    async def _apply_pending(self) -> None:
        rec = self._pending
        assert rec is not None
        self._pending = None
        if self.failure is not None:
            return
        target = set(rec.partitions)
        revoked = set(self.assignment) - target
        added = target - set(self.assignment)
        if revoked:
            self.consumer.pause(*revoked)  # stop fetching; still assigned so commits work
            await self._release(revoked)
        self._assign(sorted(target, key=_tp_key))
        # assign() resets every position to the committed offset; partitions we keep go on
        # from what was already handed out, new ones start from their commits.
        for tp in target - added:
            if tp in self._consumed:
                self.consumer.seek(tp, self._consumed[tp])
        self.assignment = frozenset(target)
        self.generation = rec.generation
        if added and self._on_assigned:
            await _call(self._on_assigned, added)
        log.info(
            "assignment_applied",
            group=self.group,
            member=self.member,
            generation=rec.generation,
            revoked=len(revoked),
            added=len(added),
            held=len(target),
        )
        if self._mqtt_client is not None or self._producer is not None:
            await self._announce()  # the acknowledgement

    async def _release(self, revoked: set[KafkaTP]) -> None:
        if self._on_revoked:
            await _call(self._on_revoked, revoked)
        offsets = {tp: self._consumed.pop(tp) for tp in revoked if tp in self._consumed}
        if offsets:
            await self.consumer.commit(offsets)

    async def _own_partition(self) -> int:
        """Our key's partition of the assignments topic, once the topic exists. Asked
        about by name without creating it (``topic_metadata``): on Kafka a client's
        bootstrap learns no topic, and ``topics()`` would read the whole cluster's
        metadata without keeping it."""
        topic = self._assignments_topic
        deadline = time.monotonic() + 30
        while True:
            count = (await topic_metadata(self._reader, [topic])).counts.get(topic)
            if count:
                return assignments_partition(self._key, count)
            if time.monotonic() > deadline:
                raise TimeoutError(f"assignments topic {topic!r} not found")
            await asyncio.sleep(0.2)

    async def _read_until_current(self, tp: KafkaTP) -> None:
        end = (await self._reader.end_offsets([tp]))[tp]
        while True:
            batch = await self._reader.getmany(tp, timeout_ms=200)
            for msg in batch.get(tp, []):
                self._consider(msg)
            position = await self._reader.position(tp)
            if position >= max(end, self._reader.highwater(tp) or 0) and not batch:
                return

    async def _read_assignments(self) -> None:
        async for msg in self._reader:
            self._consider(msg)

    def _consider(self, msg: ConsumerRecord) -> None:
        if msg.key not in (self._key, self._fence_key):
            return
        entry = log_entry(msg, self._invalid_record, self._verifier)
        if entry is None or entry.group != self.group:
            return
        verdict = self._view.add(entry)
        if verdict is Verdict.FENCED:
            log.warning(
                "fenced_record_ignored", member=self.member, offset=msg.offset, current=self.epoch
            )
        if isinstance(entry, LoggedFence):
            self.epoch = max(self.epoch, entry.epoch)
        if verdict is not Verdict.CURRENT or not isinstance(entry, LoggedRecord):
            return
        epoch, generation, _ = self._view.order[(self.group, self.member)]
        self.epoch = max(self.epoch, epoch)
        rec = entry.record
        if rec is not None and rec.issued_to(self._instance):
            grant = _Grant(frozenset(KafkaTP(t, p) for t, p in rec.partitions), generation)
        else:
            # Our tombstone, or a grant issued to another process under our member id (our
            # predecessor's, until the controller has seen us): hold nothing, ack nothing.
            grant = _Grant(frozenset(), self.generation)
        self._pending = grant
        self._pending_since = time.monotonic()
        self._changed.set()

    def _invalid_record(self, why: str) -> None:
        INVALID_RECORDS.labels("assignment").inc()
        log.warning("invalid_assignment_record", member=self.member, reason=why)

    async def _watchdog(self) -> None:
        """Apply a pending change if the application has not polled for revoke_timeout."""
        while True:
            reraise_swallowed_cancel()
            await asyncio.sleep(min(0.5, self._revoke_timeout / 2))
            if (
                self._pending is not None
                and time.monotonic() - self._pending_since >= self._revoke_timeout
            ):
                async with self._lock:
                    if self._pending is not None:
                        log.warning("applied_without_poll", member=self.member)
                        await self._apply_pending()

    # ------------------------------------------------------------------ presence

    def _presence(self, state: Literal["active", "leaving"]) -> Presence:
        lag = None
        if self._report_lag and state == "active":
            lag = [
                (tp.topic, tp.partition, max(0, high - done)) for tp, high, done in self._progress()
            ]
        return Presence(
            group=self.group,
            member=self.member,
            topics=self.topics,
            instance=self._instance,
            state=state,
            rack=self._rack,
            capacity=self._capacity,
            generation=self.generation,
            partitions=sorted((tp.topic, tp.partition) for tp in self.assignment),
            lag=lag,
            sent_at=time.time(),
        )

    async def _announce(self, state: Literal["active", "leaving"] = "active") -> None:
        """Presence, which is also the acknowledgement; after a fail-stop only "leaving"."""
        body = self._presence("leaving" if self.failure is not None else state).encode()
        if self._mqtt_client is not None:
            # Disconnected: _mqtt_loop reconnects and announces the current state.
            with contextlib.suppress(aiomqtt.MqttError):
                await self._mqtt_client.publish(self._presence_topic, body, qos=1, retain=True)
        elif self._producer is not None:
            await self._producer.send_and_wait(self._heartbeat_topic, body, key=self._key)

    def _presence_link(self) -> aiomqtt.Client:
        """A session on the member's presence topic, with the Will that clears it."""
        host, port, keepalive = self._mqtt
        return member_client(
            host,
            port,
            f"ballast-{self.group}-{self.member}",
            self._presence_topic,
            keepalive,
            auth=self._mqtt_auth,
        )

    async def _mqtt_loop(self, connected: asyncio.Event) -> None:
        """Keep the MQTT session (with its Will) up; announce again after every reconnect,
        since a restarted broker may have lost the retained presence."""
        backoff = 0.2
        while True:
            try:
                async with self._presence_link() as client:
                    self._mqtt_client = client
                    await self._announce()
                    reraise_swallowed_cancel()  # or it would wait for messages forever
                    connected.set()
                    backoff = 0.2
                    async for _ in client.messages:  # returns/raises when the link drops
                        pass
            except aiomqtt.MqttError as exc:
                log.warning(
                    "mqtt_reconnecting", member=self.member, error=str(exc), retry_in=backoff
                )
            self._mqtt_client = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def offset_samples(self, now: float) -> list[OffsetSample]:
        """Self-reports for the Spark lag job: for each held partition, the position this
        member has processed up to (as ``committed``) and the log end its last fetch saw."""
        return [
            OffsetSample(
                group=self.group,
                topic=tp.topic,
                partition=tp.partition,
                committed=min(done, high),
                log_end=high,
                sampled_at=now,
                source="client",
            )
            for tp, high, done in self._progress()
        ]

    def _progress(self) -> list[tuple[KafkaTP, int, int]]:
        """Held partitions with a known log end (from the last fetch) and a processed
        position: (partition, log end, next offset to process)."""
        out = []
        for tp in sorted(self.assignment, key=_tp_key):
            high, done = self.consumer.highwater(tp), self._consumed.get(tp)
            if high is not None and done is not None:
                out.append((tp, high, done))
        return out

    async def _sample_loop(self, topic: str) -> None:
        assert self._sample_producer is not None
        while True:
            await asyncio.sleep(self._sample_interval)
            for s in self.offset_samples(time.time()):
                key = partition_key(s.group, s.topic, s.partition)
                with contextlib.suppress(KafkaError):  # a sample lost is a sample late
                    await self._sample_producer.send(topic, s.encode(), key=key)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            await self._announce()


def _tp_key(tp: KafkaTP) -> tuple[str, int]:
    return (tp.topic, tp.partition)


async def _call(callback: Callback, partitions: set[KafkaTP]) -> None:
    result = callback(partitions)
    if inspect.isawaitable(result):
        await result
