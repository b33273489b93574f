"""Signatures on the records that grant partitions: only the controller's key makes one.

Anyone who can produce to a topic can write bytes that parse as a valid ``Assignment``;
the fencing rule then trusts its epoch. So the controller signs every record it writes
to the assignments and constraints topics (grants, tombstones and fences) with an
Ed25519 private key, and every reader that is given the public key (members, a
takeover's recovery, ``ballast audit``) acts only on records whose signature verifies.

The signature is a header (``ballast-signature``), so the record bodies and the
compaction key stay as they are. It covers a domain string naming the topic's role, the
key, the value (a tombstone distinctly from an empty value) and every other header, so a
signed record cannot be re-keyed, re-dated or moved to the other topic. It proves who
wrote a record, not when: replaying an old signed record is kept out by the fencing
rule while its successor is in the log, and by Kafka ACLs on who may write the topics
(docs/operations.md, "Security model").
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

SIGNATURE_HEADER = "ballast-signature"
#: What a signature vouches for: the topic's role, so a record cannot change topics.
Domain = Literal["assignments", "constraints"]
Header = tuple[str, bytes]

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


class Signer:
    """The controller's private key."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.verifier = Verifier(private_key.public_key())

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        key = _load(path, "private")
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"{path}: not an Ed25519 private key")
        return cls(key)

    def header(
        self, domain: Domain, key: bytes, value: bytes | None, headers: Sequence[Header] = ()
    ) -> Header:
        """The signature header for a record with these fields."""
        return SIGNATURE_HEADER, self._key.sign(signed_bytes(domain, key, value, headers))


class Verifier:
    """A public key: which records the controller wrote."""

    def __init__(self, public_key: Ed25519PublicKey) -> None:
        self._key = public_key

    @classmethod
    def from_file(cls, path: Path) -> Verifier:
        key = _load(path, "public")
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(f"{path}: not an Ed25519 public key")
        return cls(key)

    def problem(
        self, domain: Domain, key: bytes, value: bytes | None, headers: Sequence[Header]
    ) -> str | None:
        """None when the record carries a valid signature, else what is wrong with it."""
        signatures = [raw for name, raw in headers if name == SIGNATURE_HEADER]
        if not signatures:
            return "unsigned record (a verify key is configured: only signed records count)"
        if len(signatures) > 1:
            return "more than one signature header"
        try:
            self._key.verify(signatures[0], signed_bytes(domain, key, value, headers))
        except InvalidSignature:
            return "signature does not verify with the configured public key"
        return None


def generate(directory: Path) -> tuple[Path, Path]:
    """A new key pair as ``signing.key`` (PKCS#8 PEM, mode 0600) and ``signing.pub``
    in ``directory``; refuses to overwrite an existing key."""
    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / "signing.key", directory / "signing.pub"
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
