"""Who a member is and where it announces itself, checked before anything connects, and
the presence it announces: the same for every binding."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from controller.adapters.presence import MqttAuth
from controller.client.grants import Partition
from controller.errors import InputError
from controller.wire.member_keys import HeartbeatSigner
from controller.wire.records import Presence, problems
from controller.wire.signing import KeyFileError, Verifier

State = Literal["active", "draining", "leaving"]


@dataclass(frozen=True, slots=True)
class PresenceOptions:
    """Where a member announces itself. ``via="mqtt"`` (default): a retained message on
    ``<mqtt_prefix>/<group>/members/<member>``, cleared by the broker's Will when the
    link dies. ``via="kafka"``: a heartbeat every ``heartbeat_interval`` seconds on
    ``heartbeat_topic`` (no MQTT broker; a crash is noticed when heartbeats stop)."""

    via: Literal["mqtt", "kafka"] = "mqtt"
    mqtt_host: str = "127.0.0.1"
    mqtt_port: int = 1883
    #: Seconds; the broker sends the Will after 1.5x this without a packet.
    mqtt_keepalive: int = 5
    mqtt_prefix: str = "ballast"
    mqtt_auth: MqttAuth | None = None
    heartbeat_topic: str = "ballast.heartbeats"
    heartbeat_interval: float = 2.0
    #: With ``via="kafka"``: the member's own Ed25519 private key (PEM; ``ballast keys
    #: generate --out DIR --member NAME``). Every heartbeat is signed with it, so a controller
    #: with ``membership.member_keys_dir`` knows only this member wrote it.
    member_key: Path | str | None = None

    def heartbeat_signer(self) -> HeartbeatSigner | None:
        """The member's key, read now (``InputError`` naming the file when unusable)."""
        if self.via != "kafka" or self.member_key is None:
            return None
        try:
            return HeartbeatSigner.from_file(self.member_key)
        except KeyFileError as exc:
            raise InputError(f"PresenceOptions.member_key: {exc}") from None


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """``instance`` tells this process from an earlier one under the same member id: a
    grant issued to the other reads as holding nothing."""

    group: str
    member: str
    topics: tuple[str, ...]
    rack: str | None = None
    capacity: float | None = None
    #: The ids of the keys this member verifies its grants with (None: it verifies
    #: nothing): a controller signing with another key knows it cannot be followed.
    verify_keys: tuple[str, ...] | None = None
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:16])

    @classmethod
    def checked(
        cls,
        binding: str,
        group: str,
        member: str,
        topics: Iterable[str],
        *,
        rack: str | None = None,
        capacity: float | None = None,
        verifier: Verifier | None = None,
    ) -> MemberIdentity:
        """The identity, or ``ValueError`` naming the binding and what the controller
        would refuse in what it announces."""
        ordered = tuple(sorted(set(topics)))
        try:
            Presence(group=group, member=member, topics=list(ordered), rack=rack, capacity=capacity)
        except ValidationError as exc:
            raise ValueError(f"{binding}({group!r}, {member!r}): {problems(exc)}") from None
        keys = None if verifier is None else verifier.key_ids
        return cls(group, member, ordered, rack, capacity, keys)

    def presence(
        self,
        state: State,
        generation: int,
        held: Iterable[Partition],
        lag: Sequence[tuple[str, int, int]] | None = None,
    ) -> Presence:
        """What to announce: the held partitions and the generation applied acknowledge
        it; after a fail-stop a binding announces only ``leaving``."""
        return Presence(
            group=self.group,
            member=self.member,
            topics=list(self.topics),
            instance=self.instance,
            state=state,
            rack=self.rack,
            capacity=self.capacity,
            generation=generation,
            partitions=sorted(held),
            lag=None if lag is None else list(lag),
            verify_keys=None if self.verify_keys is None else list(self.verify_keys),
            sent_at=time.time(),
        )
