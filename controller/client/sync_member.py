"""A Ballast member for synchronous application code, whatever the Kafka client: the
binding supplies a ``DataClient`` (the consumer the application's records come from) and
a ``LogReader`` (its partition of the assignments topic); this class applies the rules.

Threads: a feed thread reads the member's assignment records (``GrantReader``), a
watchdog applies a pending change when the application has not polled for
``revoke_timeout``, and presence keeps its own (``sync_presence``). A change is applied
inside the application's next poll, as Kafka applies a rebalance: what earlier polls
returned has been processed, so a revoke commits it, lets the partitions go, and only
then is the generation acknowledged. When the feed or the watchdog dies, the member
fail-stops: nothing more is handed out, and the next poll commits what was, releases
everything, says it is leaving and raises ``MemberFailedError``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from controller import logs
from controller.client.departure import Departure
from controller.client.failure import MemberFailedError, member_failed
from controller.client.grants import Grant, GrantReader, Partition, RawRecord, topic_missing
from controller.client.holding import Holding
from controller.client.identity import MemberIdentity, State
from controller.client.progress import Progress, lag_report, progress_of
from controller.client.sync_presence import PresenceLink
from controller.wire.assignments import assignments_partition
from controller.wire.records import Presence
from controller.wire.signing import Verifier

log = logs.get("ballast.client")

R = TypeVar("R")

#: How long a new assignment may wait for the fetch slice in progress (s).
CHANGE_CHECK = 0.05
#: How long a member waits for the assignments topic to exist (s).
TOPIC_WAIT = 30.0
#: Empty reads (0.2 s each) in a row that end the catch-up short of the end offset.
CATCH_UP_IDLE_READS = 3

Callback = Callable[[set[Partition]], None]


class DataClient(Protocol[R]):
    """The binding's consumer of the application's topics, assigned by hand."""

    def fetch(
        self, timeout: float, max_records: int, held: frozenset[Partition]
    ) -> tuple[list[R], dict[Partition, int]]:
        """What to hand out, of ``held`` partitions only (and error events, as the
        library shows them), and per partition the offset after the last record handed
        out so far. Per batch, not per record: the binding knows its library's cheapest
        way (librdkafka keeps the application's positions itself)."""

    def add(self, partitions: Sequence[Partition]) -> None:
        """Start fetching these, each from its commit (or the reset policy); the
        partitions kept go on where they are."""

    def remove(self, partitions: Sequence[Partition]) -> None: ...
    def log_end(self, partition: Partition) -> int | None:
        """The log end the last fetch of ``partition`` saw (None: not known yet). Called
        from presence's and the sampler's threads."""

    def commit(self, offsets: Mapping[Partition, int]) -> None:
        """Synchronously: returns once the commit landed, or raises."""

    def close(self) -> None: ...


class LogReader(Protocol):
    """The binding's reader of one partition of the assignments topic, from its start."""

    def partition_count(self, topic: str) -> int | None: ...
    def open(self, topic: str, partition: int) -> None: ...
    def end_offset(self) -> int: ...
    def position(self) -> int: ...
    def read(self, timeout: float) -> list[RawRecord]: ...
    def close(self) -> None: ...


class SyncMember(Generic[R]):
    def __init__(
        self,
        identity: MemberIdentity,
        data: DataClient[R],
        reader: LogReader,
        *,
        assignments_topic: str,
        revoke_timeout: float,
        verifier: Verifier | None,
        on_revoked: Callback | None,
        on_assigned: Callback | None,
        report_lag: bool = False,
    ) -> None:
        self.identity = identity
        self._report_lag = report_lag
        self._data = data
        self._reader = reader
        self._topic = assignments_topic
        self._revoke_timeout = revoke_timeout
        self._on_revoked = on_revoked
        self._on_assigned = on_assigned
        self._grants = GrantReader(
            identity.group, identity.member, identity.instance, verifier=verifier
        )
        self.holding = Holding()
        self.presence: PresenceLink | None = None
        #: Held by whoever applies a change or fetches: the application's poll or the
        #: watchdog, never both.
        self._lock = threading.Lock()
        #: Guards what the feed thread hands over and the fail-stop.
        self._state = threading.Lock()
        self._pending: Grant | None = None
        self._pending_since = 0.0
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self.failure: MemberFailedError | None = None
        self._closed = False
        self._departure = Departure()

    @property
    def epoch(self) -> int:
        """The highest controller epoch seen for the group."""
        return self._grants.epoch

    # ------------------------------------------------------------------ lifecycle

    def start(self, presence: PresenceLink) -> None:
        """Catch up on the member's records, act on the latest, then announce and start
        the threads (a restart acts on its own record before it says it is here)."""
        try:
            self._open_own_partition()
            self._catch_up()
            with self._lock:
                self._apply_pending()
            self.presence = presence
            presence.start()
        except BaseException:
            self._close_clients()
            raise
        for name, work in (("assignments", self._follow), ("watchdog", self._watchdog)):
            thread = threading.Thread(
                target=self._watched, args=(name, work), name=f"ballast-{name}", daemon=True
            )
            thread.start()
            self._threads[name] = thread

    def _open_own_partition(self) -> None:
        deadline = time.monotonic() + TOPIC_WAIT
        while not (count := self._reader.partition_count(self._topic)):
            if time.monotonic() > deadline:
                raise topic_missing(self._topic, TOPIC_WAIT)
            time.sleep(0.2)
        self._reader.open(self._topic, assignments_partition(self._grants.key, count))

    def _catch_up(self) -> None:
        """Read to the end the partition had when we looked. A reader whose position
        stops short of it (a transaction's commit marker is an offset no client returns)
        has caught up once reads come back empty: acting on an older record is safe
        anyway (a grant issued to another process reads as holding nothing)."""
        end = self._reader.end_offset()
        idle = 0
        while self._reader.position() < end and idle < CATCH_UP_IDLE_READS:
            records = self._reader.read(0.2)
            for record in records:
                self._consider(record)
            idle = 0 if records else idle + 1

    def close(self, *, leave: bool) -> None:
        """``leave``: release everything, commit, and say so (the controller reassigns
        at once); otherwise a restart (the partitions wait ``leave_grace``). The feed
        thread, which touches nothing but the pending grant, is waited for last: its
        read may take a while to return, and the leave should not."""
        if self._closed:
            return
        self._stop_threads("watchdog")
        with self._lock:
            if leave and self.holding.assignment:
                self._release_all()
        if self.presence is not None:
            if leave:
                self._announce("leaving")
            self.presence.clear(leave=leave)
            self.presence.close()
        self._stop_threads()
        self._close_clients()

    def hand_off(self, timeout: float) -> None:
        """Say ``draining`` and read on until a record takes everything (``Departure``).
        The announcement goes from a thread of its own: this may run in a signal
        handler, which must not wait for a lock the interrupted poll holds."""
        if self._closed or not self._departure.request(timeout):
            return
        log.info("handoff_requested", group=self.identity.group, member=self.identity.member)
        threading.Thread(target=self._announce, name="ballast-handoff", daemon=True).start()
        self._changed.set()

    @property
    def handed_off(self) -> bool:
        return self._departure.done(bool(self.holding.assignment), self._pending is not None)

    def abort(self) -> None:
        """Fault injection: die like a killed process (no commit, no leave, the Will)."""
        self._stop_threads()
        if self.presence is not None:
            self.presence.drop()
        self._close_clients()

    def _stop_threads(self, *names: str) -> None:
        """Tell every thread to stop; wait for those named (all by default)."""
        self._closed = True
        self._stop.set()
        self._changed.set()
        for name, thread in self._threads.items():
            if (not names or name in names) and thread is not threading.current_thread():
                thread.join()

    def _close_clients(self) -> None:
        self._reader.close()
        self._data.close()

    # ------------------------------------------------------------------ consuming

    def poll(self, timeout: float, max_records: int) -> list[R]:
        """Apply a new assignment first; return what was fetched within ``timeout``, or
        earlier (possibly nothing) when an assignment arrives meanwhile."""
        with self._lock:
            if self.failure is not None:
                self._let_go()
                raise self.failure
            self._changed.clear()  # what arrives from here on ends this call's wait
            if self._pending is not None:
                self._apply_pending()
            if self.holding.assignment:
                return self._fetch_until_changed(timeout, max_records)
        self._changed.wait(timeout)  # nothing assigned: wait for a change, not spin
        return []

    def _fetch_until_changed(self, timeout: float, max_records: int) -> list[R]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            out, positions = self._data.fetch(
                min(remaining, CHANGE_CHECK), max_records, self.holding.assignment
            )
            if self.failure is not None:
                return []  # fetched after the fail-stop: nobody may process it
            self.holding.handed_out_up_to(positions)
            if out or remaining <= CHANGE_CHECK or self._changed.is_set():
                return out

    def commit(self) -> None:
        """Commit everything returned so far on the partitions still held."""
        with self._lock:
            offsets = self.holding.committable()
            if offsets:
                self._data.commit(offsets)

    # ------------------------------------------------------------------ applying

    def _consider(self, record: RawRecord) -> None:
        grant = self._grants.read(record)
        if grant is not None:
            with self._state:
                if self.failure is None:
                    self._pending = grant
                    self._pending_since = time.monotonic()
            self._changed.set()

    def _apply_pending(self) -> None:
        """With ``_lock`` held."""
        with self._state:
            grant, self._pending = self._pending, None
        if grant is None or self.failure is not None:
            return
        h = self.holding
        change = h.change(grant)
        if change.revoked:
            if self._on_revoked is not None:
                self._on_revoked(set(change.revoked))
            offsets = h.release(change.revoked)
            if offsets:
                self._data.commit(offsets)
            self._data.remove(sorted(change.revoked))
        if change.added:
            self._data.add(sorted(change.added))
        h.applied(change)
        if change.added and self._on_assigned is not None:
            self._on_assigned(set(change.added))
        log.info(
            "assignment_applied",
            group=self.identity.group,
            member=self.identity.member,
            generation=change.generation,
            revoked=len(change.revoked),
            added=len(change.added),
            held=len(change.target),
        )
        if self.presence is not None:
            self._announce()  # the acknowledgement

    def _release_all(self) -> None:
        held = self.holding.assignment
        if self._on_revoked is not None:
            self._on_revoked(set(held))
        offsets = self.holding.let_go()
        if offsets:
            self._data.commit(offsets)
        self._data.remove(sorted(held))

    def _let_go(self) -> None:
        """After a fail-stop: commit what was handed out (the application processed it:
        it asked for more), hold nothing, and say so, so that the controller moves the
        partitions at once instead of after a handoff timeout."""
        held = self.holding.assignment
        offsets = self.holding.let_go()
        try:
            if offsets:
                self._data.commit(offsets)
        except Exception as exc:
            log.warning("fail_stop_commit_failed", member=self.identity.member, error=repr(exc))
        if held:
            self._data.remove(sorted(held))
        try:
            self._announce("leaving")
        except Exception as exc:
            log.warning("fail_stop_leave_failed", member=self.identity.member, error=repr(exc))

    def _announce(self, state: State = "active") -> None:
        if self.presence is not None:
            self.presence.announce(state)

    def make_presence(self, state: State) -> Presence:
        """Presence, which is also the acknowledgement; after a fail-stop only
        "leaving". Called by the presence link at each announcement and reconnect."""
        held, generation = self.holding.held  # one read: other threads announce too
        state = "leaving" if self.failure is not None else self._departure.state(state)
        lag = None
        if self._report_lag and state == "active":
            lag = lag_report(self.progress(held))
        return self.identity.presence(state, generation, held, lag)

    def progress(self, held: frozenset[Partition] | None = None) -> list[Progress]:
        """How far each held partition is processed (for presence lag and samples)."""
        return progress_of(
            self.holding.assignment if held is None else held,
            dict(self.holding.consumed),  # a copy: the poll thread updates it
            self._data.log_end,
        )

    # ------------------------------------------------------------------ threads

    def _follow(self) -> None:
        while not self._stop.is_set():
            for record in self._reader.read(0.5):
                self._consider(record)

    def _watchdog(self) -> None:
        while not self._stop.wait(min(0.5, self._revoke_timeout / 2)):
            if (
                self._pending is not None
                and time.monotonic() - self._pending_since >= self._revoke_timeout
            ):
                with self._lock:
                    if self._pending is not None and not self._stop.is_set():
                        log.warning("applied_without_poll", member=self.identity.member)
                        self._apply_pending()

    def _watched(self, name: str, work: Callable[[], None]) -> None:
        """A thread whose end, unless the member is closing, is its fail-stop."""
        try:
            work()
        except BaseException as exc:
            self.fail_stop(name, exc)
        else:
            self.fail_stop(name, RuntimeError(f"the {name} thread ended"))

    def fail_stop(self, task: str, cause: BaseException) -> None:
        """Hand nothing more out and acknowledge nothing; the next poll releases
        everything and raises. Idempotent: the first cause is the one reported."""
        with self._state:
            if self.failure is not None or self._closed:
                return
            self.failure = member_failed(self.identity.group, self.identity.member, task, cause)
            self._pending = None
        self._changed.set()
