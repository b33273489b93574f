"""Every reader of outside bytes against a million inputs each: valid records mutated
field by field and byte by byte, plus random bytes. A reader passes when each input
gives a value or its one documented error (docs/protocol.md, "Untrusted input"); any
other exception is an escape, printed with the input that caused it (exit 1).

    python benchmarks/fuzz_readers.py                 # 1 000 000 inputs per reader
    python benchmarks/fuzz_readers.py --count 20000   # a quick run
    python benchmarks/fuzz_readers.py --json          # one JSON line: counts per reader

Seeded (``--seed``): the same run gives the same inputs.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.protocol import commit, offset
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from controller import logs
from controller.config import Config, load_config
from controller.errors import InputError
from controller.runtime.membership import KafkaHeartbeats, MqttPresence, Sink
from controller.runtime.metrics import Metrics
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER, log_entry
from controller.wire.group_protocol import UserData
from controller.wire.metadata import read_metadata
from controller.wire.offsets import read_list_offsets, read_offset_fetch
from controller.wire.raw_answers import RawDecodeError
from controller.wire.records import (
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
from controller.wire.signing import Signer

GOOD: dict[str, dict[str, Any]] = {
    "presence": {
        "version": 1,
        "group": "g",
        "member": "m-1",
        "topics": ["orders"],
        "instance": "abc",
        "rack": "a",
        "capacity": 2.0,
        "generation": 3,
        "partitions": [["orders", 1]],
        "lag": [["orders", 1, 10]],
        "sent_at": 1.0,
    },
    "assignment": {
        "group": "g",
        "member": "m-1",
        "generation": 2,
        "controller_epoch": 1,
        "partitions": [["orders", 0]],
        "revoking": [["orders", 2]],
        "topics": ["orders"],
        "issued_at": 1.0,
        "absent_since": 2.0,
        "instance": "abc",
    },
    "fence": {"group": "g", "controller_epoch": 4, "replica": "r", "issued_at": 1.0},
    "constraints": {
        "group": "g",
        "controller_epoch": 4,
        "constraints": {
            "pins": [{"topic": "orders", "partition": 1, "member": "m-1"}],
            "max_partitions": {"m-1": 3},
            "racks": {"m-1": "a"},
        },
        "issued_at": 1.0,
    },
    "lag": {
        "group": "g",
        "topic": "orders",
        "partition": 1,
        "lag": 10,
        "time_lag": 1.5,
        "produce_rate": 3.0,
        "observed_at": 1.0,
    },
    "offset_sample": {
        "group": "g",
        "topic": "orders",
        "partition": 1,
        "committed": 5,
        "log_end": 9,
        "log_start": 0,
        "sampled_at": 1.0,
    },
    "trace_event": {"group": "g", "t": 0, "kind": "join", "member": "m", "topics": ["orders"]},
    "user_data": {"v": 1, "generation": 3, "owned": [["orders", 0]], "lag": [["orders", 0, 7]]},
}

#: Values a hostile writer would try in any field.
EDGE: list[Any] = [
    None,
    True,
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    2**62,
    2**63 - 1,
    2**63,
    -(2**63),
    10**30,
    1.5,
    -0.0,
    1e308,
    "",
    "x" * 300,
    "a b",
    "\u0000",
    "\udcff",
    "🙂",
    [],
    {},
    [[]],
    [["orders", -1]],
    [["orders", 2**31]],
    [["orders", 1, -5]],
    {"a": 1},
    "orders",
    ["orders", "orders"],
]
#: Byte patterns spliced into the text.
SPLICE = [
    b"[" * 300,
    b"{" * 200,
    b"9" * 5000,
    b"-Infinity",
    b"NaN",
    b"\xff\xfe",
    b"\x00",
    b'"',
    b"\\u0000",
]


def _deep(rng: random.Random, n: int) -> Any:
    value: Any = rng.choice(EDGE)
    for _ in range(n):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


class Mutator:
    """Structure-aware inputs for one record kind, from one seeded generator."""

    def __init__(self, kind: str, rng: random.Random) -> None:
        self.good = GOOD[kind]
        self.fields = list(self.good)
        self.rng = rng
        self.base = json.dumps(self.good).encode()

    def __call__(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.55:  # field by field
            body = dict(self.good)
            for _ in range(rng.randint(1, 3)):
                name = rng.choice([*self.fields, "extra"])
                choice = rng.random()
                if choice < 0.15:
                    body.pop(name, None)
                elif choice < 0.25:
                    body[name] = _deep(rng, rng.randint(1, 400))
                else:
                    body[name] = rng.choice(EDGE)
            try:
                return json.dumps(body).encode(errors="surrogatepass")
            except (ValueError, RecursionError):
                return self.base
        if roll < 0.85:  # byte by byte
            data = bytearray(self.base)
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(data) + 1)
                op = rng.random()
                if op < 0.3 and data:
                    data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
                elif op < 0.5:
                    del data[at : at + rng.randint(1, 20)]
                else:
                    data[at:at] = rng.choice(SPLICE)
            return bytes(data)
        return rng.randbytes(rng.randint(0, 200))


@dataclass
class Tally:
    accepted: int = 0
    refused: int = 0
    escapes: int = 0
    #: The first few escapes, with their inputs.
    escaped: list[str] = field(default_factory=list)


def run(
    name: str,
    inputs: Callable[[], Any],
    read: Callable[[Any], object],
    errors: tuple[type[BaseException], ...],
    count: int,
) -> tuple[Tally, float]:
    tally = Tally()
    started = time.perf_counter()
    for _ in range(count):
        given = inputs()
        try:
            read(given)
        except errors:
            tally.refused += 1
            continue
        except Exception as exc:  # an escape: the finding this benchmark exists for
            tally.escapes += 1
            if len(tally.escaped) < 5:
                tally.escaped.append(f"{type(exc).__name__}: {exc} <- {given!r:.200}")
            continue
        tally.accepted += 1
    return tally, time.perf_counter() - started


class Msg:
    topic, partition, offset = "t", 0, 1

    def __init__(self, key: Any, value: Any, headers: Any) -> None:
        self.key, self.value, self.headers = key, value, headers


def readers(
    rng: random.Random,
) -> dict[str, tuple[Callable[[], Any], Callable[[Any], object], tuple[type[BaseException], ...]]]:
    models = {
        "presence": Presence,
        "assignment": Assignment,
        "fence": Fence,
        "constraints": ConstraintsRecord,
        "lag": LagRecord,
        "offset_sample": OffsetSample,
        "trace_event": TraceEvent,
    }
    out: dict[str, Any] = {}
    for kind, model in models.items():
        out[f"decode {kind}"] = (
            Mutator(kind, rng),
            lambda b, m=model: decode(m, b, "fuzz"),
            (DecodeError,),
        )
    out["user data"] = (Mutator("user_data", rng), UserData.read, (ValueError,))

    keys = Mutator("fence", rng)

    def key() -> bytes:
        r = rng.random()
        if r < 0.4:
            return rng.choice([b"g/m-1", b"g/orders/3", b"g"]) + rng.choice(
                [b"", b"/", b" x", b"\xff", b"9" * 20]
            )
        return keys()[: rng.randint(0, 60)]

    out["key group/member"] = (key, lambda k: split_key(k, "fuzz", 2), (DecodeError,))
    out["key group/topic/partition"] = (key, lambda k: split_key(k, "fuzz", 3), (DecodeError,))

    signer = Signer(Ed25519PrivateKey.generate())
    records = Mutator("assignment", rng)

    def logged() -> Msg:
        value = None if rng.random() < 0.1 else records()
        headers = [
            (
                rng.choice([GENERATION_HEADER, EPOCH_HEADER, "ballast-signature"]),
                rng.choice([b"1", b"-1", b"9" * 30, rng.randbytes(64)]),
            )
            for _ in range(rng.randint(0, 3))
        ]
        return Msg(rng.choice([b"g/m-1", b"g", key()]), value, headers)

    out["assignments log entry"] = (
        logged,
        lambda m: log_entry(m, lambda _w: None, signer.verifier),
        (),
    )

    metrics = Metrics()
    sink = Sink(lambda _p: True, lambda *_a: None, frozenset({"g"}))
    mqtt = MqttPresence(Config.model_validate({"groups": [{"name": "g"}]}), sink, metrics)
    presences = Mutator("presence", rng)
    out["mqtt presence handler"] = (
        lambda: (
            rng.choice(
                ["ballast/g/members/m-1", "ballast/g/members/" + "x" * rng.randint(0, 300), "a/b"]
            ),
            presences(),
        ),
        lambda tp: mqtt._handle(*tp),
        (),
    )
    beats = KafkaHeartbeats(Config.model_validate({"groups": [{"name": "g"}]}), sink, metrics)
    out["kafka heartbeat handler"] = (
        lambda: (key(), None if rng.random() < 0.1 else presences()),
        lambda kv: beats._handle(kv[0], kv[1], "fuzz"),
        (),
    )

    answers = [
        (
            read_list_offsets,
            [(1, offset.OffsetResponse_v1([("orders", [(0, 0, -1, 7), (1, 6, -1, 0)])]).encode())],
        ),
        (
            read_offset_fetch,
            [
                (
                    2,
                    commit.OffsetFetchResponse_v2(
                        [("orders", [(0, 5, "", 0), (1, -1, None, 0)])], 0
                    ).encode(),
                )
            ],
        ),
        (read_metadata, [(1, _metadata_v1())]),
    ]
    for read, samples in answers:
        version, body = samples[0]
        out[f"kafka answer {read.__name__}"] = (
            lambda v=version, b=body: (v, _mutated_bytes(rng, b)),
            lambda vb, r=read: r(*vb),
            (RawDecodeError,),
        )

    env_keys = [
        "BALLAST_MQTT__PASSWORD",
        "BALLAST_REBALANCE__DELAY",
        "BALLAST_KAFKA__BOOTSTRAP_SERVERS",
        "BALLAST_LAG__BATCH",
        "BALLAST_X__Y",
        "BALLAST_HTTP__PORT",
    ]

    def env() -> dict[str, str]:
        chosen = rng.sample(env_keys, rng.randint(1, 2))
        values = ["2s", "5", "-1", "null", "#x", "[1, {", "9" * 30, "'", "1e999", "", "a:9092"]
        return {k: rng.choice(values) + rng.choice(["", "", " #t", "\u0000"]) for k in chosen}

    base = Path(tempfile.mkdtemp()) / "ballast.yaml"
    base.write_text("groups: [{name: g}]\n")
    out["config from environment"] = (env, lambda e: load_config(base, e), (InputError,))
    return out


def _mutated_bytes(rng: random.Random, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        op = rng.random()
        if op < 0.4 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op < 0.6:
            del data[at : at + rng.randint(1, 8)]
        elif op < 0.8:
            data[at:at] = struct.pack(">i", rng.choice([-1, -(2**31), 2**31 - 1, 7]))
        else:
            data[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(data) if rng.random() < 0.95 else rng.randbytes(rng.randint(0, 64))


def _metadata_v1() -> bytes:
    from aiokafka.protocol.metadata import MetadataResponse_v1  # noqa: PLC0415

    brokers = [(1, "h", 9092, "a"), (2, "h", 9093, None)]
    topics = [(0, "orders", False, [(0, 0, 1, [1, 2], [1]), (0, 1, 2, [2], [2])])]
    return bytes(MetadataResponse_v1(brokers, 1, topics).encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="inputs per reader")
    parser.add_argument("--seed", type=int, default=20261126)
    parser.add_argument("--only", help="readers whose name contains this")
    parser.add_argument("--json", action="store_true", help="one JSON line of counts")
    args = parser.parse_args(argv)
    logs.configure("error", "json")
    rng = random.Random(args.seed)
    results: dict[str, dict[str, Any]] = {}
    escaped = False
    for name, (inputs, read, errors) in readers(rng).items():
        if args.only and args.only not in name:
            continue
        tally, seconds = run(name, inputs, read, errors, args.count)
        results[name] = {
            "inputs": args.count,
            "accepted": tally.accepted,
            "refused": tally.refused,
            "escaped": tally.escapes,
            "seconds": round(seconds, 1),
        }
        escaped = escaped or tally.escapes > 0
        if not args.json:
            print(
                f"{name:32} {args.count:>9} inputs  {tally.accepted:>9} accepted  {tally.refused:>9} refused  {tally.escapes} escaped  {seconds:6.1f} s",
                flush=True,
            )
            for line in tally.escaped:
                print(f"    ESCAPED {line}")
    if args.json:
        print(json.dumps(results, sort_keys=True))
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main())
