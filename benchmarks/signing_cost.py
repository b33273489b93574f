"""What signing costs: a whole rebalance of 1 000 members encoded with and without the
controller's Ed25519 signature, and one record read by a member with and without
verification, side by side in one run (medians of ``--repeat`` runs).

    python benchmarks/signing_cost.py                       # 1 000 members x 100 partitions
    python benchmarks/signing_cost.py --members 100 --per-member 100 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from assignors import TopicPartition
from controller.core.handoff import Outgoing
from controller.core.plan_records import Encoded, encode_plan
from controller.wire.assignments import log_entry
from controller.wire.signing import Signer


class Msg:
    topic, partition, offset = "ballast.assignments", 0, 0

    def __init__(self, r: Encoded) -> None:
        self.key, self.value, self.headers = r.key, r.value, r.headers


def _median_ms(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(members: int, per_member: int, repeat: int) -> dict[str, Any]:
    signer = Signer(Ed25519PrivateKey.generate())
    plan = [
        Outgoing(
            f"member-{m:05d}",
            frozenset(TopicPartition("orders", m * per_member + p) for p in range(per_member)),
        )
        for m in range(members)
    ]

    def encode(with_signer: Signer | None) -> list[Encoded]:
        return encode_plan(
            "fleet",
            3,
            42,
            plan,
            lambda _m: frozenset({"orders"}),
            issued_at=time.time(),
            wall_clock=lambda t: t,
            signer=with_signer,
        )

    plain_ms = _median_ms(lambda: encode(None), repeat)
    signed_ms = _median_ms(lambda: encode(signer), repeat)
    plain, signed = encode(None), encode(signer)
    reads = [Msg(r) for r in plain]
    checked = [Msg(r) for r in signed]
    read_ms = _median_ms(lambda: [log_entry(m) for m in reads], repeat)
    verify_ms = _median_ms(lambda: [log_entry(m, None, signer.verifier) for m in checked], repeat)
    return {
        "members": members,
        "partitions": members * per_member,
        "encode_ms": round(plain_ms, 2),
        "encode_signed_ms": round(signed_ms, 2),
        "sign_per_record_us": round((signed_ms - plain_ms) * 1000 / members, 1),
        "read_record_us": round(read_ms * 1000 / members, 1),
        "read_verified_record_us": round(verify_ms * 1000 / members, 1),
        "verify_per_record_us": round((verify_ms - read_ms) * 1000 / members, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--per-member", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    row = measure(args.members, args.per_member, args.repeat)
    if args.json:
        print(json.dumps(row))
        return
    width = max(map(len, row))
    for key, value in row.items():
        print(f"{key:{width}}  {value}")


if __name__ == "__main__":
    main()
