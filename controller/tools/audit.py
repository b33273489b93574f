"""``ballast audit``: check the design invariants against the history of the assignments
topic (the full log, read from the beginning, before compaction removes anything).

The audit reads the log the way members do (``fencing``): a record below its
partition's fence floor, or one that does not beat its key's current record, is listed
and not applied. The records that count are replayed in publication order, i.e. by
(epoch, generation), and checked per group:

* **exclusive**: a partition is never granted to a member while another member's current
  record still grants it (revoke before grant, invariant 1);
* **monotonic**: within one controller epoch, generations never go back in a partition
  (one writer per epoch, invariant 4);
* **unique**: no (epoch, generation) is used twice for one member with different
  contents (a tenure that reused its predecessor's numbers: invariant 4). The same record
  again, byte for byte, is a *replay* (anyone who can produce to the topic can make one;
  the fencing rule ignores it): listed as such, not as a violation;
* **covered**: no partition stayed ungranted for longer than ``window`` seconds (by
  ``issued_at``), and in the final state every partition of the subscribed topics is
  granted. Read from a live group, the log may end in the middle of a handoff: a
  partition ungranted at the end for less than ``window`` by the audit's clock is listed
  as in flight, not as a violation.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from assignors import TopicPartition
from controller import logs
from controller.errors import UnreachableError
from controller.wire.fencing import AssignmentView, Order, Verdict
from controller.wire.records import Logged, LoggedFence, LoggedRecord
from controller.wire.signing import Verifier


@dataclass
class Report:
    group: str
    records: int = 0
    generations: int = 0
    violations: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    replays: list[str] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    longest_gap_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self) -> str:
        lines = [
            f"group {self.group}: {self.records} records, {self.generations} generations, "
            f"longest ungranted gap {self.longest_gap_s:.3f}s, "
            f"{len(self.fenced)} fenced records, {len(self.replays)} replayed, "
            f"{'OK' if self.ok else 'VIOLATIONS'}"
        ]
        lines += [f"  violation: {v}" for v in self.violations[:50]]
        lines += [f"  replayed: {r}" for r in self.replays[:20]]
        lines += [f"  fenced: {f}" for f in self.fenced[:20]]
        lines += [f"  in flight: {f}" for f in self.in_flight[:20]]
        return "\n".join(lines)


def audit_group(
    group: str,
    logged: Iterable[Logged],
    partitions_per_topic: Mapping[str, int],
    window: float,
    clock: float | None = None,
) -> Report:
    """``clock`` is the audit's clock (``issued_at`` scale) when the group may still be
    running; None means the log is complete, so nothing ungranted at its end is in flight."""
    report = Report(group)
    view = AssignmentView()
    counted: list[tuple[Order, LoggedRecord]] = []
    log_last: dict[tuple[int, int], int] = {}
    #: (member, epoch, generation, tombstone) -> the record first seen with them.
    numbered: dict[tuple[str, int, int, int], LoggedRecord] = {}
    for r in sorted((e for e in logged if e.group == group), key=lambda e: (e.partition, e.offset)):
        if isinstance(r, LoggedFence):
            view.add(r)
            continue
        report.records += 1
        key = (group, r.member)
        order = view.order_of(r, view.floor.get((group, r.partition), -1), view.order.get(key))
        where = f"{r.member}@{r.partition}:{r.offset} epoch {order[0]} gen {order[1]}"
        first = numbered.setdefault((r.member, *order), r)
        if first is not r:
            if first.record == r.record:
                report.replays.append(f"{where}: the record at offset {first.offset} again")
            else:
                report.violations.append(
                    f"{where}: epoch {order[0]} generation {order[1]} used twice for "
                    f"{r.member} (first at offset {first.offset}) with other contents"
                )
            view.add(r)  # stale or fenced: what the members make of it
            continue
        verdict = view.add(r)
        if verdict is Verdict.FENCED:
            report.fenced.append(f"{where}: below the fence")
            continue
        slot = (r.partition, order[0])
        if order[1] < log_last.get(slot, -1):
            report.violations.append(
                f"{where}: generation {order[1]} after {log_last[slot]} in epoch {order[0]}"
            )
        log_last[slot] = max(order[1], log_last.get(slot, -1))
        if verdict is Verdict.STALE:
            report.fenced.append(f"{where}: not newer than the key's current record")
            continue
        counted.append((order, r))
    # Publication order; within one publication a tombstone frees before grants replay.
    counted.sort(key=lambda e: (e[0][0], e[0][1], -e[0][2], e[1].member))
    report.generations = len({(o[0], o[1]) for o, _ in counted})

    granted: dict[str, frozenset[TopicPartition]] = {}
    owner: dict[TopicPartition, str] = {}
    ungranted_since: dict[TopicPartition, float] = {}
    now = 0.0
    for order, r in counted:
        rec = r.record
        where = f"{r.member}@{r.partition}:{r.offset} epoch {order[0]} gen {order[1]}"
        if rec is not None:
            now = max(now, rec.issued_at)
        old = granted.get(r.member, frozenset())
        new = rec.held() if rec is not None else frozenset()
        for tp in old - new:
            if owner.get(tp) == r.member:
                del owner[tp]
                ungranted_since[tp] = now
        for tp in new - old:
            holder = owner.get(tp)
            if holder is not None and holder != r.member:
                report.violations.append(
                    f"{where}: {tp.topic}-{tp.partition} granted while {holder} holds it"
                )
            owner[tp] = r.member
            since = ungranted_since.pop(tp, None)
            if since is not None:
                report.longest_gap_s = max(report.longest_gap_s, now - since)
        if rec is None:
            granted.pop(r.member, None)
        else:
            granted[r.member] = new
    subscribed = {t for _, r in counted if r.record for t in r.record.topics}
    if granted:
        for topic in sorted(subscribed):
            for p in range(partitions_per_topic.get(topic, 0)):
                tp = TopicPartition(topic, p)
                if tp in owner:
                    continue
                since = ungranted_since.get(tp)
                if clock is not None and since is not None and clock - since <= window:
                    report.in_flight.append(f"{topic}-{p} ungranted for {clock - since:.3f}s")
                else:
                    report.violations.append(f"final state: {topic}-{p} is not granted to anyone")
    if report.longest_gap_s > window:
        report.violations.append(
            f"a partition stayed ungranted for {report.longest_gap_s:.3f}s (> window {window}s)"
        )
    return report


async def run_audit(
    bootstrap: str,
    topic: str,
    groups: list[str] | None,
    window: float,
    *,
    verifier: Verifier | None = None,
    rejected: list[str] | None = None,
    security: Mapping[str, Any] | None = None,
) -> list[Report]:
    """Read the whole assignments log and audit each group in it (or only ``groups``).
    Records it cannot read, or (with ``verifier``) that the controller did not sign, are
    left out of the audit and described in ``rejected``. ``security``: TLS/SASL options
    (aiokafka names) of both clients."""
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - I/O kept out of the pure part

    from controller.adapters.metadata import topic_metadata  # noqa: PLC0415
    from controller.runtime.assignment_log import read_assignment_log  # noqa: PLC0415
    from controller.runtime.startup import NOT_REACHABLE, reason  # noqa: PLC0415

    try:
        with logs.quiet("aiokafka"):
            logged = await read_assignment_log(
                {"bootstrap_servers": bootstrap, **(security or {})},
                topic,
                "ballast-audit",
                on_invalid=None if rejected is None else rejected.append,
                verifier=verifier,
            )
    except NOT_REACHABLE as exc:
        raise UnreachableError(
            f"cannot reach Kafka at {bootstrap}: {reason(exc)}; check --bootstrap"
        ) from None
    names = sorted(groups or {r.group for r in logged})
    topics = sorted(
        {t for r in logged if isinstance(r, LoggedRecord) and r.record for t in r.record.topics}
    )
    counts: dict[str, int] = {}
    if topics:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="ballast-audit", **(security or {})
        )
        await admin.start()
        try:
            counts = (await topic_metadata(admin, topics)).counts
        finally:
            await admin.close()
    clock = time.time()  # the controller stamps issued_at with its wall clock too
    return [audit_group(g, logged, counts, window, clock) for g in names]
