"""Membership sources. Both produce the same two observations for the daemon:

* ``seen(presence)``: a valid presence message (join, update, ack or clean leave);
* ``gone(group, member, since)``: the member's presence ended without a clean leave;
  ``since`` is when it was last seen (monotonic clock), None when that is unknown (its
  presence vanished while we were disconnected).

MQTT: retained messages on ``<prefix>/<group>/members/<member>``; an empty retained message
(the member's Will, or its own clear) means gone. Kafka: heartbeats keyed
``<group>/<member>`` on a topic; silence for ``session_timeout`` means gone and a tombstone
is a clean leave.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiomqtt
from aiokafka import AIOKafkaConsumer

from controller import logs
from controller.adapters.connection import client_options
from controller.adapters.presence import MqttAuth, login_refused
from controller.config import Config, MqttSettings
from controller.runtime.health import Health
from controller.runtime.metrics import Metrics
from controller.tasks import reraise_swallowed_cancel
from controller.wire.member_keys import MemberKeys
from controller.wire.records import DecodeError, Presence, decode, split_key
from controller.wire.signing import KeyFileError, RawHeader

log = logs.get("ballast.membership")

#: False when the daemon refused the member (its group is full): it is not tracked.
Seen = Callable[[Presence], bool | None]
Gone = Callable[[str, str, float | None], None]


@dataclass
class Sink:
    seen: Seen
    gone: Gone
    groups: frozenset[str]


def mqtt_auth(m: MqttSettings) -> MqttAuth:
    """The daemon's MQTT credentials and TLS from its configuration."""
    tls = None
    if m.tls:
        tls = aiomqtt.TLSParameters(
            ca_certs=str(m.ca_file) if m.ca_file else None,
            certfile=str(m.cert_file) if m.cert_file else None,
            keyfile=str(m.key_file) if m.key_file else None,
        )
    password = m.password.get_secret_value() if m.password else None
    return MqttAuth(m.username, password, tls)


_THROTTLE = logs.Throttle()
#: How often, at most, the member keys directory is looked at for keys added or removed (s).
KEYS_REREAD = 10.0
#: A signed heartbeat whose sequence (the member's clock, ns) is older than this many
#: session timeouts is a replay: refused even before its member's first heartbeat since
#: the controller started (members beat every few seconds).
STALE_SESSIONS = 3


def invalid_input(metrics: Metrics, source: str, reason: str) -> None:
    """Rejected outside input: always counted; logged with what and where, at most a
    burst of lines per source a minute (the metric has the rest)."""
    metrics.invalid.labels(source).inc()
    held = _THROTTLE.allow(source)
    if held is not None:
        log.warning("invalid_message", source=source, reason=logs.clipped(reason), suppressed=held)


class MqttPresence:
    """Reads presence from MQTT, reconnecting with backoff.

    Retained messages are redelivered on every (re)subscribe. A member whose presence was
    cleared while we were disconnected is never redelivered, so after each resubscribe the
    members not heard from within ``resync`` seconds are reported gone.
    """

    def __init__(
        self,
        cfg: Config,
        sink: Sink,
        metrics: Metrics,
        health: Health | None = None,
        resync: float = 2.0,
        *,
        replica: str = "",
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        """``replica``: appended to ``mqtt.client_id``. A broker ends a session when
        another connects with its client id: replicas sharing one would take turns.
        ``on_refused``: told (and reading stops) when the broker refuses our login, which
        no retry can change."""
        self._on_refused = on_refused
        self._cfg = cfg
        self.identifier = f"{cfg.mqtt.client_id}-{replica}" if replica else cfg.mqtt.client_id
        self._sink = sink
        self._metrics = metrics
        self._health = health or Health(metrics)
        self._resync = resync
        self._live: set[tuple[str, str]] = set()
        self.connected = asyncio.Event()

    async def run(self) -> None:
        m = self._cfg.mqtt
        backoff = 0.2
        pattern = f"{m.topic_prefix}/+/members/+"
        while True:
            try:
                auth = mqtt_auth(m)
                async with aiomqtt.Client(
                    m.host,
                    m.port,
                    identifier=self.identifier,
                    keepalive=m.keepalive,
                    clean_session=True,
                    username=auth.username,
                    password=auth.password,
                    tls_params=auth.tls,
                ) as client:
                    # QoS 0: with a clean session, QoS 1 redelivers nothing a dropped
                    # link lost (the resync below covers that), yet costs a PUBACK per
                    # message and holds the broker to 20 unacknowledged ones in flight.
                    await client.subscribe(pattern, qos=0)
                    reraise_swallowed_cancel()  # or it would wait for messages forever
                    self._health.link("mqtt", True)
                    self.connected.set()
                    log.info("mqtt_connected", host=m.host, port=m.port)
                    backoff = 0.2
                    heard: set[tuple[str, str]] = set()
                    resync = asyncio.get_running_loop().call_later(self._resync, self._sweep, heard)
                    try:
                        async for message in client.messages:
                            key = self._handle(message.topic.value, bytes(message.payload or b""))
                            if key is not None:
                                heard.add(key)
                    finally:
                        resync.cancel()
            except aiomqtt.MqttError as exc:
                self._health.link("mqtt", False, str(exc))
                self.connected.clear()
                refused = login_refused(exc)
                if refused is not None and self._on_refused is not None:
                    self._on_refused(
                        f"the MQTT broker at {m.host}:{m.port} refused the controller's login "
                        f"({refused}): check mqtt.username, mqtt.password (or password_file) "
                        "and mqtt.tls"
                    )
                    return
                log.warning("mqtt_disconnected", error=str(exc), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _sweep(self, heard: set[tuple[str, str]]) -> None:
        for group, member in sorted(self._live - heard):
            self._live.discard((group, member))
            log.info("presence_lost_while_disconnected", group=group, member=member)
            self._sink.gone(group, member, None)

    def _handle(self, topic: str, payload: bytes) -> tuple[str, str] | None:
        parts = topic.split("/")
        if len(parts) != 4 or parts[2] != "members":
            invalid_input(self._metrics, "presence", f"{logs.clipped(topic)}: unexpected topic")
            return None
        _, group, _, member = parts
        if group not in self._sink.groups:
            return None  # another controller's group, or a retired one
        if not payload:
            self._live.discard((group, member))
            self._sink.gone(group, member, time.monotonic())
            return (group, member)
        try:
            p = decode(Presence, payload, logs.clipped(topic, 300))
        except DecodeError as exc:
            invalid_input(self._metrics, "presence", str(exc))
            return None
        if p.group != group or p.member != member:
            invalid_input(self._metrics, "presence", f"{topic}: body names {p.group}/{p.member}")
            return None
        if self._sink.seen(p) is False:
            return None
        if p.state == "leaving":
            self._live.discard((group, member))
        else:
            self._live.add((group, member))
        return (group, member)


class KafkaHeartbeats:
    """Reads heartbeats from a Kafka topic; expires members silent for session_timeout."""

    def __init__(
        self, cfg: Config, sink: Sink, metrics: Metrics, health: Health | None = None
    ) -> None:
        self._cfg = cfg
        self._sink = sink
        self._metrics = metrics
        self._health = health or Health(metrics)
        self._last: dict[tuple[str, str], float] = {}
        #: Admitted members' keys (None: heartbeats are not checked), read again when
        #: one is added or removed (looked at every ``KEYS_REREAD`` seconds at most).
        self._keys = cfg.membership.member_keys()
        self._keys_read = time.monotonic()
        #: The newest sequence each keyed member signed: only what is newer counts.
        self._sequences: dict[tuple[str, str], int] = {}
        if self._keys is None:
            log.warning(
                "heartbeat_identity_unchecked",
                detail="membership.member_keys_dir is unset: anyone who may write the "
                "heartbeat topic can join, acknowledge or leave for any member",
            )
        else:
            log.info("member_keys", members=len(self._keys))

    def expect(self, group: str, member: str) -> None:
        """A recovered member: alive until it stays silent for a session timeout."""
        self._last.setdefault((group, member), time.monotonic())

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(
            self._cfg.membership.heartbeat_topic,
            **client_options(self._cfg),
            client_id=f"{self._cfg.kafka.client_id}-heartbeats",
            enable_auto_commit=False,
            auto_offset_reset="latest",
        )
        await consumer.start()
        self._health.link("heartbeats", True)
        expiry = asyncio.create_task(self._expire_loop())
        try:
            async for msg in consumer:
                where = f"{msg.topic}[{msg.partition}]@{msg.offset}"
                self._handle(msg.key, msg.value, where, msg.headers)
        finally:
            expiry.cancel()
            self._health.link("heartbeats", False, "the heartbeat reader stopped")
            await consumer.stop()

    def _handle(
        self,
        key: bytes | None,
        value: bytes | None,
        source: str,
        headers: Sequence[RawHeader] = (),
    ) -> None:
        try:
            group, member = split_key(key, source)
        except DecodeError as exc:
            invalid_input(self._metrics, "heartbeat", str(exc))
            return
        if group not in self._sink.groups:
            return
        assert key is not None  # split_key refuses a missing key
        if not self._vouched(group, member, key, value, headers=headers, source=source):
            return
        if value is None:  # tombstone: clean leave
            self._last.pop((group, member), None)
            self._sink.seen(Presence(group=group, member=member, topics=[], state="leaving"))
            return
        try:
            p = decode(Presence, value, source)
        except DecodeError as exc:
            invalid_input(self._metrics, "heartbeat", str(exc))
            return
        if p.group != group or p.member != member:
            invalid_input(
                self._metrics,
                "heartbeat",
                f"{source}: key {group}/{member} but body {p.group}/{p.member}",
            )
            return
        if self._sink.seen(p) is False:
            return
        if p.state == "leaving":
            self._last.pop((group, member), None)
        else:
            self._last[(group, member)] = time.monotonic()

    def _vouched(
        self,
        group: str,
        member: str,
        key: bytes,
        value: bytes | None,
        *,
        headers: Sequence[RawHeader],
        source: str,
    ) -> bool:
        """Whether the member the key names wrote this heartbeat, after its last one."""
        if self._keys is None:
            return True
        if self._keys_read + KEYS_REREAD < time.monotonic():
            self._keys_read = time.monotonic()
            if self._keys.changed():
                try:
                    self._keys = MemberKeys.from_dir(self._keys.directory)
                    log.info("member_keys", members=len(self._keys))
                except KeyFileError as exc:  # keep the keys read before: one bad file
                    log.warning("member_keys_not_read", error=str(exc))
        sequence, problem = self._keys.vouch(member, key, value, headers, source)
        if problem is None and sequence is not None:
            oldest = time.time_ns() - round(
                STALE_SESSIONS * self._cfg.membership.session_timeout * 1e9
            )
            if sequence <= self._sequences.get((group, member), -1):
                problem = f"sequence {sequence} is not newer than the last heartbeat's: a replay"
            elif sequence < oldest:
                problem = (
                    f"sequence {sequence} is older than {STALE_SESSIONS} session timeouts: "
                    "a replay (or the member's clock is behind)"
                )
            else:
                self._sequences[(group, member)] = sequence
                return True
        invalid_input(self._metrics, "heartbeat", f"{source}: {problem}")
        return False

    async def _expire_loop(self) -> None:
        timeout = self._cfg.membership.session_timeout
        while True:
            await asyncio.sleep(min(1.0, timeout / 4))
            now = time.monotonic()
            for (group, member), last in sorted(self._last.items()):
                if now - last > timeout:
                    del self._last[(group, member)]
                    log.info("session_expired", group=group, member=member)
                    self._sink.gone(group, member, last)
