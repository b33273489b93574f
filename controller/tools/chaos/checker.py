"""What a fault run must show, checked from what the workers wrote (pure, no I/O beyond
reading the files it is given).

* **nothing lost**: every produced value was processed by someone;
* **exclusive**: no partition was held by two live workers at overlapping times (a
  worker's hold runs from its grant to its revoke, or to its death for a killed one);
* **duplicates explained**: a value processed twice was first processed by a worker that
  was then killed, at an offset its last commit before death did not cover.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Processed:
    worker: str
    partition: Partition
    offset: int
    value: str
    at: float


@dataclass
class WorkerLog:
    """One worker name's files (every process that ran under that name appends to them)."""

    name: str
    processed: list[Processed] = field(default_factory=list)
    #: (time, granted or revoked, partitions)
    holds: list[tuple[float, str, list[Partition]]] = field(default_factory=list)
    #: (time, partition, next offset)
    commits: list[tuple[float, Partition, int]] = field(default_factory=list)

    @classmethod
    def read(cls, name: str, out: Path) -> WorkerLog:
        log = cls(name)
        if out.exists():
            for line in out.read_text().splitlines():
                topic, partition, offset, value, at = line.split()
                log.processed.append(
                    Processed(name, (topic, int(partition)), int(offset), value, float(at))
                )
        events = out.with_name(out.name + ".events")
        if events.exists():
            for line in events.read_text().splitlines():
                e = json.loads(line)
                if e["kind"] == "commit":
                    log.commits += [(e["t"], (t, p), o) for t, p, o in e["offsets"]]
                else:
                    log.holds.append((e["t"], e["kind"], [(t, p) for t, p in e["partitions"]]))
        return log


@dataclass
class Verdict:
    produced: int
    processed: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates_by_cause: dict[str, int] = field(default_factory=dict)
    unexplained_duplicates: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unexplained_duplicates or self.overlaps)

    def summary(self) -> dict[str, object]:
        return {
            "produced": self.produced,
            "processed": self.processed,
            "lost": len(self.lost),
            "duplicates_by_cause": self.duplicates_by_cause,
            "unexplained_duplicates": self.unexplained_duplicates[:10],
            "overlaps": self.overlaps[:10],
            "ok": self.ok,
        }


def intervals(
    log: WorkerLog, deaths: Iterable[float], end: float
) -> dict[Partition, list[tuple[float, float]]]:
    """When the worker held each partition. A hold ends at its revoke, at the first death
    of the worker after the grant (a killed process stops holding), or at ``end``."""
    deaths = sorted(deaths)
    out: dict[Partition, list[tuple[float, float]]] = {}
    open_since: dict[Partition, float] = {}

    def close(tp: Partition, at: float) -> None:
        start = open_since.pop(tp)
        died = next((d for d in deaths if d >= start), None)
        out.setdefault(tp, []).append((start, at if died is None else min(at, died)))

    for at, kind, tps in sorted(log.holds):
        for tp in tps:
            if kind == "granted":
                if tp in open_since:  # a new process under the same name: the old one died
                    close(tp, at)
                open_since[tp] = at
            elif tp in open_since:
                close(tp, at)
    for tp in list(open_since):
        close(tp, end)
    return out


def check(
    produced: Iterable[str],
    logs: Mapping[str, WorkerLog],
    deaths: Mapping[str, list[float]],
    end: float,
    slack: float = 0.0,
) -> Verdict:
    """``deaths``: when each worker name was SIGKILLed; ``slack``: clock tolerance (s)."""
    wanted = list(produced)
    v = Verdict(len(wanted))
    seen: dict[str, list[Processed]] = {}
    for log in logs.values():
        for p in log.processed:
            seen.setdefault(p.value, []).append(p)
    v.processed = sum(len(ps) for ps in seen.values())
    v.lost = [x for x in wanted if x not in seen]
    for value, ps in sorted(seen.items()):
        ps.sort(key=lambda p: p.at)
        for first, again in itertools.pairwise(ps):
            cause = _cause(first, again, logs, deaths.get(first.worker, []))
            if cause is None:
                v.unexplained_duplicates.append(
                    f"value {value} ({first.partition[0]}-{first.partition[1]}@{first.offset}) "
                    f"processed by {first.worker} at {first.at:.3f} and "
                    f"{again.worker} at {again.at:.3f}"
                )
            else:
                v.duplicates_by_cause[cause] = v.duplicates_by_cause.get(cause, 0) + 1
    held = {name: intervals(log, deaths.get(name, []), end) for name, log in logs.items()}
    for tp in sorted({tp for h in held.values() for tp in h}):
        spans = sorted((s, e, name) for name, h in held.items() for s, e in h.get(tp, []))
        for (s1, e1, n1), (s2, _e2, n2) in itertools.pairwise(spans):
            if n1 != n2 and s2 < e1 - slack:
                v.overlaps.append(
                    f"{tp[0]}-{tp[1]}: {n1} held it {s1:.3f}-{e1:.3f} and {n2} from {s2:.3f} "
                    f"({e1 - s2:.3f}s together)"
                )
    return v


def _cause(
    first: Processed, again: Processed, logs: Mapping[str, WorkerLog], deaths: list[float]
) -> str | None:
    """Why ``first`` was processed again, if that is allowed: its worker was killed before
    committing it."""
    died = next((d for d in sorted(deaths) if d >= first.at), None)
    if died is None or died > again.at:
        return None
    committed = [
        o for at, tp, o in logs[first.worker].commits if tp == first.partition and at <= died
    ]
    if committed and max(committed) > first.offset:
        return None  # it had committed past this record before dying
    return "killed before commit"
