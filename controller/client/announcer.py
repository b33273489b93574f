"""How a member tells the controller it is here, what it holds and which generation it
acknowledges: a retained MQTT message with a Will that clears it, or heartbeats on a
Kafka topic. ``PresenceOptions`` says which and where; ``Announcer`` keeps the link
(aiokafka and aiomqtt).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import aiomqtt
from aiokafka import AIOKafkaProducer

from controller import logs
from controller.adapters.metadata_scope import track_when_idle
from controller.adapters.presence import drop_link, login_refused, member_client
from controller.client.identity import PresenceOptions, State
from controller.errors import CredentialsError, UnreachableError
from controller.tasks import reraise_swallowed_cancel
from controller.wire.records import Presence, assignment_key, presence_topic

log = logs.get("ballast.client")


class Announcer:
    def __init__(
        self,
        group: str,
        member: str,
        options: PresenceOptions,
        kafka: Mapping[str, Any],
        presence: Callable[[State], Presence],
    ) -> None:
        """``presence``: the member's presence as it stands, made at each announcement."""
        self.options = options
        self._member = member
        self._identifier = f"ballast-{group}-{member}"
        self._topic = presence_topic(options.mqtt_prefix, group, member)
        self._key = assignment_key(group, member)
        self._kafka = kafka
        self._presence = presence
        self._mqtt: aiomqtt.Client | None = None
        self._producer: AIOKafkaProducer | None = None
        self._signer = options.heartbeat_signer()
        self._sending = asyncio.Lock()

    @property
    def linked(self) -> bool:
        """Is there a link to announce on (an acknowledgement can go out)?"""
        return self._mqtt is not None or self._producer is not None

    async def start_heartbeats(self) -> None:
        """For ``via="kafka"``: the producer, and a first heartbeat."""
        self._producer = AIOKafkaProducer(**self._kafka, linger_ms=0)
        await self._producer.start()
        track_when_idle(self._producer, self.options.heartbeat_topic)
        await self.announce()

    async def announce(self, state: State = "active") -> None:
        body = self._presence(state).encode()
        if self._mqtt is not None:
            # Disconnected: keep_session reconnects and announces the current state.
            with contextlib.suppress(aiomqtt.MqttError):
                await self._mqtt.publish(self._topic, body, qos=1, retain=True)
        elif self._producer is not None:
            await self._heartbeat(body)

    async def keep_session(self, connected: asyncio.Event) -> None:
        """For ``via="mqtt"``: keep the session (with its Will) up; announce again after
        every reconnect, since a restarted broker may have lost the retained presence."""
        backoff = 0.2
        while True:
            try:
                async with self._link() as client:
                    self._mqtt = client
                    await self.announce()
                    reraise_swallowed_cancel()  # or it would wait for messages forever
                    connected.set()
                    backoff = 0.2
                    async for _ in client.messages:  # returns/raises when the link drops
                        pass
            except aiomqtt.MqttError as exc:
                refused = login_refused(exc)
                if refused is not None:
                    raise self.refused(refused) from None
                log.warning(
                    "mqtt_reconnecting", member=self._member, error=str(exc), retry_in=backoff
                )
            self._mqtt = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def refused(self, why: str) -> CredentialsError:
        """The error for a login the MQTT broker refused: no retry helps."""
        o = self.options
        return CredentialsError(
            f"member {self._member!r}: the MQTT broker at {o.mqtt_host}:{o.mqtt_port} refused "
            f"its login ({why}): check PresenceOptions.mqtt_auth (username, password, TLS)"
        )

    def unreachable(self, timeout: float) -> UnreachableError:
        o = self.options
        return UnreachableError(
            f"member {self._member!r}: the MQTT broker at {o.mqtt_host}:{o.mqtt_port} took no "
            f"connection within {timeout:g} s: check PresenceOptions(mqtt_host, mqtt_port) and "
            "that the broker runs"
        )

    async def heartbeats(self) -> None:
        """For ``via="kafka"``: announce every ``heartbeat_interval``."""
        while True:
            reraise_swallowed_cancel()
            await asyncio.sleep(self.options.heartbeat_interval)
            await self.announce()

    async def leave_over_new_link(self) -> None:
        """A clean leave on a short MQTT session of its own: the session ``keep_session``
        kept ended with a DISCONNECT (no Will), so without this the retained presence
        would keep saying this member is here."""
        async with self._link() as client:
            await client.publish(self._topic, self._presence("leaving").encode(), qos=1)
            await client.publish(self._topic, b"", qos=1, retain=True)

    async def clear(self, *, leave: bool) -> None:
        """Before the session ends: clear the retained presence (MQTT; only a clean leave
        skips ``leave_grace``, because its "leaving" came first) or, on a clean leave,
        tombstone the heartbeat key (Kafka)."""
        if self._mqtt is not None:
            with contextlib.suppress(Exception):
                await self._mqtt.publish(self._topic, b"", qos=1, retain=True)
        if self._producer is not None and leave:
            with contextlib.suppress(Exception):
                await self._heartbeat(None)

    async def _heartbeat(self, body: bytes | None) -> None:
        """One heartbeat (None: the tombstone of a clean leave), signed when the member
        has a key of its own."""
        assert self._producer is not None
        async with self._sending:  # one at a time: a sequence must not overtake another
            signer = self._signer
            headers = signer.headers(self._key, body) if signer is not None else None
            await self._producer.send_and_wait(
                self.options.heartbeat_topic, body, key=self._key, headers=headers
            )

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    def drop(self) -> None:
        """Lose the MQTT link as a killed process does: the broker sends the Will."""
        if self._mqtt is not None:
            drop_link(self._mqtt)

    def _link(self) -> aiomqtt.Client:
        """A session on the member's presence topic, with the Will that clears it."""
        o = self.options
        return member_client(
            o.mqtt_host,
            o.mqtt_port,
            self._identifier,
            self._topic,
            o.mqtt_keepalive,
            auth=o.mqtt_auth,
        )
