"""Presence over MQTT: a member's retained message on
``<prefix>/<group>/members/<member>`` (``records.presence_topic``), and the Will that
clears it when the member's connection dies without DISCONNECT."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiomqtt


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
    return aiomqtt.Client(
        host,
        port,
        identifier=identifier,
        keepalive=keepalive,
        will=aiomqtt.Will(topic, b"", qos=1, retain=True),
        username=auth.username,
        password=auth.password,
        tls_params=auth.tls,
    )


@dataclass(frozen=True)
class MqttAuth:
    """Credentials and TLS for an MQTT connection (``repr`` hides the password)."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: aiomqtt.TLSParameters | None = None
