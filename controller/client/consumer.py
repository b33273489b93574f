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

The parts: an ``AssignmentFeed`` reads the member's records, an ``Announcer`` keeps its
presence (``PresenceOptions``), a ``SampleReporter`` sends its offset samples; this
class applies what the feed grants to the data consumer and watches the tasks.

Fail-stop: the tasks that keep this member's right to its partitions (the assignment
reader, presence, the revoke watchdog) are watched. When one dies, the consumer stops
fetching at once, stops acknowledging, and the next ``getmany`` (or ``async for``)
commits what it had handed out, releases everything, tells the controller it is leaving
and raises ``MemberFailedError``. It then holds nothing; make a new ``ManagedConsumer``.
With ``verify_key`` (the controller's public key, ``ballast keys generate``) it acts only
on assignment records the controller signed.

    async with ManagedConsumer("orders-fleet", "pod-7", ["orders"],
                               bootstrap_servers="kafka:9092",
                               presence=PresenceOptions(mqtt_host="mqtt")) as consumer:
        async for record in consumer:
            handle(record)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, ConsumerRecord
from aiokafka import TopicPartition as KafkaTP
from aiokafka.errors import KafkaConnectionError, KafkaError

from controller import logs
from controller.adapters.kafka_login import refused_login
from controller.adapters.metadata_scope import track_when_idle
from controller.client.announcer import Announcer
from controller.client.assignment_feed import AssignmentFeed
from controller.client.departure import HANDOFF_TIMEOUT, Departure
from controller.client.failure import (
    FAIL_STOP_COMMIT_TIMEOUT,
    MemberFailedError,
    member_failed,
)
from controller.client.grants import Partition
from controller.client.holding import Holding
from controller.client.identity import MemberIdentity, PresenceOptions, State
from controller.client.progress import Progress, lag_report, offset_samples, progress_of
from controller.client.sample_reporter import SampleReporter
from controller.errors import CredentialsError
from controller.tasks import cancel_and_wait, reraise_swallowed_cancel
from controller.wire.records import OffsetSample, Presence
from controller.wire.signing import VerifyKeys, verifier_of

log = logs.get("ballast.client")

Callback = Callable[[set[KafkaTP]], Awaitable[None] | None]

#: How long a new assignment may wait for the ``getmany`` slice in progress (ms).
CHANGE_CHECK_MS = 50
#: How long a start waits for the MQTT broker to take the member's session (s).
MQTT_LINK_TIMEOUT = 30.0


class ManagedConsumer:
    def __init__(
        self,
        group: str,
        member: str,
        topics: Iterable[str],
        *,
        bootstrap_servers: str,
        presence: PresenceOptions | None = None,
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
        kafka_security: Mapping[str, Any] | None = None,
        assignments_fetch_max_wait_ms: int = 500,
        verify_key: VerifyKeys | None = None,
        **consumer_options: Any,
    ) -> None:
        verifier = verifier_of(verify_key)
        self._identity = MemberIdentity.checked(
            "ManagedConsumer",
            group,
            member,
            topics,
            rack=rack,
            capacity=capacity,
            verifier=verifier,
        )
        self.group = group
        self.member = member
        self.topics = list(self._identity.topics)
        #: TLS/SASL settings (aiokafka names) for every Kafka client of this member.
        kafka = {"bootstrap_servers": bootstrap_servers, **(kafka_security or {})}
        self._kafka = kafka
        self._on_revoked = on_partitions_revoked
        self._on_assigned = on_partitions_assigned
        self._report_lag = report_lag
        self._revoke_timeout = revoke_timeout
        self._feed = AssignmentFeed(
            group,
            member,
            self._identity.instance,
            assignments_topic,
            kafka,
            fetch_max_wait_ms=assignments_fetch_max_wait_ms,
            verifier=verifier,
        )
        self._announcer = Announcer(
            group, member, presence or PresenceOptions(), kafka, self._presence
        )
        self._reporter = (
            None
            if offset_samples_topic is None
            else SampleReporter(offset_samples_topic, sample_interval, kafka, self.offset_samples)
        )
        if rack is not None:  # one rack setting: fetches from the replica in its zone too
            consumer_options.setdefault("client_rack", rack)
        self.consumer = AIOKafkaConsumer(
            **kafka,
            group_id=commit_group or group,  # commits only: it never subscribes
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            **consumer_options,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._mqtt_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._holding = Holding()
        #: What ``_holding`` holds, as aiokafka's partitions.
        self.assignment: frozenset[KafkaTP] = frozenset()
        self._changed = self._feed.changed
        self._closed = False
        self._departure = Departure()
        self._departing: asyncio.Task[None] | None = None
        #: Set when a task that keeps our right to partitions died (fail-stop).
        self.failure: MemberFailedError | None = None

    @property
    def generation(self) -> int:
        """The generation of the last record applied."""
        return self._holding.generation

    @property
    def epoch(self) -> int:
        """The highest controller epoch seen for the group."""
        return self._feed.epoch

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, apply this member's latest record and announce it. A broker that
        refuses our credentials raises ``CredentialsError`` at once, one that takes no
        connection ``UnreachableError``; either way every client is closed again."""
        try:
            await self._start()
        except KafkaConnectionError as exc:
            await self.abort()
            why = await refused_login(self._kafka)
            if why is None:
                raise
            raise CredentialsError(
                f"member {self.member!r}: Kafka at {self._kafka['bootstrap_servers']}: {why}: "
                "check kafka_security (sasl_plain_username, sasl_plain_password, ssl_context)"
            ) from exc
        except BaseException:
            await self.abort()
            raise

    async def _link(self) -> None:
        """The MQTT session, watched (fail-stop) once it is up."""
        connected = asyncio.Event()
        name = f"ballast-{self.member}-presence"
        task = self._mqtt_task = asyncio.create_task(
            self._announcer.keep_session(connected), name=name
        )
        up = asyncio.ensure_future(connected.wait())
        try:
            await asyncio.wait(
                {up, task}, timeout=MQTT_LINK_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            up.cancel()
        if not connected.is_set():
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
            raise self._announcer.unreachable(MQTT_LINK_TIMEOUT)
        task.add_done_callback(lambda t: self._task_ended("presence", t))

    async def _start(self) -> None:
        await self._feed.start()
        # Only now that the topic is known to exist (a refresh may create what it names),
        # and before the start, whose coordinator lookup may outlast a refresh period.
        track_when_idle(self.consumer, self._feed.topic)  # until it holds something
        await self.consumer.start()
        # aiokafka's coordinator routine asserts when assign() replaces the assignment
        # while it is still looking the group coordinator up (seen with 100 consumers
        # starting at once). Resolve the coordinator before the first assign(): later
        # lookups then return without suspending, and the window is gone.
        coordinator = getattr(self.consumer, "_coordinator", None)
        if coordinator is not None and hasattr(coordinator, "ensure_coordinator_known"):
            await coordinator.ensure_coordinator_known()
        await self._feed.catch_up()  # a restart first acts on its own latest record
        if self._feed.pending is not None:
            await self._apply_pending()
        if self._announcer.options.via == "mqtt":
            await self._link()
        else:
            await self._announcer.start_heartbeats()
            self._tasks.append(self._watched("heartbeats", self._announcer.heartbeats()))
        self._tasks.append(self._watched("assignments", self._feed.follow()))
        self._tasks.append(self._watched("watchdog", self._watchdog()))
        if self._reporter is not None:
            await self._reporter.start()
            self._tasks.append(asyncio.create_task(self._reporter.run()))

    def hand_off(self, timeout: float = HANDOFF_TIMEOUT) -> None:
        """Leave without a gap: say ``draining`` and keep reading while the controller
        revokes each partition and grants it to another member. Iteration (``async
        for``) ends once a record leaves this member holding nothing, or ``timeout``
        seconds from now; ``handed_off`` says so to a ``getmany`` loop. Then ``close()``.
        A plain callback, for ``loop.add_signal_handler(signal.SIGTERM, ...)``."""
        if self._closed or not self._departure.request(timeout):
            return
        log.info("handoff_requested", group=self.group, member=self.member, timeout=timeout)
        self._departing = asyncio.get_running_loop().create_task(self._announce())
        self._changed.set()  # a getmany waiting with nothing held returns

    @property
    def handed_off(self) -> bool:
        """``hand_off()`` was called and this member has nothing left to read (or its
        time ran out)."""
        return self._departure.done(bool(self.assignment), self._feed.pending is not None)

    async def close(self, *, leave: bool = True) -> None:
        """Stop. ``leave=True`` (default) is a clean leave: release everything, commit, and
        tell the controller so it reassigns at once. ``leave=False`` is a restart: the
        controller keeps this member's partitions for ``leave_grace``."""
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(*self._tasks, self._departing)
        async with self._lock:
            if leave and self.assignment:
                self.consumer.pause(*self.assignment)
                await self._release(self._holding.assignment)
                self._hold_nothing()
        if leave:
            with contextlib.suppress(Exception):
                await self._announce(state="leaving")
        await self._announcer.clear(leave=leave)
        if self._mqtt_task is not None:
            await cancel_and_wait(self._mqtt_task)  # a clean DISCONNECT: the Will is not sent
        await self._stop_clients()

    async def abort(self) -> None:
        """Fault injection for demos and tests: die like a killed process. No commit, no
        leaving message, and the MQTT link is dropped without DISCONNECT, so the broker
        publishes the Will."""
        self._closed = True
        self._announcer.drop()
        await cancel_and_wait(*self._tasks, self._mqtt_task)
        await self._stop_clients()

    async def _stop_clients(self) -> None:
        await self._announcer.stop()
        if self._reporter is not None:
            await self._reporter.stop()
        await self._feed.stop()
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
        self.failure = member_failed(self.group, self.member, task, cause)
        held = self.consumer.assignment()
        if held:
            self.consumer.pause(*held)
        self._feed.pending = None
        self._changed.set()

    async def _let_go(self) -> None:
        """After a fail-stop: commit what was handed out (the application has processed
        it: it asked for more), hold nothing, and say so, so that the controller moves
        our partitions at once instead of after a handoff timeout."""
        if self.assignment:
            offsets = self._holding.let_go()
            if offsets:
                with contextlib.suppress(KafkaError, TimeoutError, OSError):
                    async with asyncio.timeout(FAIL_STOP_COMMIT_TIMEOUT):
                        await self.consumer.commit(_kafka_offsets(offsets))
            self._hold_nothing()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(FAIL_STOP_COMMIT_TIMEOUT):
                if self._mqtt_task is not None and self._mqtt_task.done():
                    await self._announcer.leave_over_new_link()  # the presence task died
                else:
                    await self._announce("leaving")

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
            if self._feed.pending is not None:
                await self._apply_pending()
            if self.assignment:
                batch = await self._fetch_until_changed(timeout_ms, max_records)
                batch = {tp: recs for tp, recs in batch.items() if tp in self.assignment}
                for tp, recs in batch.items():
                    if recs:
                        self._holding.handed_out(tp, recs[-1].offset)
                return batch
        # Nothing assigned: wait for a change instead of spinning.
        reraise_swallowed_cancel()  # e.g. by the acknowledgement of a revoke of everything
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
            reraise_swallowed_cancel()  # e.g. by the acknowledgement of what was applied
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
        while not self._closed and not self.handed_off:
            for records in (await self.getmany()).values():
                for record in records:
                    yield record

    async def commit(self) -> None:
        """Commit everything returned so far on the partitions still assigned."""
        async with self._lock:
            offsets = self._holding.committable()
            if offsets:
                await self.consumer.commit(_kafka_offsets(offsets))

    # ------------------------------------------------------------------ assignment

    def _assign(self, partitions: list[KafkaTP]) -> None:
        """``assign()``; holding nothing, the consumer's metadata refreshes still ask
        about one topic, not the whole cluster (``metadata_scope``)."""
        self.consumer.assign(partitions)
        track_when_idle(self.consumer, self._feed.topic)

    def _hold_nothing(self) -> None:
        self._holding.let_go()
        self._assign([])
        self.assignment = frozenset()

    async def _apply_pending(self) -> None:
        grant = self._feed.take()
        if grant is None or self.failure is not None:
            return
        change = self._holding.change(grant)
        if change.revoked:
            # stop fetching; still assigned so commits work
            self.consumer.pause(*_kafka_tps(change.revoked))
            await self._release(change.revoked)
        self._assign(sorted(_kafka_tps(change.target)))
        # assign() resets every position to the committed offset; partitions we keep go on
        # from what was already handed out, new ones start from their commits.
        for tp, offset in _kafka_offsets(self._holding.resume_at(change)).items():
            self.consumer.seek(tp, offset)
        self._holding.applied(change)
        self.assignment = frozenset(_kafka_tps(change.target))
        if change.added and self._on_assigned:
            await _call(self._on_assigned, _kafka_tps(change.added))
        log.info(
            "assignment_applied",
            group=self.group,
            member=self.member,
            generation=change.generation,
            revoked=len(change.revoked),
            added=len(change.added),
            held=len(change.target),
        )
        if self._announcer.linked:
            await self._announce()  # the acknowledgement

    async def _release(self, revoked: frozenset[Partition]) -> None:
        if self._on_revoked:
            await _call(self._on_revoked, _kafka_tps(revoked))
        offsets = self._holding.release(revoked)
        if offsets:
            await self.consumer.commit(_kafka_offsets(offsets))

    async def _watchdog(self) -> None:
        """Apply a pending change if the application has not polled for revoke_timeout."""
        while True:
            reraise_swallowed_cancel()
            await asyncio.sleep(min(0.5, self._revoke_timeout / 2))
            feed = self._feed
            if (
                feed.pending is not None
                and time.monotonic() - feed.pending_since >= self._revoke_timeout
            ):
                async with self._lock:
                    if feed.pending is not None:
                        log.warning("applied_without_poll", member=self.member)
                        await self._apply_pending()

    # ------------------------------------------------------------------ presence

    def _presence(self, state: State) -> Presence:
        state = self._departure.state(state)
        lag = None
        if self._report_lag and state == "active":
            lag = lag_report(self._progress())
        return self._identity.presence(
            state, self.generation, ((tp.topic, tp.partition) for tp in self.assignment), lag
        )

    async def _announce(self, state: State = "active") -> None:
        """Presence, which is also the acknowledgement; after a fail-stop only "leaving"."""
        await self._announcer.announce("leaving" if self.failure is not None else state)

    def offset_samples(self, now: float) -> list[OffsetSample]:
        """Self-reports for the Spark lag job: for each held partition, the position this
        member has processed up to (as ``committed``) and the log end its last fetch saw."""
        return offset_samples(self.group, self._progress(), now)

    def _progress(self) -> list[Progress]:
        return progress_of(
            ((tp.topic, tp.partition) for tp in self.assignment),
            self._holding.consumed,
            lambda p: self.consumer.highwater(KafkaTP(*p)),
        )


def _kafka_tps(partitions: Iterable[Partition]) -> set[KafkaTP]:
    return {KafkaTP(t, p) for t, p in partitions}


def _kafka_offsets(offsets: Mapping[Partition, int]) -> dict[KafkaTP, int]:
    return {KafkaTP(t, p): o for (t, p), o in offsets.items()}


async def _call(callback: Callback, partitions: set[KafkaTP]) -> None:
    result = callback(partitions)
    if inspect.isawaitable(result):
        await result
