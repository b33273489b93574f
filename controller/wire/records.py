"""Wire schemas: one place for every record Ballast reads or writes.

Each record is JSON with a ``version`` field. Decoders never raise anything but
``DecodeError``, whose message names the source, the field and the reason, so the daemon
can count, log and drop a bad message and carry on. ``docs/protocol.md`` embeds the JSON
Schemas generated from these models (``ballast schema``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from assignors import MAX_CAPACITY, MAX_PARTITION, TopicPartition, check_rack

SCHEMA_VERSION: Literal[1] = 1
_new_tuple = tuple.__new__
#: Larger payloads are rejected before parsing (a member of 10 000 partitions is ~200 KiB).
MAX_PAYLOAD_BYTES = 1 << 20

#: Kafka's characters for topic and group names; member ids may also hold ``:`` and ``@``.
#: The records' fields and the keys (``split_key``) are checked against the same ones.
_NAME_CHARS = r"[A-Za-z0-9._\-]"
_MEMBER_CHARS = r"[A-Za-z0-9._\-:@]"
Name = Annotated[str, Field(min_length=1, max_length=249, pattern=rf"^{_NAME_CHARS}+$")]
MemberId = Annotated[str, Field(min_length=1, max_length=255, pattern=rf"^{_MEMBER_CHARS}+$")]
#: Kafka's partition numbers are 32-bit, its offsets (so a lag in offsets) 64-bit: larger
#: numbers are nobody's partition or lag, and would overflow downstream (a float, a pid,
#: a metric). Epochs and generations stay a step below, so that the next one fits too.
MAX_OFFSET = (1 << 63) - 1
MAX_COUNTER = (1 << 62) - 1
NonNegative = Annotated[int, Field(ge=0, le=MAX_COUNTER, strict=True)]
#: A signing key's id (``signing.key_id``): 16 hex digits.
KeyId = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
#: Unix seconds: finite, not before 1970 and not after the year 5138.
Timestamp = Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]
PositiveTimestamp = Annotated[float, Field(gt=0, le=1e11, allow_inf_nan=False)]
PartitionNumber = Annotated[int, Field(ge=0, le=MAX_PARTITION, strict=True)]
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET, strict=True)]
Partition = tuple[Name, PartitionNumber]
#: A lag in seconds (weighed in ms) or a rate (records/s) whose weight fits in 64 bits.
TimeLag = Annotated[float, Field(ge=0, le=1e15)]
Rate = Annotated[float, Field(ge=0, le=1e18)]
#: ``client.rack`` as the assignors accept it (``assignors.racks.check_rack``: printable,
#: no whitespace); the pattern says so in the published schema.
Rack = Annotated[
    str,
    Field(min_length=1, max_length=255, pattern=r"^\S+$"),
    AfterValidator(lambda rack: check_rack(rack, "rack")),
]

#: A member's capacity weight (``assignors.capacity``): balance is proportional to it.
Capacity = Annotated[float, Field(gt=0, le=MAX_CAPACITY, allow_inf_nan=False)]


class DecodeError(ValueError):
    """A message from outside was rejected; ``str()`` says what and where."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class _Record(BaseModel):
    #: No infinities or NaN: JSON has none, and a time or weight of ``Infinity`` (which
    #: Python's json writes) breaks every computation it reaches.
    #: Only keys go into the parser's string cache: values (member names, topics) come
    #: from outside, and caching them only fills the cache with strangers' names.
    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, cache_strings="keys"
    )

    version: Literal[1] = SCHEMA_VERSION

    def encode(self) -> bytes:
        return self.model_dump_json().encode()


def _partitions(pairs: list[tuple[str, int]]) -> frozenset[TopicPartition]:
    """Validated ``(topic, partition)`` pairs as partitions, built in C: the named tuple's
    own constructor is a Python function, a few times slower per partition (every
    presence and every applied record builds its member's whole list)."""
    return frozenset(map(_new_tuple, repeat(TopicPartition, len(pairs)), pairs))


def _sorted_unique(value: list[tuple[str, int]]) -> list[tuple[str, int]]:
    if len(set(value)) != len(value):
        raise ValueError("lists a partition more than once")
    return sorted(value)


class Presence(_Record):
    """A member's announcement, retained on ``ballast/<group>/members/<member>`` (MQTT) or
    keyed ``<group>/<member>`` on the heartbeat topic."""

    group: Name
    member: MemberId
    topics: list[Name] = Field(max_length=10_000)
    #: Random per client process: two live instances under one member id are a duplicate.
    instance: Annotated[str, Field(max_length=64)] | None = None
    #: ``draining``: about to leave, still reading: move its partitions off through
    #: revokes and give it none (it leaves once it holds nothing). ``leaving`` right
    #: before a clean leave: reassign at once, no leave_grace.
    state: Literal["active", "draining", "leaving"] = "active"
    rack: Rack | None = None
    capacity: Capacity | None = None
    #: Generation of the last assignment record this member applied (-1: none yet).
    generation: Annotated[int, Field(ge=-1, le=MAX_COUNTER, strict=True)] = -1
    partitions: list[Partition] = Field(default_factory=list, max_length=1_000_000)
    #: Optional self-reported lag of held partitions: ``[[topic, partition, lag], ...]``.
    lag: list[tuple[Name, PartitionNumber, Offset]] | None = None
    #: Ids of the public keys the member verifies its grants with (``ballast-key-id``);
    #: absent: it verifies nothing. A controller signing with none of them cannot be
    #: followed by it: it gives it nothing and never times out what it still reads.
    verify_keys: list[KeyId] | None = Field(default=None, max_length=8)
    sent_at: Timestamp | None = None

    _check_partitions = field_validator("partitions")(_sorted_unique)

    @model_validator(mode="after")
    def _lag_of_held_partitions(self) -> Presence:
        """Lag is reported for what the member holds (and the controller checks that
        against what it granted): readings of other partitions are nobody's to report."""
        if self.lag:
            held = set(self.partitions)
            stray = sorted({(t, p) for t, p, _ in self.lag} - held)
            if stray:
                shown = ", ".join(f"{t}-{p}" for t, p in stray[:5])
                raise ValueError(f"lag names partitions not in partitions: {shown}")
        return self

    def held(self) -> frozenset[TopicPartition]:
        return _partitions(self.partitions)


class Assignment(_Record):
    """Value of key ``<group>/<member>`` on the compacted assignments topic."""

    group: Name
    member: MemberId
    generation: NonNegative
    controller_epoch: NonNegative
    partitions: list[Partition]
    #: Partitions this member was asked to release and has not yet confirmed. Not for
    #: consuming: it lets a restarted controller resume in-flight handoffs, which the
    #: compacted history alone cannot tell it.
    revoking: list[Partition] = Field(default_factory=list)
    #: The subscription the assignment was computed for (lets a restarted controller
    #: rebuild its state before presence arrives).
    topics: list[Name] = Field(default_factory=list)
    issued_at: Timestamp
    #: Unix time the controller lost this member's presence (it is in leave grace). A
    #: new leader counts the grace from here, so takeovers do not restart the clock.
    absent_since: PositiveTimestamp | None = None
    #: The member's client process (``Presence.instance``) this grant was issued to. A
    #: restarted process consumes nothing from a record issued to its predecessor: it
    #: waits until the controller has seen it and issued the record again. None: any.
    instance: Annotated[str, Field(max_length=64)] | None = None

    _check_partitions = field_validator("partitions", "revoking")(_sorted_unique)

    def issued_to(self, instance: str | None) -> bool:
        """May the client process ``instance`` consume what this record grants?"""
        return self.instance is None or self.instance == instance

    def held(self) -> frozenset[TopicPartition]:
        return _partitions(self.partitions)

    def releasing(self) -> frozenset[TopicPartition]:
        return _partitions(self.revoking)


class Fence(_Record):
    """Value of key ``<group>`` (no ``/``), written by a new leader to *every* partition of
    the assignments topic before anything else in its tenure. A reader of a partition then
    ignores every later record of the group with a lower epoch (docs/fencing.md)."""

    group: Name
    controller_epoch: NonNegative
    #: The replica that took the epoch, for people reading the log.
    replica: Annotated[str, Field(max_length=255)] | None = None
    issued_at: Timestamp


class Pin(BaseModel):
    """One partition pinned to one member."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: Name
    partition: PartitionNumber
    member: MemberId


def _one_pin_each(pins: list[Pin]) -> list[Pin]:
    seen: dict[tuple[str, int], str] = {}
    for pin in pins:
        where = (pin.topic, pin.partition)
        if where in seen:
            raise ValueError(f"{pin.topic}:{pin.partition} is pinned twice")
        seen[where] = pin.member
    return sorted(pins, key=lambda p: (p.topic, p.partition))


class ConstraintSet(BaseModel):
    """Operator constraints on one group (``assignors.constraints``): the same shape in
    the config (``groups[].constraints``), the admin API and the constraints topic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pins: Annotated[list[Pin], AfterValidator(_one_pin_each)] = Field(
        default_factory=list, max_length=100_000
    )
    #: member -> the most partitions it may hold, its pins included.
    max_partitions: dict[MemberId, Annotated[int, Field(ge=0, le=10_000_000, strict=True)]] = Field(
        default_factory=dict, max_length=100_000
    )
    #: member -> the rack it is treated as in, whatever ``client.rack`` it declares.
    racks: dict[MemberId, Rack] = Field(default_factory=dict, max_length=100_000)

    def __bool__(self) -> bool:
        return bool(self.pins or self.max_partitions or self.racks)

    def pinned(self) -> dict[TopicPartition, str]:
        return {TopicPartition(p.topic, p.partition): p.member for p in self.pins}

    def over(self, top: ConstraintSet) -> ConstraintSet:
        """These constraints with ``top``'s laid over them, entry by entry."""
        pins = {(p.topic, p.partition): p for p in self.pins}
        pins.update({(p.topic, p.partition): p for p in top.pins})
        return ConstraintSet(
            pins=list(pins.values()),
            max_partitions={**self.max_partitions, **top.max_partitions},
            racks={**self.racks, **top.racks},
        )


class ConstraintPatch(BaseModel):
    """Body of ``PATCH /v1/groups/<group>/constraints``: changes to the admin API's
    constraints (the config's stay). ``pins`` adds or moves pins, ``unpin`` removes them;
    in ``max_partitions`` and ``racks`` a null removes the member's entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pins: list[Pin] = Field(default_factory=list, max_length=100_000)
    unpin: list[Partition] = Field(default_factory=list, max_length=100_000)
    max_partitions: dict[
        MemberId, Annotated[int, Field(ge=0, le=10_000_000, strict=True)] | None
    ] = Field(default_factory=dict, max_length=100_000)
    racks: dict[MemberId, Rack | None] = Field(default_factory=dict, max_length=100_000)

    def applied_to(self, overrides: ConstraintSet) -> ConstraintSet:
        pins = {(p.topic, p.partition): p for p in overrides.pins}
        for topic, partition in self.unpin:
            pins.pop((topic, partition), None)
        pins.update({(p.topic, p.partition): p for p in self.pins})
        caps = {**overrides.max_partitions, **self.max_partitions}
        racks = {**overrides.racks, **self.racks}
        return ConstraintSet(
            pins=list(pins.values()),
            max_partitions={m: c for m, c in caps.items() if c is not None},
            racks={m: r for m, r in racks.items() if r is not None},
        )


def _members(value: list[str]) -> list[str]:
    return sorted(set(value))


class ConstraintsRecord(_Record):
    """Value of key ``<group>`` on the compacted constraints topic: what operators set
    through the admin API (the config's constraints are not stored), acknowledged before
    the controller acts on it, read at every start and takeover. The record with the
    highest ``(controller_epoch, sequence)`` counts (the sequence is the record's
    ``ballast-sequence`` header: ``constraints_newer``): a deposed leader's late write
    loses to its successor's, and a replayed record to the one that followed it."""

    group: Name
    controller_epoch: NonNegative
    constraints: ConstraintSet
    #: ``ballast pause``: the group publishes nothing until ``resume``.
    paused: bool = False
    #: ``ballast drain``: members kept empty until ``undrain`` (or until they leave).
    drained: Annotated[list[MemberId], AfterValidator(_members)] = Field(
        default_factory=list, max_length=100_000
    )
    #: Who wrote it and when, for people reading the topic.
    replica: Annotated[str, Field(max_length=255)] | None = None
    issued_at: Timestamp


class LagRecord(_Record):
    """Value of key ``<group>/<topic>/<partition>`` on the lag topic (Spark pipeline)."""

    group: Name
    topic: Name
    partition: PartitionNumber
    lag: Offset
    #: Seconds behind, estimated from (offset, time) points; absent when unknown.
    time_lag: TimeLag | None = None
    produce_rate: Rate | None = None
    consume_rate: Rate | None = None
    observed_at: Timestamp

    def weight(self, kind: Literal["offsets", "time", "rate"]) -> int | None:
        """The assignment weight ``lag.weight`` asks for, as the integer the assignors
        balance (time in ms, rate rounded up); None when this record does not carry it."""
        if kind == "offsets":
            return self.lag
        if kind == "time":
            return None if self.time_lag is None else math.ceil(self.time_lag * 1000)
        return None if self.produce_rate is None else math.ceil(self.produce_rate)


class OffsetSample(_Record):
    """Value of key ``<group>/<topic>/<partition>`` on the offset-samples topic: one raw
    observation of a partition, the input of the Spark lag job (docs/pipeline.md)."""

    group: Name
    topic: Name
    partition: PartitionNumber
    #: The group's committed offset (next to read); None: the group has not committed.
    committed: Offset | None = None
    #: High watermark at ``sampled_at``.
    log_end: Offset
    #: Earliest retained offset, when the sampler knows it (lag of an uncommitted
    #: partition under ``auto_offset_reset: earliest``).
    log_start: Offset | None = None
    #: Event time, Unix seconds.
    sampled_at: PositiveTimestamp
    #: Who observed it: the controller's offset poller or a client's self-report.
    source: Literal["controller", "client"] = "controller"

    @model_validator(mode="after")
    def _ordered(self) -> OffsetSample:
        if self.committed is not None and self.committed > self.log_end:
            raise ValueError(f"committed {self.committed} is past log_end {self.log_end}")
        if self.log_start is not None and self.log_start > self.log_end:
            raise ValueError(f"log_start {self.log_start} is past log_end {self.log_end}")
        return self


#: One partition's reading for ``encode_samples``: topic, partition, committed, log end,
#: log start (the fields of ``OffsetSample`` a poll varies).
SampleRow = tuple[str, int, int | None, int, int | None]


def encode_samples(
    group: str, sampled_at: float, rows: Iterable[SampleRow], refused: list[str]
) -> Iterator[tuple[str, int, bytes, bytes]]:
    """``(topic, partition, partition_key(...), OffsetSample(...).encode())`` of each row
    the record accepts; the reason for each one it refuses goes to ``refused``.

    The model validates and writes one sample per topic, and the others are checked
    and written from the text it gave: through the model each sample cost ~10 µs, a
    second of a poll of 100 000 partitions. A row the quick checks are not sure of goes
    through the model, so what is accepted, refused and written is the model's."""
    templates: dict[str, tuple[str, str] | None] = {}
    for row in rows:
        topic, partition, committed, log_end, log_start = row
        if topic in templates:
            template = templates[topic]
        else:
            template = templates[topic] = _sample_template(group, topic, sampled_at)
        if template is not None and _plainly_valid(partition, committed, log_end, log_start):
            head, tail = template
            value = (
                f'{head}{partition},"committed":{"null" if committed is None else committed},'
                f'"log_end":{log_end},"log_start":{"null" if log_start is None else log_start}'
                f"{tail}"
            ).encode()
        else:
            try:
                value = _sample(group, sampled_at, row).encode()
            except ValidationError as exc:
                refused.append(f"{topic}/{partition}: {exc.errors()[0]['msg']}")
                continue
        yield topic, partition, partition_key(group, topic, partition), value


def _sample(group: str, sampled_at: float, row: SampleRow) -> OffsetSample:
    topic, partition, committed, log_end, log_start = row
    return OffsetSample(
        group=group,
        topic=topic,
        partition=partition,
        committed=committed,
        log_end=log_end,
        log_start=log_start,
        sampled_at=sampled_at,
    )


def _sample_template(group: str, topic: str, sampled_at: float) -> tuple[str, str] | None:
    """The text of a sample of ``topic`` before its partition number and after its
    log start, as the model writes it; ``None`` if the model refuses the group, topic or
    time (every row then goes through the model) or writes something else."""
    try:
        text = _sample(group, sampled_at, (topic, 0, None, 0, None)).model_dump_json()
    except ValidationError:
        return None
    head = text[: text.find('"partition":') + len('"partition":')]
    tail = text[text.find(',"sampled_at":') :]
    middle = '0,"committed":null,"log_end":0,"log_start":null'
    return (head, tail) if head + middle + tail == text else None


def _plainly_valid(
    partition: object, committed: object, log_end: object, log_start: object
) -> bool:
    """Exact ints in range, committed and log start not past the log end: what
    ``OffsetSample`` accepts of these fields, checked without it."""
    return (
        type(partition) is int
        and 0 <= partition <= MAX_PARTITION
        and type(log_end) is int
        and 0 <= log_end <= MAX_OFFSET
        and (committed is None or (type(committed) is int and 0 <= committed <= log_end))
        and (log_start is None or (type(log_start) is int and 0 <= log_start <= log_end))
    )


class TraceEvent(_Record):
    """One line of a recorded or synthetic fleet trace (``ballast run --record``), the input
    of ``ballast pipeline backtest``. Events of one group are replayed in ``t`` order;
    events with equal ``t`` form one step (one assignment computed for them together)."""

    group: Name
    #: Seconds since the start of the trace.
    t: Annotated[float, Field(ge=0)]
    kind: Literal["join", "leave", "partitions", "lag"]
    #: ``join``/``leave``: the member; a join of a known member changes its subscription.
    member: MemberId | None = None
    topics: list[Name] | None = None
    #: ``partitions``: partition count per topic.
    partitions: (
        dict[Name, Annotated[int, Field(ge=0, le=MAX_PARTITION + 1, strict=True)]] | None
    ) = None
    #: ``lag``: readings ``[[topic, partition, lag], ...]``; other partitions keep theirs.
    lag: list[tuple[Name, PartitionNumber, Offset]] | None = None

    @model_validator(mode="after")
    def _fields_for_kind(self) -> TraceEvent:
        need = {
            "join": ("member", "topics"),
            "leave": ("member",),
            "partitions": ("partitions",),
            "lag": ("lag",),
        }[self.kind]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.kind} event needs {', '.join(missing)}")
        return self


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """One record as it sits in the topic (``record`` is None for a tombstone)."""

    group: str
    member: str
    record: Assignment | None
    partition: int
    offset: int
    #: From the record's headers (present on tombstones too); None if absent.
    generation: int | None = None
    epoch: int | None = None
    #: The id of the accepted key that signed it (None: unsigned, or read unverified).
    signed_by: str | None = None


@dataclass(frozen=True, slots=True)
class LoggedFence:
    """A fence marker as it sits in the topic."""

    group: str
    epoch: int
    partition: int
    offset: int
    signed_by: str | None = None


Logged = LoggedRecord | LoggedFence

R = TypeVar("R", bound=BaseModel)


def decode(model: type[R], payload: bytes | None, source: str) -> R:
    """Parse and validate one message; ``DecodeError`` (naming the first problems) is the
    only error, whatever the bytes: deep nesting, huge numbers and invalid UTF-8 included.
    """
    if payload is None:
        raise DecodeError(source, "empty payload where a record was expected")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise DecodeError(source, f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    try:  # parsed and validated in one pass; pydantic's parser caps nesting itself
        return model.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":  # the message says where: line and column
            raise DecodeError(source, f"not JSON: {first['msg']}") from None
        raise DecodeError(source, problems(exc)) from None
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise DecodeError(source, f"unreadable: {type(exc).__name__}") from None


def problems(exc: ValidationError) -> str:
    """The first few problems of a rejected record, each as ``field.path: message``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
        for e in exc.errors()[:5]
    )


def presence_topic(prefix: str, group: str, member: str) -> str:
    """The MQTT topic of a member's retained presence."""
    return f"{prefix}/{group}/members/{member}"


def assignment_key(group: str, member: str) -> bytes:
    return f"{group}/{member}".encode()


def fence_key(group: str) -> bytes:
    """Key of a group's fence markers: the group name alone (member keys have a ``/``)."""
    return group.encode()


def partition_key(group: str, topic: str, partition: int) -> bytes:
    """Key of lag records and offset samples: one per partition a group reads."""
    return f"{group}/{topic}/{partition}".encode()


_NAME = re.compile(rf"{_NAME_CHARS}{{1,249}}")
_MEMBER = re.compile(rf"{_MEMBER_CHARS}{{1,255}}")
_PARTITION = re.compile(r"[0-9]{1,10}")
#: Whole valid keys in one match (the common case); the field checks say what is wrong.
_KEYS = {
    2: re.compile(rf"{_NAME.pattern}/{_MEMBER.pattern}"),
    3: re.compile(rf"{_NAME.pattern}/{_NAME.pattern}/{_PARTITION.pattern}"),
}


def is_member_id(text: str) -> bool:
    """Would ``text`` pass as a member id in every record and key?"""
    return _MEMBER.fullmatch(text) is not None


def split_key(key: bytes | None, source: str, parts: int = 2) -> list[str]:
    """``b"group/member"`` -> ``["group", "member"]``; with ``parts=3``
    ``b"group/topic/partition"``. Each field is checked as the records check it (names,
    member ids, partition numbers), so a key is good to index state by."""
    if not key:
        raise DecodeError(source, "record without a key")
    if len(key) > 1024:
        raise DecodeError(source, f"key of {len(key)} bytes is longer than any valid key")
    try:
        text = key.decode()
    except UnicodeDecodeError:
        raise DecodeError(source, "key is not UTF-8") from None
    fields = text.split("/")
    whole = _KEYS.get(parts)
    if whole is not None and whole.fullmatch(text) and (parts == 2 or len(fields[2]) < 10):
        return fields  # below 10 digits, a partition number is in range
    if len(fields) != parts or not all(fields):
        raise DecodeError(source, f"key {text!r} is not {'/'.join(['<x>'] * parts)}")
    last = _MEMBER if parts == 2 else _PARTITION
    checks = [_NAME, *([_NAME] * (parts - 2)), last]
    for field_, check in zip(fields, checks, strict=True):
        if not check.fullmatch(field_):
            raise DecodeError(source, f"key {text!r}: {field_!r} is not a valid name")
    if parts == 3 and int(fields[2]) > MAX_PARTITION:
        raise DecodeError(source, f"key {text!r}: partition out of range")
    return fields


def json_schemas() -> dict[str, dict[str, Any]]:
    return {
        "presence": Presence.model_json_schema(),
        "assignment": Assignment.model_json_schema(),
        "fence": Fence.model_json_schema(),
        "constraints": ConstraintsRecord.model_json_schema(),
        "lag": LagRecord.model_json_schema(),
        "offset_sample": OffsetSample.model_json_schema(),
        "trace_event": TraceEvent.model_json_schema(),
    }


#: Header of a constraints record: grows with every record one tenure writes (from 1),
#: covered by the signature. A header, not a field, so that readers of older releases
#: (strict about fields) still read the record.
SEQUENCE_HEADER = "ballast-sequence"


def constraints_newer(
    record: ConstraintsRecord,
    sequence: int | None,
    held: ConstraintsRecord | None,
    after: int | None,
) -> bool:
    """Whether ``record`` (with its ``sequence`` header) replaces ``held`` (with
    ``after``): the one rule of the constraints topic. Records of a controller that
    numbered none: the later one wins a tie, as it did."""
    if held is None:
        return True
    if sequence is None and after is None:
        return record.controller_epoch >= held.controller_epoch
    return (record.controller_epoch, sequence or 0) > (held.controller_epoch, after or 0)
