"""Presence over MQTT: a member's retained message on
``<prefix>/<group>/members/<member>`` (``records.presence_topic``), and the Will that
clears it when the member's connection dies without DISCONNECT."""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field
from typing import Any

import aiomqtt
import paho.mqtt.client as mqtt

#: CONNACK codes that no retry can change: MQTT 3.1.1 (4, 5) and MQTT 5 (134 bad user
#: name or password, 135 not authorized, 138 banned, 140 bad authentication method).
_REFUSED = {4, 5, 134, 135, 138, 140}


def login_refused(error: object) -> str | None:
    """What the MQTT broker refused, when ``error`` (an ``aiomqtt.MqttError``, or paho's
    CONNACK reason code) says our credentials or its certificate are wrong; None for a
    failure that a retry may cure (unreachable, busy, dropped)."""
    code = getattr(error, "rc", error)
    value = getattr(code, "value", code)
    if isinstance(value, int) and not isinstance(value, bool) and value in _REFUSED:
        return str(error)
    if "CERTIFICATE_VERIFY_FAILED" in str(error):
        return f"TLS: the broker's certificate did not verify ({error})"
    return None


def member_client(
    host: str,
    port: int,
    identifier: str,
    topic: str,
    keepalive: int,
    *,
    auth: MqttAuth | None = None,
) -> aiomqtt.Client:
    """An MQTT client for a member: its Will clears the member's retained presence, so
    the broker reports the member gone when the connection dies without DISCONNECT."""
    auth = auth or MqttAuth()
    return _MemberClient(
        host,
        port,
        identifier=identifier,
        keepalive=keepalive,
        will=aiomqtt.Will(topic, b"", qos=1, retain=True),
        username=auth.username,
        password=auth.password,
        tls_params=auth.tls,
    )


class _MemberClient(aiomqtt.Client):
    """Overrides a private callback of aiomqtt's (``_on_socket_register_write``, which
    uses ``_loop`` and ``_disconnected``). aiomqtt 2.x registers paho's socket for
    writing with ``call_soon_threadsafe(add_writer, fd, ...)``. When the socket closes
    before the loop runs that (a leave's DISCONNECT right after its last publish, or
    ``ManagedConsumer.abort``), asyncio logs an error with a traceback for a closed
    descriptor. The write would go nowhere, so a registration for a socket that is no
    longer open is skipped."""

    def _on_socket_register_write(
        self,
        client: mqtt.Client,
        userdata: Any,
        sock: Any,
    ) -> None:
        def write() -> None:
            try:
                client.loop_write()
            except Exception as exc:  # as aiomqtt: a broken link ends the session
                if not self._disconnected.done():
                    self._disconnected.set_exception(exc)

        def register(fd: int) -> None:
            if fd != -1 and sock.fileno() == fd:
                self._loop.add_writer(fd, write)

        self._loop.call_soon_threadsafe(register, sock.fileno())


def drop_link(client: aiomqtt.Client) -> None:
    """Shut the client's socket down without DISCONNECT, as a killed process would leave
    it: the broker publishes the Will. For fault injection (``ManagedConsumer.abort``, the
    simulated fleet's crashes); aiomqtt offers no call for it, so this reaches paho's
    client (private: ``aiomqtt.Client._client``)."""
    sock = client._client.socket()
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@dataclass(frozen=True)
class MqttAuth:
    """Credentials and TLS for an MQTT connection (``repr`` hides the password)."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: aiomqtt.TLSParameters | None = None
