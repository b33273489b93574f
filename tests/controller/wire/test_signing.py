"""Signatures: the controller's key vouches for a record's key, value, headers and topic
role; change any of them, drop the signature or sign with another key, and the record
does not count."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from controller.core.handoff import Outgoing
from controller.core.plan_records import encode_plan
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER, log_entry
from controller.wire.signing import (
    SIGNATURE_HEADER,
    KeyFileError,
    Signer,
    Verifier,
    generate,
    signed_bytes,
)

KEY, VALUE = b"g/m", b'{"x": 1}'
HEADERS = [(GENERATION_HEADER, b"4"), (EPOCH_HEADER, b"2")]


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def test_a_signed_record_verifies(signer: Signer) -> None:
    header = signer.header("assignments", KEY, VALUE, HEADERS)
    assert signer.verifier.problem("assignments", KEY, VALUE, [*HEADERS, header]) is None
    tombstone = signer.header("assignments", KEY, None, HEADERS)
    assert signer.verifier.problem("assignments", KEY, None, [*HEADERS, tombstone]) is None


@pytest.mark.parametrize(
    ("domain", "key", "value", "headers"),
    [
        ("constraints", KEY, VALUE, HEADERS),  # moved to the other topic
        ("assignments", b"g/other", VALUE, HEADERS),  # re-keyed
        ("assignments", KEY, b'{"x": 2}', HEADERS),  # body changed
        ("assignments", KEY, None, HEADERS),  # turned into a tombstone
        ("assignments", KEY, b"", HEADERS),  # an empty value is not a tombstone
        ("assignments", KEY, VALUE, [(GENERATION_HEADER, b"5"), (EPOCH_HEADER, b"2")]),  # re-dated
        ("assignments", KEY, VALUE, [*HEADERS, ("x", b"")]),  # a header added
    ],
)
def test_any_change_breaks_the_signature(
    signer: Signer,
    domain: str,
    key: bytes,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
) -> None:
    header = signer.header("assignments", KEY, VALUE, HEADERS)
    problem = signer.verifier.problem(domain, key, value, [*headers, header])  # type: ignore[arg-type]
    assert problem is not None
    assert "does not verify" in problem


def test_unsigned_forged_and_doubly_signed_records_are_refused(signer: Signer) -> None:
    other = Signer(Ed25519PrivateKey.generate())
    forged = other.header("assignments", KEY, VALUE, HEADERS)
    good = signer.header("assignments", KEY, VALUE, HEADERS)
    v = signer.verifier
    assert "unsigned" in (v.problem("assignments", KEY, VALUE, HEADERS) or "")
    assert "does not verify" in (v.problem("assignments", KEY, VALUE, [*HEADERS, forged]) or "")
    assert "more than one" in (v.problem("assignments", KEY, VALUE, [*HEADERS, good, good]) or "")
    assert "does not verify" in (
        v.problem("assignments", KEY, VALUE, [*HEADERS, (SIGNATURE_HEADER, b"\x00" * 3)]) or ""
    )


def test_fields_cannot_be_shifted_between_key_and_value() -> None:
    """Length prefixes: no two different records share the signed bytes."""
    assert signed_bytes("assignments", b"ab", b"c", []) != signed_bytes(
        "assignments", b"a", b"bc", []
    )


class Msg:
    topic, partition, offset = "ballast.assignments", 0, 1

    def __init__(self, key: bytes, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        self.key, self.value, self.headers = key, value, headers


def test_the_controllers_plan_is_signed_and_a_forgery_of_it_is_not(signer: Signer) -> None:
    records = encode_plan(
        "g",
        3,
        9,
        [Outgoing("m", frozenset())],
        lambda _m: frozenset({"t"}),
        issued_at=100.0,
        wall_clock=lambda t: t,
        signer=signer,
    )
    (r,) = records
    problems: list[str] = []
    assert log_entry(Msg(r.key, r.value, r.headers), problems.append, signer.verifier) is not None
    assert problems == []
    body = json.loads(r.value or b"")
    body["partitions"] = [["t", 0]]  # a grant nobody signed
    forged = json.dumps(body).encode()
    assert log_entry(Msg(r.key, forged, r.headers), problems.append, signer.verifier) is None
    assert "does not verify" in problems[0]


def test_key_files_round_trip_and_are_checked(tmp_path: Path) -> None:
    private, public = generate(tmp_path / "keys")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    signer, verifier = Signer.from_file(private), Verifier.from_file(public)
    header = signer.header("constraints", b"g", b"{}")
    assert verifier.problem("constraints", b"g", b"{}", [header]) is None
    with pytest.raises(KeyFileError, match="exists"):
        generate(tmp_path / "keys")
    with pytest.raises(KeyFileError, match="private key"):
        Signer.from_file(public)
    with pytest.raises(KeyFileError, match="public key"):
        Verifier.from_file(private)
    with pytest.raises(KeyFileError, match="cannot read"):
        Verifier.from_file(tmp_path / "missing.pub")
    (tmp_path / "junk").write_bytes(b"\xff" * 100)
    with pytest.raises(KeyFileError):
        Signer.from_file(tmp_path / "junk")
