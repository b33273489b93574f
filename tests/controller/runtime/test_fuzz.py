"""Fuzzing every decoder and every handler of outside input with hypothesis.

Decoders (presence, assignment, lag, offset sample, trace event, config) may only raise
their own error. Handlers (MQTT presence, Kafka heartbeats, lag records) must never
raise, and must count every rejection in ``ballast_invalid_records_total``: each input
ends up accepted, ignored (another controller's group) or counted, never lost silently.
The number of inputs tried is printed at the end of the module (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import string
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from controller.config import Config, load_config
from controller.core.group import GroupState, RejectedError
from controller.core.rebalance import GroupTuning
from controller.core.recovery import Recovered
from controller.errors import InputError
from controller.runtime.lag_ingest import LagIngest
from controller.runtime.membership import KafkaHeartbeats, MqttPresence, Sink
from controller.runtime.metrics import Metrics
from controller.runtime.ownership import state_clock
from controller.runtime.replica_state import ManagedGroup, ReplicaState
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER, log_entry
from controller.wire.fencing import AssignmentView
from controller.wire.records import (
    Assignment,
    DecodeError,
    LagRecord,
    OffsetSample,
    Presence,
    TraceEvent,
    decode,
    split_key,
)

EXAMPLES = 1000
TRIED: Counter[str] = Counter()

GOOD: dict[type[Any], dict[str, Any]] = {
    Presence: {
        "group": "g",
        "member": "m-1",
        "topics": ["orders"],
        "generation": 3,
        "partitions": [["orders", 1]],
    },
    Assignment: {
        "group": "g",
        "member": "m-1",
        "generation": 2,
        "controller_epoch": 1,
        "partitions": [["orders", 0]],
        "issued_at": 1.0,
    },
    LagRecord: {"group": "g", "topic": "orders", "partition": 1, "lag": 10, "observed_at": 1.0},
    OffsetSample: {
        "group": "g",
        "topic": "orders",
        "partition": 1,
        "committed": 5,
        "log_end": 9,
        "sampled_at": 1.0,
    },
    TraceEvent: {"group": "g", "t": 0, "kind": "join", "member": "m", "topics": ["orders"]},
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
raw_bytes = st.one_of(
    st.binary(max_size=400),
    st.text(max_size=400).map(str.encode),
    json_values.map(lambda v: json.dumps(v).encode()),
)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nfuzz inputs tried: {dict(sorted(TRIED.items()))}, total {sum(TRIED.values())}")


def _mutated(model: type[Any]) -> st.SearchStrategy[bytes]:
    """A valid record with some fields replaced, removed or added."""
    good = GOOD[model]
    keys = st.sampled_from([*good, "version", "extra", "state", "lag", "revoking"])
    return st.tuples(
        st.dictionaries(keys, json_values, max_size=5), st.sets(st.sampled_from(list(good)))
    ).map(
        lambda t: json.dumps({k: v for k, v in {**good, **t[0]}.items() if k not in t[1]}).encode()
    )


@pytest.mark.parametrize("model", list(GOOD), ids=lambda m: m.__name__)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decoders_raise_only_decode_error(model: type[Any], data: st.DataObject) -> None:
    payload = data.draw(st.one_of(raw_bytes, _mutated(model)))
    TRIED[f"decode {model.__name__}"] += 1
    with contextlib.suppress(DecodeError):
        decode(model, payload, "fuzz")


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Presence] = []
        self.gone: list[tuple[str, str]] = []

    def sink(self) -> Sink:
        return Sink(
            self.seen.append, lambda g, m, _since: self.gone.append((g, m)), frozenset({"g"})
        )


def _cfg() -> Config:
    return Config.model_validate({"groups": [{"name": "g"}]})


topics = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda g, m: f"ballast/{g}/members/{m}",
        st.sampled_from(["g", "other", ""]),
        st.sampled_from(["m-1", "m-2", "", "a/b"]),
    ),
)


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(topic=topics, payload=st.one_of(raw_bytes, _mutated(Presence), st.just(b"")))
def test_mqtt_presence_handler_counts_every_rejection(topic: str, payload: bytes) -> None:
    TRIED["mqtt presence"] += 1
    metrics, rec = Metrics(), Recorder()
    presence = MqttPresence(_cfg(), rec.sink(), metrics)
    presence._handle(topic, payload)
    invalid = metrics.invalid.labels("presence")._value.get()
    parts = topic.split("/")
    foreign = len(parts) == 4 and parts[2] == "members" and parts[1] != "g"
    assert len(rec.seen) + len(rec.gone) + invalid + foreign == 1


def test_presence_whose_topic_and_body_disagree_is_rejected() -> None:
    metrics, rec = Metrics(), Recorder()
    presence = MqttPresence(_cfg(), rec.sink(), metrics)
    body = json.dumps({**GOOD[Presence], "member": "m-2"}).encode()
    presence._handle("ballast/g/members/m-1", body)  # m-1 writing m-2's announcement
    assert rec.seen == []
    assert metrics.invalid.labels("presence")._value.get() == 1


keys = st.one_of(st.none(), st.binary(max_size=30), st.sampled_from([b"g/m-1", b"other/m", b"g/"]))


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(key=keys, value=st.one_of(st.none(), raw_bytes, _mutated(Presence)))
@example(key=b"\x00/\x00", value=None)  # two fields, neither a name: invalid, not foreign
def test_heartbeat_handler_counts_every_rejection(key: bytes | None, value: bytes | None) -> None:
    TRIED["kafka heartbeat"] += 1
    metrics, rec = Metrics(), Recorder()
    heartbeats = KafkaHeartbeats(_cfg(), rec.sink(), metrics)
    heartbeats._handle(key, value, "fuzz")
    invalid = metrics.invalid.labels("heartbeat")._value.get()
    # Another group's heartbeat is not ours to count; a key that names no group is.
    try:
        group, _ = split_key(key, "fuzz")
    except DecodeError:
        group = "g"
    foreign = group != "g"
    assert len(rec.seen) + len(rec.gone) + invalid + foreign == 1


class Msg:
    topic, partition, offset = "ballast.lag", 0, 7

    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self.key, self.value = key, value


lag_keys = st.one_of(keys, st.sampled_from([b"g/orders/1", b"g/orders/99", b"other/orders/1"]))


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(key=lag_keys, value=st.one_of(st.none(), raw_bytes, _mutated(LagRecord)))
def test_lag_record_handler_counts_every_rejection(key: bytes | None, value: bytes | None) -> None:
    TRIED["lag record"] += 1
    asyncio.run(_lag_record_outcome(key, value))


_METRICS = Metrics()


async def _lag_record_outcome(key: bytes | None, value: bytes | None) -> None:
    state = ReplicaState()
    state.groups["g"] = ManagedGroup("g", GroupState("g", GroupTuning(), {"orders": 4}), 1)
    rejected: list[str] = []
    ingest = LagIngest(_cfg(), state, None, lambda source, _why: rejected.append(source), _METRICS)
    readings: dict[str, dict[Any, int | None]] = {}
    ingest.record(Msg(key, value), readings)
    invalid = rejected.count("lag")
    accepted = sum(len(v) for v in readings.values())
    assert accepted + invalid <= 1
    if accepted + invalid == 0:  # ignored: another group's, or a tombstone naming no partition
        assert key is not None
        fields = key.decode().split("/")
        assert len(fields) == 3
        assert value is None or fields[0] != "g"


# Numbers at and past Kafka's ranges (32-bit partitions, 64-bit offsets) and floats that
# JSON cannot carry but Python's json writes: what a validator must stop before the logic.
wild_ints = st.one_of(
    st.integers(-2, 5),
    st.integers(),
    st.sampled_from([2**31 - 1, 2**31, 2**40, 2**63 - 1, 2**63, 10**400]),
)
wild_floats = st.one_of(st.floats(), st.sampled_from([1e15, 1e18, 1e300]))


def _ticked(state: GroupState) -> None:
    for now in (1.0, 2.0, 3.0, 4.0):
        state.tick(now)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    held=st.lists(wild_ints, max_size=3, unique=True),
    values=st.lists(wild_ints, max_size=3),
    stray=st.lists(wild_ints, max_size=1),
)
def test_an_accepted_presence_never_makes_a_tick_raise(
    held: list[int], values: list[int], stray: list[int]
) -> None:
    """A decoder that lets a number through that the logic cannot take stops the group's
    loop at its next tick, not at the message: the handler tests above cannot see it."""
    TRIED["presence into ticks"] += 1
    lag = [["orders", p, v] for p, v in zip(held + stray, values, strict=False)]
    partitions = sorted(["orders", p] for p in held)
    body = json.dumps({**GOOD[Presence], "partitions": partitions, "lag": lag}).encode()
    try:
        p = decode(Presence, body, "fuzz")
    except DecodeError:
        return
    state = GroupState("g", GroupTuning(rebalance_delay=0), {"orders": 4})
    with contextlib.suppress(RejectedError):  # impossible claims: counted by the daemon
        state.on_presence(p, 0.0)
    _ticked(state)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    lag=wild_ints,
    time_lag=wild_floats,
    rate=wild_floats,
    observed_at=wild_floats,
    weight=st.sampled_from(["offsets", "time", "rate"]),
)
def test_an_accepted_lag_record_never_makes_a_tick_raise(
    lag: int, time_lag: float, rate: float, observed_at: float, weight: str
) -> None:
    TRIED["lag record into ticks"] += 1
    body = {
        **GOOD[LagRecord],
        "lag": lag,
        "time_lag": time_lag,
        "produce_rate": rate,
        "observed_at": observed_at,
    }
    asyncio.run(_lag_record_ticked(json.dumps(body).encode(), weight))


async def _lag_record_ticked(value: bytes, weight: str) -> None:
    state = ReplicaState()
    group = GroupState("g", GroupTuning(rebalance_delay=0), {"orders": 4})
    state.groups["g"] = ManagedGroup("g", group, 1)
    cfg = Config.model_validate(
        {"groups": [{"name": "g"}], "lag": {"weight": weight, "source": "topic"}}
    )
    ingest = LagIngest(cfg, state, None, lambda _source, _why: None, _METRICS)
    member = {**GOOD[Presence], "generation": -1, "partitions": []}
    group.on_presence(decode(Presence, json.dumps(member).encode(), "fuzz"), 0.0)
    readings: dict[str, dict[Any, int | None]] = {}
    ingest.record(Msg(b"g/orders/1", value), readings)
    group.on_lag({tp: v for tp, v in readings.get("g", {}).items() if v is not None}, 0.5)
    _ticked(group)


class LogMsg:
    """A message of the assignments topic as aiokafka hands it over."""

    topic = "ballast.assignments"

    def __init__(
        self, key: bytes, value: bytes | None, partition: int, offset: int, headers: list[Any]
    ) -> None:
        self.key, self.value, self.partition, self.offset = key, value, partition, offset
        self.headers = headers


#: Mostly in range, so that records are accepted and claim the same partitions.
near_ints = st.one_of(st.integers(0, 5), st.integers(0, 5), wild_ints)
logged_record = st.fixed_dictionaries(
    {
        "member": st.sampled_from(["m-1", "m-2", "m-3"]),
        "topic": st.sampled_from(["orders", "orders", "gone"]),
        "held": st.lists(near_ints, max_size=3, unique=True),
        "revoking": st.lists(near_ints, max_size=2, unique=True),
        "generation": near_ints,
        "epoch": near_ints,
        "absent_since": st.one_of(st.none(), st.none(), wild_floats),
        "topics": st.lists(st.sampled_from(["orders", "gone"]), max_size=2, unique=True),
        "partition": st.integers(0, 2),
        "tombstone": st.sampled_from([False, False, False, True]),
        "headers": st.sampled_from([[], [(GENERATION_HEADER, b"x"), (EPOCH_HEADER, b"-1")]]),
    }
)


def _claim(member: str, partitions: list[int], generation: int) -> dict[str, Any]:
    return {
        "member": member,
        "topic": "orders",
        "held": partitions,
        "revoking": [],
        "generation": generation,
        "epoch": 1,
        "absent_since": None,
        "topics": ["orders"],
        "partition": 0,
        "tombstone": False,
        "headers": [],
    }


@settings(max_examples=EXAMPLES, deadline=None)
@given(log=st.lists(logged_record, max_size=6))
@example(log=[_claim("m-1", [0, 1], 1), _claim("m-2", [1, 2], 2)])  # both hold orders-1
def test_a_takeover_from_any_accepted_log_never_makes_a_tick_raise(
    log: list[dict[str, Any]],
) -> None:
    """A new leader rebuilds each group from the assignments log, which anyone with write
    access may have filled: records of every field at its range's edges, on partitions of
    topics that are gone, conflicting, out of order, tombstoned. What the decoder and the
    fencing view accept must rebuild with one owner per partition, and tick (the
    supervisor would otherwise rebuild the failing group from the same log, over and
    over)."""
    TRIED["assignments log into ticks"] += 1
    view = AssignmentView()
    for offset, r in enumerate(log):
        body = {
            **GOOD[Assignment],
            "member": r["member"],
            "generation": r["generation"],
            "controller_epoch": r["epoch"],
            "partitions": sorted([r["topic"], p] for p in r["held"]),
            "revoking": sorted([r["topic"], p] for p in r["revoking"]),
            "topics": r["topics"],
        }
        if r["absent_since"] is not None:
            body["absent_since"] = r["absent_since"]
        value = None if r["tombstone"] else json.dumps(body).encode()
        key = f"g/{r['member']}".encode()
        entry = log_entry(LogMsg(key, value, r["partition"], offset, r["headers"]))
        if entry is not None:
            view.add(entry)
    records = {
        m: (view.order[("g", m)], logged.record) for m, logged in view.group_records("g").items()
    }
    recovered, _ = Recovered.from_records(
        records, max(view.max_generation.get("g", 0), 0), 7, state_clock
    )
    held = Counter(tp for granted in recovered.granted.values() for tp in granted)
    assert [tp for tp, n in held.items() if n > 1] == []  # conflicts resolved, one owner
    state = GroupState("g", GroupTuning(rebalance_delay=0), {"orders": 4}, recovered, 0.0)
    with contextlib.suppress(RejectedError):
        state.on_presence(decode(Presence, json.dumps(GOOD[Presence]).encode(), "fuzz"), 0.0)
    _ticked(state)
    state.tick(1e9)  # past every grace and timeout a record could set
    held = Counter(tp for granted in state.reconciler.granted.values() for tp in granted)
    assert [tp for tp, n in held.items() if n > 1] == []


yaml_text = st.one_of(
    st.text(alphabet=string.printable, max_size=300),
    st.dictionaries(
        st.sampled_from(
            ["kafka", "mqtt", "groups", "lag", "rebalance", "ha", "http", "pipeline", "x"]
        ),
        json_values,
        max_size=4,
    ).map(json.dumps),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=yaml_text)
def test_config_loader_raises_only_input_error(
    text: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    TRIED["config"] += 1
    path: Path = tmp_path_factory.mktemp("cfg") / "ballast.yaml"
    path.write_text(text)
    with contextlib.suppress(InputError):
        load_config(path, environ={})
