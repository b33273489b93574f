"""Decoders accept exactly the documented records and reject everything else with a
message naming what was wrong."""

from __future__ import annotations

import json

import pytest

from controller.wire.records import (
    MAX_PAYLOAD_BYTES,
    Assignment,
    DecodeError,
    LagRecord,
    Presence,
    decode,
    split_key,
)

GOOD_PRESENCE = {
    "group": "g",
    "member": "m-1",
    "topics": ["orders"],
    "generation": 3,
    "partitions": [["orders", 1]],
}


def test_presence_round_trip() -> None:
    p = decode(Presence, json.dumps(GOOD_PRESENCE).encode(), "src")
    assert decode(Presence, p.encode(), "src") == p
    assert p.version == 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"topics": "orders"}, "topics: Input should be a valid"),
        ({"generation": -2}, "generation: Input should be greater than or equal to -1"),
        ({"generation": "3"}, "generation: Input should be a valid integer"),
        (
            {"partitions": [["orders", -1]]},
            "partitions.0.1: Input should be greater than or equal to 0",
        ),
        ({"partitions": [["orders", 1], ["orders", 1]]}, "lists a partition more than once"),
        ({"member": "a/b"}, "member: String should match pattern"),
        ({"state": "zombie"}, "state: Input should be 'active', 'draining' or 'leaving'"),
        ({"capacity": 0}, "capacity: Input should be greater than 0"),
        ({"lag": [["orders", 1, -5]]}, "lag.0.2: Input should be greater than or equal to 0"),
        (
            {"lag": [["orders", 1, 5], ["orders", 7, 5]]},
            "lag names partitions not in partitions: orders-7",
        ),
        # Past Kafka's 32-bit partition numbers and 64-bit offsets: such a partition
        # overflowed the engine's partition ids, such a lag the smoothing's floats.
        (
            {"partitions": [["orders", 2**31]]},
            "partitions.0.1: Input should be less than or equal to 2147483647",
        ),
        (
            {"lag": [["orders", 2**40, 5]]},
            "lag.0.1: Input should be less than or equal to 2147483647",
        ),
        (
            {"lag": [["orders", 1, 10**400]]},
            "lag.0.2: Input should be less than or equal to 9223372036854775807",
        ),
        ({"sent_at": float("nan")}, "sent_at: Input should be a finite number"),
        ({"version": 2}, "version: Input should be 1"),
        ({"surprise": True}, "surprise: Extra inputs are not permitted"),
    ],
)
def test_presence_rejections_name_the_field(change: dict[str, object], expected: str) -> None:
    with pytest.raises(DecodeError) as err:
        decode(Presence, json.dumps({**GOOD_PRESENCE, **change}).encode(), "ballast/g/members/m-1")
    assert expected in str(err.value)
    assert str(err.value).startswith("ballast/g/members/m-1: ")


def test_oversized_and_non_json_payloads() -> None:
    with pytest.raises(DecodeError, match="exceeds"):
        decode(Presence, b"{" + b" " * MAX_PAYLOAD_BYTES + b"}", "s")
    with pytest.raises(DecodeError, match="not JSON"):
        decode(Presence, b"\xff\xfe", "s")
    with pytest.raises(DecodeError, match="empty payload"):
        decode(Presence, None, "s")


def test_assignment_and_lag_records() -> None:
    a = Assignment(
        group="g",
        member="m",
        generation=1,
        controller_epoch=2,
        partitions=[("t", 0)],
        issued_at=1.0,
    )
    assert decode(Assignment, a.encode(), "s") == a
    with pytest.raises(DecodeError, match="lag: Input should be greater than or equal to 0"):
        decode(LagRecord, b'{"group":"g","topic":"t","partition":0,"lag":-1,"observed_at":1}', "s")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"lag": 2**63}, "lag: Input should be less than or equal to 9223372036854775807"),
        ({"partition": 2**31}, "partition: Input should be less than or equal to 2147483647"),
        ({"time_lag": float("inf")}, "time_lag: Input should be a finite number"),
        ({"time_lag": 1e300}, f"time_lag: Input should be less than or equal to {10**15}"),
        ({"produce_rate": 1e19}, f"produce_rate: Input should be less than or equal to {10**18}"),
        ({"observed_at": float("nan")}, "observed_at: Input should be a finite number"),
    ],
)
def test_lag_records_past_kafkas_ranges_or_not_finite_are_rejected(
    change: dict[str, object], expected: str
) -> None:
    good = {"group": "g", "topic": "t", "partition": 0, "lag": 1, "observed_at": 1.0}
    with pytest.raises(DecodeError) as err:
        decode(LagRecord, json.dumps({**good, **change}).encode(), "ballast.lag")
    assert expected in str(err.value)


def test_keys() -> None:
    assert split_key(b"g/m", "s") == ["g", "m"]
    assert split_key(b"g/t/3", "s", parts=3) == ["g", "t", "3"]
    for bad in (None, b"", b"nogroup", b"a/b/c", b"/m", b"\xff/x"):
        with pytest.raises(DecodeError):
            split_key(bad, "s")
