"""The member's reading of its partition of the assignments topic, without a broker or
a client library: what any binding gets from the records it hands over."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from controller.client.grants import Grant, GrantReader, RawRecord
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER
from controller.wire.records import Assignment, Fence, assignment_key, fence_key
from controller.wire.signing import Signer

GROUP, MEMBER, ME = "g", "m1", "proc-1"
KEY = assignment_key(GROUP, MEMBER)


def grant(
    offset: int,
    partitions: list[tuple[str, int]] | None,
    *,
    epoch: int = 1,
    generation: int = 1,
    instance: str | None = ME,
    key: bytes = KEY,
) -> RawRecord:
    value = None
    if partitions is not None:
        value = Assignment(
            group=GROUP,
            member=key.decode().split("/")[1],
            generation=generation,
            controller_epoch=epoch,
            partitions=partitions,
            issued_at=1.0,
            instance=instance,
        ).encode()
    headers = [(GENERATION_HEADER, str(generation).encode()), (EPOCH_HEADER, str(epoch).encode())]
    return RawRecord("ballast.assignments", 0, offset, key, value, headers)


def fence(offset: int, epoch: int) -> RawRecord:
    value = Fence(group=GROUP, controller_epoch=epoch, issued_at=1.0).encode()
    return RawRecord("ballast.assignments", 0, offset, fence_key(GROUP), value, [])


def test_a_grant_to_this_process_is_what_to_hold_and_acknowledge() -> None:
    reader = GrantReader(GROUP, MEMBER, ME)
    assert reader.read(grant(0, [("t", 1), ("t", 0)], generation=4)) == Grant(
        frozenset({("t", 0), ("t", 1)}), 4
    )
    assert reader.epoch == 1


def test_a_predecessors_grant_and_a_tombstone_hold_nothing_and_acknowledge_nothing() -> None:
    reader = GrantReader(GROUP, MEMBER, ME)
    assert reader.read(grant(0, [("t", 0)], instance="proc-0")) == Grant(frozenset(), None)
    assert reader.read(grant(1, None, generation=2)) == Grant(frozenset(), None)


def test_other_keys_stale_and_fenced_records_make_no_grant() -> None:
    reader = GrantReader(GROUP, MEMBER, ME)
    assert reader.read(grant(0, [("t", 0)], key=assignment_key(GROUP, "m2"))) is None
    assert reader.read(grant(1, [("t", 0)], epoch=1, generation=5)) is not None
    assert reader.read(grant(2, [("t", 1)], epoch=1, generation=5)) is None  # not newer
    assert reader.read(fence(3, epoch=2)) is None
    assert reader.epoch == 2
    assert reader.read(grant(4, [("t", 1)], epoch=1, generation=9)) is None  # deposed leader
    assert reader.read(grant(5, [("t", 1)], epoch=2, generation=1)) == Grant(
        frozenset({("t", 1)}), 1
    )


@pytest.mark.parametrize("value", [b"", b"{", b"[]", b'{"group": "g"}', b"\xff" * 64, b"null"])
def test_a_malformed_record_is_reported_and_makes_no_grant(value: bytes) -> None:
    why: list[str] = []
    reader = GrantReader(GROUP, MEMBER, ME, on_invalid=why.append)
    record = grant(7, [("t", 0)])._replace(value=value)
    assert reader.read(record) is None
    assert len(why) == 1
    assert "@7" in why[0]


def test_with_a_verifier_only_signed_records_count() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    why: list[str] = []
    reader = GrantReader(GROUP, MEMBER, ME, verifier=signer.verifier, on_invalid=why.append)
    unsigned = grant(0, [("t", 0)])
    assert reader.read(unsigned) is None
    assert len(why) == 1
    headers = [*unsigned.headers]
    signed = unsigned._replace(headers=signer.sign("assignments", KEY, unsigned.value, headers))
    assert reader.read(signed) == Grant(frozenset({("t", 0)}), 1)
