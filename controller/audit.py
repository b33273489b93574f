"""``ballast audit``: check the design invariants against the history of the assignments
topic (the full log, read from the beginning, before compaction removes anything).

Checks, per group, replaying records in publication order, i.e. by (generation, epoch):

* **exclusive**: a partition is never granted to a member while another member's latest
  record still grants it (revoke before grant, invariant 1);
* **monotonic**: within one controller epoch, generations never go back;
* **fenced**: records from an epoch older than one already seen are reported. A client
  ignores them, so they are listed, not failed, unless they would grant a partition;
* **covered**: in the final state every partition of the subscribed topics is granted,
  and no partition stayed ungranted for longer than ``window`` seconds (by ``issued_at``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from assignors import TopicPartition

from .records import LoggedRecord


@dataclass
class Report:
    group: str
    records: int = 0
    generations: int = 0
    violations: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    longest_gap_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self) -> str:
        lines = [
            f"group {self.group}: {self.records} records, {self.generations} generations, "
            f"longest ungranted gap {self.longest_gap_s:.3f}s, "
            f"{len(self.fenced)} fenced records, {'OK' if self.ok else 'VIOLATIONS'}"
        ]
        lines += [f"  violation: {v}" for v in self.violations[:50]]
        lines += [f"  fenced: {f}" for f in self.fenced[:20]]
        return "\n".join(lines)


def audit_group(
    group: str,
    logged: Iterable[LoggedRecord],
    partitions_per_topic: Mapping[str, int],
    window: float,
) -> Report:
    report = Report(group)
    mine = [r for r in logged if r.group == group]
    report.records = len(mine)
    # A tombstone's generation comes from its headers; without them (another writer), it
    # takes the generation of the record it follows (same key, same partition, in order).
    ordered: list[tuple[int, int, int, LoggedRecord]] = []
    last_gen: dict[str, tuple[int, int]] = {}
    # Monotonic generations: checked in log order, where a regression is visible.
    log_last: dict[tuple[int, int], int] = {}
    for r in sorted(mine, key=lambda r: (r.partition, r.offset)):
        if r.record is not None:
            last_gen[r.member] = (r.record.generation, r.record.controller_epoch)
            slot = (r.partition, r.record.controller_epoch)
            if r.record.generation < log_last.get(slot, -1):
                report.violations.append(
                    f"{r.member}@{r.partition}:{r.offset}: generation {r.record.generation} "
                    f"after {log_last[slot]} in epoch {r.record.controller_epoch}"
                )
            log_last[slot] = max(r.record.generation, log_last.get(slot, -1))
        gen, epoch = last_gen.get(r.member, (0, 0))
        if r.record is None and r.generation is not None and r.epoch is not None:
            gen, epoch = r.generation, r.epoch
        # Within one publication a departed member's tombstone frees what others are
        # granted, so tombstones replay first.
        ordered.append((gen, epoch, 1 if r.record is not None else 0, r))
    ordered.sort(key=lambda e: (e[0], e[1], e[2], e[3].member))
    report.generations = len({g for g, _, _, _ in ordered})

    granted: dict[str, frozenset[TopicPartition]] = {}
    owner: dict[TopicPartition, str] = {}
    max_epoch = -1
    ungranted_since: dict[TopicPartition, float] = {}
    now = 0.0
    for gen, epoch, _, r in ordered:
        rec = r.record
        where = f"{r.member}@{r.partition}:{r.offset} gen {gen}"
        if rec is not None:
            now = max(now, rec.issued_at)
            if epoch < max_epoch:
                report.fenced.append(f"{where} epoch {epoch} < {max_epoch}")
                continue
            max_epoch = epoch
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
    subscribed = {t for rec in (r.record for _, _, _, r in ordered) if rec for t in rec.topics}
    if granted:
        for topic in sorted(subscribed):
            for p in range(partitions_per_topic.get(topic, 0)):
                if TopicPartition(topic, p) not in owner:
                    report.violations.append(f"final state: {topic}-{p} is not granted to anyone")
    if report.longest_gap_s > window:
        report.violations.append(
            f"a partition stayed ungranted for {report.longest_gap_s:.3f}s (> window {window}s)"
        )
    return report


async def run_audit(
    bootstrap: str, topic: str, groups: list[str] | None, window: float
) -> list[Report]:
    """Read the whole assignments log and audit each group in it (or only ``groups``)."""
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - I/O kept out of the pure part

    from .kafka_io import read_assignment_log  # noqa: PLC0415

    logged = await read_assignment_log({"bootstrap_servers": bootstrap}, topic, "ballast-audit")
    names = sorted(groups or {r.group for r in logged})
    topics = sorted({t for r in logged if r.record for t in r.record.topics})
    counts: dict[str, int] = {}
    if topics:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="ballast-audit")
        await admin.start()
        try:
            for meta in await admin.describe_topics(topics):
                if meta.get("error_code", 0) == 0:
                    counts[meta["topic"]] = len(meta["partitions"])
        finally:
            await admin.close()
    return [audit_group(g, logged, counts, window) for g in names]
