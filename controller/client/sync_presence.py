"""Presence for bindings whose application code is synchronous (confluent-kafka,
kafka-python): an MQTT session kept by paho's own network thread, with the Will that
clears the retained presence, or heartbeats on a Kafka topic from a thread of ours,
sent with whatever producer the binding has (``send``).

Each announcement is made fresh by ``make`` (what the member holds and acknowledges
now), so a reconnect announces the current state, not the one of the last call.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from controller import logs
from controller.adapters.presence import login_refused
from controller.client.identity import PresenceOptions, State
from controller.errors import CredentialsError, UnreachableError
from controller.wire.records import Presence, assignment_key, presence_topic
from controller.wire.signing import Header

log = logs.get("ballast.client")

#: How long connecting, or waiting for the broker to take an announcement, may take (s).
LINK_TIMEOUT = 30.0
ACK_TIMEOUT = 5.0

MakePresence = Callable[[State], Presence]
#: ``send(key, value)``: one heartbeat (``None``: the tombstone of a clean leave),
#: delivered before it returns or raising.
SendHeartbeat = Callable[[bytes, bytes | None, Sequence[Header]], None]


class PresenceLink(Protocol):
    def start(self) -> None: ...
    def announce(self, state: State = "active") -> None: ...
    def clear(self, *, leave: bool) -> None: ...
    def close(self) -> None: ...
    def drop(self) -> None: ...


class MqttLink:
    """A retained message on the member's topic; the broker's Will clears it when the
    session dies without DISCONNECT. paho reconnects on its own; every connect
    announces again (a restarted broker may have lost the retained message)."""

    def __init__(
        self, group: str, member: str, options: PresenceOptions, make: MakePresence
    ) -> None:
        self._options = options
        self._topic = presence_topic(options.mqtt_prefix, group, member)
        self._make = make
        self._member = member
        self._connected = threading.Event()
        #: Set with the broker's first answer: connected, or our login refused (``_refused``).
        self._answered = threading.Event()
        self._refused: str | None = None
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"ballast-{group}-{member}", clean_session=True
        )
        client.will_set(self._topic, b"", qos=1, retain=True)
        auth = options.mqtt_auth
        if auth is not None:
            if auth.username is not None:
                client.username_pw_set(auth.username, auth.password)
            if auth.tls is not None:
                client.tls_set(
                    ca_certs=auth.tls.ca_certs,
                    certfile=auth.tls.certfile,
                    keyfile=auth.tls.keyfile,
                    keyfile_password=auth.tls.keyfile_password,
                )
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        self._client = client

    def start(self) -> None:
        """Connected and announced; ``CredentialsError`` at once when the broker refuses
        our login, ``UnreachableError`` when it takes no connection in ``LINK_TIMEOUT``."""
        o = self._options
        where = f"the MQTT broker at {o.mqtt_host}:{o.mqtt_port}"
        self._client.connect_async(o.mqtt_host, o.mqtt_port, keepalive=o.mqtt_keepalive)
        self._client.loop_start()
        self._answered.wait(LINK_TIMEOUT)
        if self._connected.is_set():
            return
        self._client.disconnect()
        self._client.loop_stop()
        if self._refused is not None:
            raise CredentialsError(
                f"member {self._member!r}: {where} refused its login ({self._refused}): check "
                "PresenceOptions.mqtt_auth (username, password, TLS)"
            )
        raise UnreachableError(
            f"member {self._member!r}: {where} took no connection within {LINK_TIMEOUT:g} s: "
            "check PresenceOptions(mqtt_host, mqtt_port) and that the broker runs"
        )

    def _on_connect(
        self, client: mqtt.Client, _u: object, _f: object, code: object, _p: object
    ) -> None:
        if getattr(code, "is_failure", False):
            log.warning("mqtt_refused", member=self._member, reason=str(code))
            refused = login_refused(code)
            if refused is not None and not self._answered.is_set():
                self._refused = refused
                self._answered.set()
            return
        # In paho's thread: publish, never wait here (the wait needs this thread).
        client.publish(self._topic, self._make("active").encode(), qos=1, retain=True)
        self._connected.set()
        self._answered.set()

    def _on_disconnect(
        self, _c: mqtt.Client, _u: object, _f: object, code: object, _p: object
    ) -> None:
        if self._connected.is_set():
            log.warning("mqtt_reconnecting", member=self._member, reason=str(code))
        self._connected.clear()

    def _publish(self, body: bytes) -> None:
        info = self._client.publish(self._topic, body, qos=1, retain=True)
        # Disconnected: paho keeps it for the session, and the next connect announces the
        # state as it is then anyway.
        with contextlib.suppress(RuntimeError, ValueError):
            info.wait_for_publish(ACK_TIMEOUT)

    def announce(self, state: State = "active") -> None:
        self._publish(self._make(state).encode())

    def clear(self, *, leave: bool) -> None:
        """Clear the retained presence before the session ends (only a clean leave's
        "leaving", sent first, skips ``leave_grace``)."""
        self._publish(b"")

    def close(self) -> None:
        """A clean DISCONNECT: the broker does not send the Will."""
        self._client.disconnect()
        self._client.loop_stop()

    def drop(self) -> None:
        """Lose the link as a killed process does: the broker sends the Will."""
        sock = self._client.socket()
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._client.loop_stop()


class HeartbeatLink:
    """A heartbeat every ``heartbeat_interval`` on the heartbeat topic, keyed like the
    member's assignment records; a crash shows as heartbeats that stop. A send that
    fails ends the member (``on_death``), as its aiokafka twin's task does."""

    def __init__(
        self,
        group: str,
        member: str,
        options: PresenceOptions,
        *,
        make: MakePresence,
        send: SendHeartbeat,
        on_death: Callable[[BaseException], None],
    ) -> None:
        self._interval = options.heartbeat_interval
        self._key = assignment_key(group, member)
        self._signer = options.heartbeat_signer()
        self._sending = threading.Lock()
        self._make = make
        self._send = send
        self._on_death = on_death
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"ballast-{member}-heartbeats")

    def start(self) -> None:
        self.announce()
        self._thread.start()

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self._interval):
                self.announce()
        except Exception as exc:
            if not self._stop.is_set():
                self._on_death(exc)

    def announce(self, state: State = "active") -> None:
        self._heartbeat(self._make(state).encode())

    def clear(self, *, leave: bool) -> None:
        if leave:
            with contextlib.suppress(Exception):
                self._heartbeat(None)

    def _heartbeat(self, body: bytes | None) -> None:
        """Signed and sent one at a time (the beat thread and an acknowledgement may
        race): the controller refuses a sequence older than one it has seen."""
        with self._sending:
            signer = self._signer
            self._send(self._key, body, signer.headers(self._key, body) if signer else ())

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def drop(self) -> None:
        self.close()
