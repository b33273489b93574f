"""Every reader of outside bytes returns a value or raises its one documented error, for
any input: the poison found by hand (a 1 KB record of ``[``, a 5 000-digit number,
``-Infinity``, invalid UTF-8, keys with spaces, 401-digit epochs) and whatever hypothesis
makes, deep nesting and huge numbers included.

The readers and their errors (docs/protocol.md, "Untrusted input"):

* ``records.decode`` (every record kind) -> ``DecodeError``;
* ``records.split_key`` -> ``DecodeError``;
* ``assignments.log_entry`` -> never raises (None after ``on_invalid``);
* ``group_protocol.UserData.read`` -> ``ValueError``; the assignor's callbacks never raise;
* the raw Kafka answer readers -> ``RawDecodeError``;
* ``signing.Verifier.problem`` -> never raises (a reason or None).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.adapters.group_protocol import group_assignor
from controller.config import Config
from controller.runtime.membership import KafkaHeartbeats, MqttPresence, Sink
from controller.runtime.metrics import Metrics
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER, log_entry
from controller.wire.group_protocol import UserData
from controller.wire.metadata import read_metadata
from controller.wire.offsets import read_list_offsets, read_offset_fetch
from controller.wire.raw_answers import RawDecodeError
from controller.wire.records import (
    MAX_COUNTER,
    Assignment,
    ConstraintsRecord,
    DecodeError,
    Fence,
    LagRecord,
    OffsetSample,
    Presence,
    TraceEvent,
    decode,
    split_key,
)
from controller.wire.signing import KEY_ID_HEADER, SIGNATURE_HEADER, Signer

MODELS: list[type[Any]] = [
    Presence,
    Assignment,
    Fence,
    ConstraintsRecord,
    LagRecord,
    OffsetSample,
    TraceEvent,
]

#: Found by hand against the old readers: each one escaped as an exception.
POISON: list[bytes] = [
    b"[" * 1100,  # RecursionError from json.loads
    b"{" * 5000,
    b'{"a":' * 3000,
    b'{"group": "g", "member": "m", "generation": ' + b"9" * 5000 + b"}",  # int too long
    b'{"controller_epoch": ' + b"9" * 401 + b', "group": "g", "issued_at": 1}',
    b'{"lag": [["t", 0, -Infinity]]}',
    b'{"issued_at": NaN}',
    b"\xff\xfe\x00",
    b"",
    b"null",
    b'"' + b"x" * 20_000 + b'"',
    b"[" * 100 + b"]" * 100,
]

nested = st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)
huge_numbers = st.integers(300, 6000).map(lambda n: b'{"generation": ' + b"7" * n + b"}")
any_bytes = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(POISON),
    nested,
    huge_numbers,
    st.text(max_size=200).map(str.encode),
)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("payload", POISON, ids=range(len(POISON)))
def test_poison_is_a_decode_error(model: type[Any], payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(model, payload, "t[0]@5")


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@settings(max_examples=300, deadline=None)
@given(payload=any_bytes)
def test_any_bytes_decode_to_a_record_or_a_decode_error(model: type[Any], payload: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(model, payload, "fuzz")


def test_numbers_past_int64_are_refused_where_they_would_reach_a_metric() -> None:
    """A schema-valid fence with a 401-digit epoch used to stop the controller (the epoch
    gauge) after it had been written: every restart met it again."""
    fence = {"group": "g", "controller_epoch": 10**400, "issued_at": 1.0}
    with pytest.raises(DecodeError, match="controller_epoch"):
        decode(Fence, json.dumps(fence).encode(), "s")
    at_limit = {**fence, "controller_epoch": MAX_COUNTER}
    assert decode(Fence, json.dumps(at_limit).encode(), "s").controller_epoch == MAX_COUNTER
    with pytest.raises(DecodeError, match="issued_at"):
        decode(
            Fence, json.dumps({**fence, "controller_epoch": 1, "issued_at": 1e300}).encode(), "s"
        )


@settings(max_examples=500, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=60), st.text(max_size=60).map(str.encode)))
def test_any_key_splits_into_valid_names_or_a_decode_error(key: bytes | None) -> None:
    for parts in (2, 3):
        try:
            fields = split_key(key, "fuzz", parts)
        except DecodeError:
            continue
        assert len(fields) == parts
        assert all(f and " " not in f and "/" not in f for f in fields)
        if parts == 3:
            assert 0 <= int(fields[2]) < 2**31


@pytest.mark.parametrize("key", [b"g/bad member", b"g/" + b"m" * 300, b"g/\xff", b"g/m/x"])
def test_keys_outside_the_name_rules_are_refused(key: bytes) -> None:
    with pytest.raises(DecodeError, match="key"):
        split_key(key, "s")


class Msg:
    """A message as aiokafka hands it over."""

    topic = "ballast.assignments"
    partition = 3
    offset = 17

    def __init__(self, key: bytes | None, value: bytes | None, headers: list[Any]) -> None:
        self.key, self.value, self.headers = key, value, headers


headers = st.lists(
    st.tuples(
        st.sampled_from([GENERATION_HEADER, EPOCH_HEADER, SIGNATURE_HEADER, KEY_ID_HEADER, "x"]),
        st.one_of(
            st.none(),  # Kafka allows a header without a value
            st.binary(max_size=70),
            st.sampled_from([b"1", b"9" * 30, b"-1", b"\xff"]),
        ),
    ),
    max_size=3,
)
_KEY = Signer(Ed25519PrivateKey.generate())


@settings(max_examples=500, deadline=None)
@given(
    key=st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"g", b"g/m", b"g/m/x"])),
    value=st.one_of(st.none(), any_bytes),
    hdrs=headers,
    signed=st.booleans(),
)
def test_a_log_entry_never_raises(
    key: bytes | None, value: bytes | None, hdrs: list[Any], signed: bool
) -> None:
    problems: list[str] = []
    entry = log_entry(Msg(key, value, hdrs), problems.append, _KEY.verifier if signed else None)
    assert (entry is None) == bool(problems)
    if problems:
        assert "ballast.assignments[3]@17" in problems[0]  # where: topic, partition, offset


@pytest.mark.parametrize("name", [SIGNATURE_HEADER, KEY_ID_HEADER, GENERATION_HEADER, "x"])
def test_a_header_without_a_value_spoils_a_signed_record_and_raises_nothing(name: str) -> None:
    """A well-formed body (so the reader gets as far as the signature) with one header's
    value null: with a verifier this used to raise TypeError, which in a takeover's read
    stopped the takeover."""
    value = Assignment(
        group="g", member="m", generation=1, controller_epoch=1, partitions=[], topics=["t"],
        issued_at=1.0,
    ).encode()  # fmt: skip
    signed = _KEY.sign("assignments", b"g/m", value)
    hdrs = [(n, None if n == name else raw) for n, raw in signed] + (
        [(name, None)] if name not in dict(signed) else []
    )
    problems: list[str] = []
    assert log_entry(Msg(b"g/m", value, hdrs), problems.append, _KEY.verifier) is None
    assert "has no value" in problems[0]
    assert _KEY.verifier.problem("constraints", b"g", value, hdrs) is not None  # the other topic


def test_a_poison_assignment_record_is_skipped_and_reported_with_its_place() -> None:
    problems: list[str] = []
    assert log_entry(Msg(b"g1/w1", b"[" * 1100, []), problems.append) is None
    assert problems
    assert "ballast.assignments[3]@17 key b'g1/w1'" in problems[0]


def test_headers_out_of_range_spoil_the_record() -> None:
    value = json.dumps(
        {
            "group": "g",
            "member": "m",
            "generation": 1,
            "controller_epoch": 1,
            "partitions": [],
            "issued_at": 1.0,
        }
    ).encode()
    for raw in (b"9" * 401, b"-3", b"1e9", str(MAX_COUNTER + 1).encode()):
        problems: list[str] = []
        assert log_entry(Msg(b"g/m", value, [(EPOCH_HEADER, raw)]), problems.append) is None
    assert log_entry(Msg(b"g/m", None, [(EPOCH_HEADER, b"12")])) is not None


@settings(max_examples=500, deadline=None)
@given(data=any_bytes)
def test_group_protocol_user_data_is_a_claim_or_nothing(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        UserData.read(data)
    assignor = group_assignor("lagsticky")
    claims = assignor._claims("m", data)
    assert claims.generation >= -1
    assignor.on_assignment(ConsumerProtocolMemberAssignment(0, [], data))
    assert -1 <= assignor.generation <= MAX_COUNTER


def test_an_infinite_lag_in_user_data_is_a_malformed_claim_not_a_failed_rebalance() -> None:
    assignor = group_assignor("lagsticky")
    data = b'{"v": 1, "generation": 3, "owned": [["t", 0]], "lag": [["t", 0, -Infinity]]}'
    assert assignor._claims("m", data).owned == []
    assert assignor.malformed == 1


def test_an_application_lag_source_with_wild_numbers_never_fails_a_join() -> None:
    from assignors import TopicPartition  # noqa: PLC0415

    tp = TopicPartition("t", 0)
    assignor = group_assignor("lagsticky", lag=lambda: {tp: float("inf")})  # type: ignore[dict-item]
    assignor.owned = [tp]
    assert json.loads(assignor.metadata(["t"]).user_data)["generation"] == -1


READERS: list[Callable[[int, bytes], object]] = [
    read_metadata,
    read_list_offsets,
    read_offset_fetch,
]


@pytest.mark.parametrize("read", READERS, ids=lambda r: r.__name__)
@settings(max_examples=300, deadline=None)
@given(version=st.integers(0, 12), body=st.binary(max_size=200))
def test_a_broker_answer_is_read_or_a_raw_decode_error(
    read: Callable[[int, bytes], object], version: int, body: bytes
) -> None:
    with contextlib.suppress(RawDecodeError):
        read(version, body)


def test_a_negative_partition_in_an_answer_is_an_error() -> None:
    from aiokafka.protocol import offset  # noqa: PLC0415

    body = offset.OffsetResponse_v1([("t", [(-4, 0, 0, 7)])]).encode()
    with pytest.raises(RawDecodeError, match="partition -4"):
        read_list_offsets(1, body)
    negative = offset.OffsetResponse_v1([("t", [(4, 0, 0, -7)])]).encode()
    assert read_list_offsets(1, negative).failed == [("t", 4)]  # asked again, not believed


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Presence] = []

    def sink(self) -> Sink:
        return Sink(self.seen.append, lambda *_: None, frozenset({"g"}))


def _cfg() -> Config:
    return Config.model_validate({"groups": [{"name": "g"}]})


def test_a_poison_presence_on_mqtt_is_counted_not_raised() -> None:
    metrics = Metrics()
    handler = MqttPresence(_cfg(), Recorder().sink(), metrics)
    for payload in POISON:
        if payload:
            handler._handle("ballast/g/members/w1", payload)
    assert metrics.invalid.labels("presence")._value.get() == len([p for p in POISON if p])


def test_a_heartbeat_tombstone_with_a_bad_key_is_counted_not_raised() -> None:
    metrics = Metrics()
    heartbeats = KafkaHeartbeats(_cfg(), Recorder().sink(), metrics)
    heartbeats._handle(b"g/bad member", None, "ballast.heartbeats[0]@1")
    assert metrics.invalid.labels("heartbeat")._value.get() == 1
