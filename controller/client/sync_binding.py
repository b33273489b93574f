"""What the synchronous bindings (confluent-kafka, kafka-python) share around their
``SyncMember``: the properties an application reads, presence chosen by
``PresenceOptions``, the constructor's settings and the lifecycle. A binding adds its
library's poll calls and ``_clients``: its consumer, its reader of the assignments topic
and a ``HeartbeatSender`` made of its producer."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, NamedTuple, Protocol, Self, TypeVar

from controller import logs
from controller.client.departure import HANDOFF_TIMEOUT
from controller.client.failure import MemberFailedError
from controller.client.grants import Partition
from controller.client.identity import MemberIdentity, PresenceOptions
from controller.client.progress import offset_samples
from controller.client.sync_member import Callback, DataClient, LogReader, SyncMember
from controller.client.sync_presence import HeartbeatLink, MqttLink, PresenceLink
from controller.wire.records import OffsetSample, partition_key
from controller.wire.signing import Header, VerifyKeys, verifier_of

log = logs.get("ballast.client")

R = TypeVar("R")


class HeartbeatSender(Protocol):
    def send(
        self, topic: str, key: bytes, value: bytes | None, headers: Sequence[Header] = ()
    ) -> None:
        """Deliver one record before returning, or raise."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What a binding needs to make its library's clients."""

    identity: MemberIdentity
    bootstrap_servers: str
    #: Settings in the library's own names for every client (TLS, SASL).
    kafka_config: Mapping[str, Any]
    #: More for the consumer of the member's topics only.
    consumer_config: Mapping[str, Any]
    #: The group id the data consumer commits to.
    commit_group: str
    auto_offset_reset: Literal["earliest", "latest"]


class Clients(NamedTuple, Generic[R]):
    data: DataClient[R]
    reader: LogReader
    #: Makes the heartbeat sender, only when presence goes over Kafka.
    heartbeats: Callable[[], HeartbeatSender]


class SyncBinding(ABC, Generic[R]):
    """A binding is this class and ``_clients``: what its library brings."""

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
        revoke_timeout: float = 5.0,
        kafka_config: Mapping[str, Any] | None = None,
        consumer_config: Mapping[str, Any] | None = None,
        verify_key: VerifyKeys | None = None,
        report_lag: bool = False,
        offset_samples_topic: str | None = None,
        sample_interval: float = 5.0,
    ) -> None:
        """``kafka_config``: the client library's settings (its own names) for every
        client of this member (TLS, SASL); ``consumer_config``: more for the consumer of
        ``topics`` only. ``commit_group``: the group id its commits go to (default
        ``group``). ``verify_key``: act only on records the controller signed (a public key file, or
        several while the controller's key is replaced).
        ``report_lag``: put each held partition's lag in presence; ``offset_samples_topic``:
        send offset samples for the Spark lag job there every ``sample_interval`` seconds.
        A bad name, rack or capacity raises ``ValueError`` before anything connects."""
        verifier = verifier_of(verify_key)
        identity = MemberIdentity.checked(
            type(self).__name__,
            group,
            member,
            topics,
            rack=rack,
            capacity=capacity,
            verifier=verifier,
        )
        clients = self._clients(
            ClientSettings(
                identity,
                bootstrap_servers,
                kafka_config or {},
                consumer_config or {},
                commit_group or group,
                auto_offset_reset,
            )
        )
        self._member = SyncMember[R](
            identity,
            clients.data,
            clients.reader,
            assignments_topic=assignments_topic,
            revoke_timeout=revoke_timeout,
            verifier=verifier,
            on_revoked=on_partitions_revoked,
            on_assigned=on_partitions_assigned,
            report_lag=report_lag,
        )
        self._options = presence or PresenceOptions()
        self._make_sender = clients.heartbeats
        self._sender: HeartbeatSender | None = None
        self._samples_to = offset_samples_topic
        self._sample_interval = sample_interval
        self._sampler: _Sampler | None = None

    @abstractmethod
    def _clients(self, settings: ClientSettings) -> Clients[R]:
        """The library's consumer of the member's topics, its reader of the assignments
        topic, and its heartbeat sender."""

    @property
    def group(self) -> str:
        return self._member.identity.group

    @property
    def member(self) -> str:
        return self._member.identity.member

    @property
    def assignment(self) -> frozenset[Partition]:
        """What this member holds: ``(topic, partition)`` pairs."""
        return self._member.holding.assignment

    @property
    def generation(self) -> int:
        """The generation of the last assignment record applied."""
        return self._member.holding.generation

    @property
    def epoch(self) -> int:
        """The highest controller epoch seen for the group."""
        return self._member.epoch

    @property
    def failure(self) -> MemberFailedError | None:
        """Set when a part that keeps this member's right to its partitions died."""
        return self._member.failure

    def start(self) -> None:
        m, o = self._member, self._options
        link: PresenceLink
        if o.via == "mqtt":
            link = MqttLink(self.group, self.member, o, m.make_presence)
        else:
            sender = self._sender = self._make_sender()
            link = HeartbeatLink(
                self.group,
                self.member,
                o,
                make=m.make_presence,
                send=lambda key, value, headers: sender.send(
                    o.heartbeat_topic, key, value, headers
                ),
                on_death=lambda exc: m.fail_stop("heartbeats", exc),
            )
        try:
            m.start(link)
        except BaseException:
            self._close_sender()  # the member closed its clients; nothing is left open
            raise
        if self._samples_to is not None:
            self._sampler = _Sampler(
                self._samples_to, self._sample_interval, self._make_sender(), self.offset_samples
            )

    def offset_samples(self, now: float) -> list[OffsetSample]:
        """Self-reports for the Spark lag job: for each held partition, how far it is
        processed and the log end its last fetch saw."""
        return offset_samples(self.group, self._member.progress(), now)

    def commit(self) -> None:
        """Commit, synchronously, everything returned so far on the partitions held."""
        self._member.commit()

    def hand_off(self, timeout: float = HANDOFF_TIMEOUT) -> None:
        """Leave without a gap: say ``draining`` and keep polling; the controller revokes
        each partition and grants it to another member. ``handed_off`` turns True once
        a record leaves this member holding nothing, or ``timeout`` seconds from now;
        then ``close()``. Safe in a signal handler."""
        self._member.hand_off(timeout)

    @property
    def handed_off(self) -> bool:
        """``hand_off()`` was called and nothing is left to read (or its time ran out)."""
        return self._member.handed_off

    def close(self, *, leave: bool = True) -> None:
        """``leave=True``: a clean leave (release, commit, the controller reassigns at
        once); ``leave=False``: a restart (the partitions wait for ``leave_grace``)."""
        self._stop_sampler()  # first: it reads the data client the member closes
        self._member.close(leave=leave)
        self._close_sender()

    def abort(self) -> None:
        """Fault injection: die like a killed process (no commit, no leave, the Will)."""
        self._stop_sampler()
        self._member.abort()
        self._close_sender()

    def _stop_sampler(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    def _close_sender(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()


class _Sampler:
    """A thread sending the member's offset samples every ``interval`` seconds, keyed by
    partition. A sample lost is a sample late: a failed send is logged and the round
    ends; the member's right to its partitions does not depend on it."""

    def __init__(
        self,
        topic: str,
        interval: float,
        sender: HeartbeatSender,
        samples: Callable[[float], list[OffsetSample]],
    ) -> None:
        self._topic, self._interval, self._sender, self._samples = topic, interval, sender, samples
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ballast-samples", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for s in self._samples(time.time()):
                try:
                    self._sender.send(
                        self._topic, partition_key(s.group, s.topic, s.partition), s.encode()
                    )
                except Exception as exc:  # the library's own errors, whatever its name
                    log.warning("offset_samples_not_sent", topic=self._topic, error=repr(exc))
                    break

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sender.close()
