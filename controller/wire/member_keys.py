"""Heartbeats that only the member they name can write.

On the Kafka presence path (``membership.source: kafka``) every member may write the
heartbeat topic, so without more any of them could acknowledge, leave or join for
another, and anyone could announce ghosts. With member keys each member signs its
heartbeats (and its leave's tombstone) with an Ed25519 key of its own; the controller
holds the public keys, one file per member (``<member>.pub``), counts a heartbeat only
when the key of the member its key names signed it, and admits no member without a key.
A sequence under the signature (nanoseconds since the epoch, increasing within a
process and across restarts) makes every heartbeat newer than the one before it, so a
replayed heartbeat (an old acknowledgement, a leave of an earlier life) never counts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from controller.wire.assignments import int_header
from controller.wire.records import SEQUENCE_HEADER, DecodeError
from controller.wire.signing import (
    Header,
    KeyFileError,
    RawHeader,
    Signer,
    Verifier,
    load_public,
)

#: A member id (as ``records.MemberId``), which names its key files.
MEMBER_ID = re.compile(r"[A-Za-z0-9._\-:@]{1,255}")
#: The file name of a member's public key: its member id, then ``.pub``.
_MEMBER_FILE = re.compile(rf"^({MEMBER_ID.pattern})\.pub$")
#: Most member keys one directory may hold (state stays bounded whatever is put there).
MAX_MEMBER_KEYS = 100_000


class HeartbeatSigner:
    """A member's own key: the headers of each heartbeat it writes."""

    def __init__(self, signer: Signer) -> None:
        self._signer = signer
        self._last = 0

    @classmethod
    def from_file(cls, path: Path | str) -> HeartbeatSigner:
        return cls(Signer.from_file(Path(path)))

    @property
    def key_id(self) -> str:
        return self._signer.key_id

    def headers(self, key: bytes, value: bytes | None) -> list[Header]:
        """A sequence newer than any this process wrote, and the signature over it."""
        self._last = max(time.time_ns(), self._last + 1)
        sequence = (SEQUENCE_HEADER, str(self._last).encode())
        return self._signer.sign("heartbeats", key, value, [sequence])


class Vouched(NamedTuple):
    """What the controller makes of a heartbeat's signature."""

    #: Its sequence, when the member's key signed it.
    sequence: int | None
    #: Why it does not count; None: it does (if newer than the last one).
    problem: str | None


class MemberKeys:
    """The public key of every member admitted on the heartbeat path."""

    def __init__(
        self, keys: Mapping[str, Ed25519PublicKey], directory: Path, version: int = 0
    ) -> None:
        self._verifiers = {member: Verifier([key]) for member, key in keys.items()}
        #: Where they were read, and the directory's mtime then (``changed()``).
        self.directory = directory
        self.version = version

    @classmethod
    def from_dir(cls, directory: Path) -> MemberKeys:
        """Every ``<member>.pub`` in ``directory`` (other files are ignored);
        ``KeyFileError`` naming the file that is not an Ed25519 public key."""
        try:
            version = directory.stat().st_mtime_ns
            names = sorted(p.name for p in directory.iterdir())
        except OSError as exc:
            raise KeyFileError(f"{directory}: cannot list member keys: {exc.strerror}") from exc
        members = [m.group(1) for name in names if (m := _MEMBER_FILE.match(name))]
        if len(members) > MAX_MEMBER_KEYS:
            raise KeyFileError(f"{directory}: more than {MAX_MEMBER_KEYS} member keys")
        keys = {member: load_public(directory / f"{member}.pub") for member in members}
        return cls(keys, directory, version)

    def __len__(self) -> int:
        return len(self._verifiers)

    def changed(self) -> bool:
        """Whether a key was added or removed since they were read (the directory's
        mtime moved: a Kubernetes Secret mount swaps its ``..data`` link, which moves
        it too). An unlistable directory counts as unchanged: the keys read stay."""
        try:
            return self.directory.stat().st_mtime_ns != self.version
        except OSError:
            return False

    def vouch(
        self,
        member: str,
        key: bytes,
        value: bytes | None,
        headers: Sequence[RawHeader],
        source: str,
    ) -> Vouched:
        verifier = self._verifiers.get(member)
        if verifier is None:
            return Vouched(None, f"member {member[:80]!r} has no key: it is not admitted")
        checked = verifier.check("heartbeats", key, value, headers)
        if checked.problem is not None:
            return Vouched(None, f"not signed by member {member[:80]!r}'s key: {checked.problem}")
        raw = [v for name, v in headers if name == SEQUENCE_HEADER]
        if len(raw) != 1:
            return Vouched(None, "a signed heartbeat needs exactly one sequence header")
        try:
            sequence = int_header(raw[0], SEQUENCE_HEADER, source)
        except DecodeError as exc:
            return Vouched(None, exc.reason)
        if sequence is None:
            return Vouched(None, "a signed heartbeat needs exactly one sequence header")
        return Vouched(sequence, None)
