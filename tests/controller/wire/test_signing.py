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
    KEY_ID_HEADER,
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
    signed = signer.sign("assignments", KEY, VALUE, HEADERS)
    assert signer.verifier.problem("assignments", KEY, VALUE, signed) is None
    assert signer.verifier.check("assignments", KEY, VALUE, signed).key_id == signer.key_id
    tombstone = signer.sign("assignments", KEY, None, HEADERS)
    assert signer.verifier.problem("assignments", KEY, None, tombstone) is None


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
        ("assignments", KEY, VALUE, HEADERS[:1]),  # a header dropped
    ],
)
def test_any_change_breaks_the_signature(
    signer: Signer,
    domain: str,
    key: bytes,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
) -> None:
    *_, key_id, signature = signer.sign("assignments", KEY, VALUE, HEADERS)
    problem = signer.verifier.problem(domain, key, value, [*headers, key_id, signature])  # type: ignore[arg-type]
    assert problem is not None
    assert "does not verify" in problem


def test_unsigned_forged_and_doubly_signed_records_are_refused(signer: Signer) -> None:
    other = Signer(Ed25519PrivateKey.generate())
    forged = other.sign("assignments", KEY, VALUE, HEADERS)
    good = signer.sign("assignments", KEY, VALUE, HEADERS)
    v = signer.verifier
    assert "unsigned" in (v.problem("assignments", KEY, VALUE, HEADERS) or "")
    assert "not among the configured" in (v.problem("assignments", KEY, VALUE, forged) or "")
    # The other key's signature under our key's id: tried with our key, it fails.
    relabelled = [*forged[:-2], good[-2], forged[-1]]
    assert "does not verify" in (v.problem("assignments", KEY, VALUE, relabelled) or "")
    assert "more than one" in (v.problem("assignments", KEY, VALUE, [*good, good[-1]]) or "")
    assert "more than one key id" in (
        v.problem("assignments", KEY, VALUE, [*good[:-1], good[-2], good[-1]]) or ""
    )
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
    assert (
        verifier.problem("constraints", b"g", b"{}", signer.sign("constraints", b"g", b"{}"))
        is None
    )
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


def test_a_verifier_of_several_keys_accepts_each_and_names_which(signer: Signer) -> None:
    """While a key is replaced, readers accept the old and the new one; a record of an
    older controller (no key id header) is tried with each."""
    new = Signer(Ed25519PrivateKey.generate())
    both = signer.verifier.with_keys([new.public_key])
    assert both.key_ids == tuple(sorted({signer.key_id, new.key_id}))
    for s in (signer, new):
        signed = s.sign("assignments", KEY, VALUE, HEADERS)
        assert both.check("assignments", KEY, VALUE, signed).key_id == s.key_id
        # The id header is covered: dropping it breaks the signature.
        unnamed = [h for h in signed if h[0] != KEY_ID_HEADER]
        assert both.problem("assignments", KEY, VALUE, unnamed) is not None
        old_style = s._key.sign(signed_bytes("assignments", KEY, VALUE, HEADERS))
        legacy = [*HEADERS, (SIGNATURE_HEADER, old_style)]
        assert both.check("assignments", KEY, VALUE, legacy).key_id == s.key_id
    refused = new.verifier.problem(
        "assignments", KEY, VALUE, signer.sign("assignments", KEY, VALUE)
    )
    assert refused is not None
    assert signer.key_id in refused


def test_key_ids_are_stable_and_short(tmp_path: Path) -> None:
    private, public = generate(tmp_path / "keys")
    signer, verifier = Signer.from_file(private), Verifier.from_file(public)
    assert verifier.key_ids == (signer.key_id,)
    assert len(signer.key_id) == 16
    assert set(signer.key_id) <= set("0123456789abcdef")
    assert Signer.from_file(private).key_id == signer.key_id  # the same key, the same id
    with pytest.raises(ValueError, match="at least one"):
        Verifier([])


def test_a_verifier_that_takes_unsigned_records_still_refuses_other_keys(signer: Signer) -> None:
    """``signing.required: false``: the log written before signing was on counts; a
    record signed with any key the controller does not have never does."""
    lenient = signer.verifier.with_keys([], unsigned_ok=True)
    assert lenient.check("assignments", KEY, VALUE, HEADERS) == (None, None)
    other = Signer(Ed25519PrivateKey.generate()).sign("assignments", KEY, VALUE, HEADERS)
    assert lenient.problem("assignments", KEY, VALUE, other) is not None
