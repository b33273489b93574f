"""Signatures on the records that grant partitions: only the controller's key makes one.

Anyone who can produce to a topic can write bytes that parse as a valid ``Assignment``;
the fencing rule then trusts its epoch. So the controller signs every record it writes
to the assignments and constraints topics (grants, tombstones and fences) with an
Ed25519 private key, and every reader that is given the public key (members, a
takeover's recovery, ``ballast audit``) acts only on records whose signature verifies.

The signature is a header (``ballast-signature``), so the record bodies and the
compaction key stay as they are. It covers a domain string naming the topic's role, the
key, the value (a tombstone distinctly from an empty value) and every other header, so a
signed record cannot be re-keyed, re-dated or moved to the other topic. A second header
(``ballast-key-id``, covered too) names the key, so readers that accept several keys
(while one replaces another: docs/operations.md, "Rotating the signing key") know which
one to check and operators can see which key wrote what. It proves who wrote a record,
not when: a replay of an old signed record loses to its successor by (epoch,
generation) or (epoch, sequence), and Kafka ACLs limit who may write at all.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

SIGNATURE_HEADER = "ballast-signature"
#: Which key made the signature (``key_id``): covered by it.
KEY_ID_HEADER = "ballast-key-id"
#: What a signature vouches for: the topic's role, so a record cannot change topics
#: (``heartbeats``: a member's own, controller/wire/member_keys.py).
Domain = Literal["assignments", "constraints", "heartbeats"]
Header = tuple[str, bytes]
#: A header as it arrives from a broker: Kafka allows one without a value.
RawHeader = tuple[str, bytes | None]

_LEN = struct.Struct(">I")
_TOMBSTONE = b"\x00"
_VALUE = b"\x01"


class KeyFileError(ValueError):
    """A key file is missing, unreadable or not an Ed25519 key (the message says which)."""


def signed_bytes(
    domain: Domain, key: bytes, value: bytes | None, headers: Iterable[Header]
) -> bytes:
    """The exact bytes a signature covers: every field length-prefixed, headers sorted
    (other than the signature itself), so no two records share them."""
    parts = [b"ballast-signature/1", domain.encode(), _LEN.pack(len(key)), key]
    if value is None:
        parts.append(_TOMBSTONE)
    else:
        parts += [_VALUE, _LEN.pack(len(value)), value]
    for name, raw in sorted(h for h in headers if h[0] != SIGNATURE_HEADER):
        encoded = name.encode()
        parts += [_LEN.pack(len(encoded)), encoded, _LEN.pack(len(raw)), raw]
    return b"".join(parts)


def key_id(public_key: Ed25519PublicKey) -> str:
    """A public key's short name: 16 hex digits of the SHA-256 of its raw 32 bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class Signer:
    """The controller's private key."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = private_key.public_key()
        self.key_id = key_id(self.public_key)
        self.verifier = Verifier([self.public_key])

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        key = _load(path, "private")
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"{path}: not an Ed25519 private key")
        return cls(key)

    def sign(
        self, domain: Domain, key: bytes, value: bytes | None, headers: Sequence[Header] = ()
    ) -> list[Header]:
        """``headers`` with this key's id and the signature over all of them added."""
        named = [*headers, (KEY_ID_HEADER, self.key_id.encode())]
        signature = self._key.sign(signed_bytes(domain, key, value, named))
        return [*named, (SIGNATURE_HEADER, signature)]


class Checked(NamedTuple):
    """What a reader makes of a record's signature."""

    #: The accepted key that signed it (None: unsigned).
    key_id: str | None
    #: Why it does not count; None: it does.
    problem: str | None


class Verifier:
    """The public keys a reader accepts: which records the controller wrote. More than
    one while a key is being replaced; a record names its key (``KEY_ID_HEADER``), and
    one that does not (an older controller's) is tried with each. ``unsigned_ok``: an
    unsigned record counts too (a controller turning signing on: ``signing.required:
    false``); one signed with any other key never does."""

    def __init__(
        self, public_keys: Sequence[Ed25519PublicKey], *, unsigned_ok: bool = False
    ) -> None:
        if not public_keys:
            raise ValueError("a verifier needs at least one public key")
        self._keys = {key_id(k): k for k in public_keys}
        self.unsigned_ok = unsigned_ok

    @classmethod
    def from_file(cls, path: Path) -> Verifier:
        return cls.from_files([path])

    @classmethod
    def from_files(cls, paths: Sequence[Path]) -> Verifier:
        return cls([load_public(path) for path in paths])

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of the keys accepted, sorted (what a member announces)."""
        return tuple(sorted(self._keys))

    def with_keys(
        self, public_keys: Sequence[Ed25519PublicKey], *, unsigned_ok: bool = False
    ) -> Verifier:
        """This verifier accepting ``public_keys`` too."""
        return Verifier([*self._keys.values(), *public_keys], unsigned_ok=unsigned_ok)

    def problem(
        self, domain: Domain, key: bytes, value: bytes | None, headers: Sequence[RawHeader]
    ) -> str | None:
        """None when the record counts, else what is wrong with it."""
        return self.check(domain, key, value, headers).problem

    def check(
        self, domain: Domain, key: bytes, value: bytes | None, raw_headers: Sequence[RawHeader]
    ) -> Checked:
        """Which accepted key signed the record, or why it does not count. Headers come
        from any producer: a null value (Kafka allows one) is a reason, not a crash."""
        headers = [(name, raw) for name, raw in raw_headers if isinstance(raw, bytes)]
        if len(headers) != len(raw_headers):
            empty = next(name for name, raw in raw_headers if not isinstance(raw, bytes))
            return Checked(None, f"header {str(empty)[:40]!r} has no value")
        signatures = [raw for name, raw in headers if name == SIGNATURE_HEADER]
        if not signatures:
            if self.unsigned_ok:
                return Checked(None, None)
            return Checked(
                None, "unsigned record (a verify key is configured: only signed records count)"
            )
        if len(signatures) > 1:
            return Checked(None, "more than one signature header")
        named = [raw for name, raw in headers if name == KEY_ID_HEADER]
        if len(named) > 1:
            return Checked(None, "more than one key id header")
        if named:
            wanted = named[0].decode("ascii", errors="replace")[:64]
            if wanted not in self._keys:
                return Checked(
                    None,
                    f"signed with key {wanted!r}, which is not among the configured public keys",
                )
            candidates = [wanted]
        else:
            candidates = sorted(self._keys)
        covered = signed_bytes(domain, key, value, headers)
        for kid in candidates:
            try:
                self._keys[kid].verify(signatures[0], covered)
            except InvalidSignature:
                continue
            return Checked(kid, None)
        return Checked(None, "signature does not verify with the configured public keys")


#: What a member is given to verify with: a public key file, several (while a key is
#: replaced: the old and the new one), or a ready ``Verifier``.
VerifyKeys = Path | str | Sequence[Path | str] | Verifier


def verifier_of(keys: VerifyKeys | None) -> Verifier | None:
    """The verifier ``keys`` make (None: verify nothing)."""
    if keys is None or isinstance(keys, Verifier):
        return keys
    if isinstance(keys, str | Path):
        return Verifier.from_file(Path(keys))
    return Verifier.from_files([Path(k) for k in keys])


def load_public(path: Path) -> Ed25519PublicKey:
    """An Ed25519 public key file; ``KeyFileError`` says what is wrong."""
    key = _load(path, "public")
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path}: not an Ed25519 public key")
    return key


def generate(directory: Path, name: str = "signing") -> tuple[Path, Path]:
    """A new key pair as ``<name>.key`` (PKCS#8 PEM, mode 0600) and ``<name>.pub`` in
    ``directory`` (a member's: its member id); refuses to overwrite an existing key."""
    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / f"{name}.key", directory / f"{name}.pub"
    for path in (private, public):
        if path.exists():
            raise KeyFileError(f"{path} exists: remove it first or choose another --out")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def _load(path: Path, kind: Literal["private", "public"]) -> object:
    """A PEM key file's key; ``KeyFileError`` says what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the {kind} key: {exc.strerror}") from None
    if len(data) > 64 * 1024:
        raise KeyFileError(f"{path}: {len(data)} bytes is not a {kind} key file")
    key: object
    try:
        if kind == "private":
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{path}: not a PEM {kind} key without password ({exc})") from None
    return key
