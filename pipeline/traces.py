"""Fleet traces: reading, writing and synthesizing ``TraceEvent`` lines, and replaying a
group's trace through the assignors. Pure Python; the backtest runs ``replay`` once per
group inside Spark.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path

from assignors import TopicPartition, assign, evaluate
from controller.wire.records import TraceEvent, decode

_new_tuple = tuple.__new__
#: A lag reading ``(topic, partition, lag)``: its partition and its value.
_pair, _value = itemgetter(0, 1), itemgetter(2)


def read_jsonl(path: Path) -> Iterator[TraceEvent]:
    """Validated events; a bad line raises ``DecodeError`` naming file and line."""
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield decode(TraceEvent, line, f"{path}:{n}")


def write_jsonl(events: Iterable[TraceEvent], path: Path) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for e in events:
            f.write(e.model_dump_json(exclude_none=True) + "\n")
            count += 1
    return count


def _group_size(rng: random.Random, max_members: int) -> int:
    """Most fleets are small, a few are huge (roughly log-uniform)."""
    return max(2, min(max_members, round(2 ** rng.uniform(1, 10))))


def synthesize(
    groups: int, *, seed: int = 7, max_members: int = 1000, steps: int = 12
) -> Iterator[TraceEvent]:
    """A reproducible fleet: per group a start, then ``steps`` minutes of joins, leaves,
    crashes and lag snapshots where a few hot partitions carry most of the lag. One
    group always has ``max_members`` members."""
    rng = random.Random(seed)
    for g in range(groups):
        name = f"fleet-{g:04d}"
        members = max_members if g == 0 else _group_size(rng, max_members)
        topics = [f"{name}.t{i}" for i in range(rng.choice((1, 1, 2, 3)))]
        per_topic = max(1, members * rng.randint(2, 6) // len(topics))
        counts = dict.fromkeys(topics, per_topic)
        mixed = len(topics) > 1 and rng.random() < 0.3

        def subscription(topics: list[str] = topics, mixed: bool = mixed) -> list[str]:
            if not mixed:
                return topics
            return sorted(rng.sample(topics, rng.randint(1, len(topics))))

        yield TraceEvent(group=name, t=0, kind="partitions", partitions=counts)
        live = [f"m{i}" for i in range(members)]
        for m in live:
            yield TraceEvent(group=name, t=0, kind="join", member=m, topics=subscription())
        hot = {(t, p): rng.paretovariate(1.2) * 1000 for t in topics for p in range(per_topic)}
        next_id = members
        for step in range(steps + 1):
            t = 60.0 * step
            if step:
                churn = max(1, len(live) // 20)
                kind = rng.choice(("join", "leave", "crash", "lag"))
                if kind == "join":
                    for _ in range(rng.randint(1, churn)):
                        live.append(f"m{next_id}")
                        yield TraceEvent(
                            group=name, t=t, kind="join", member=live[-1], topics=subscription()
                        )
                        next_id += 1
                elif kind in ("leave", "crash") and len(live) > 2:
                    for m in rng.sample(live, min(len(live) - 2, rng.randint(1, churn))):
                        live.remove(m)
                        yield TraceEvent(group=name, t=t, kind="leave", member=m)
            for key in hot:  # lag swings: a random walk around each partition's level
                hot[key] *= rng.uniform(0.6, 1.6)
            snapshot = [(tp, p, int(v)) for (tp, p), v in sorted(hot.items())]
            yield TraceEvent(group=name, t=t, kind="lag", lag=snapshot)


@dataclass(frozen=True, slots=True)
class StepResult:
    strategy: str
    group: str
    step: int
    t: float
    members: int
    partitions: int
    moved: int
    valid: bool
    count_spread: int
    max_member_lag: int
    lag_skew: float
    #: Largest member lag over a lower bound on the best possible (the hottest partition,
    #: or an even share of all lag); 1.0 is optimal, whatever the lag's shape.
    lag_vs_bound: float
    compute_seconds: float


def steps_of(events: list[TraceEvent]) -> Iterator[list[TraceEvent]]:
    """Consecutive events with equal ``t`` (the trace's order otherwise kept)."""
    batch: list[TraceEvent] = []
    for e in events:
        if batch and e.t != batch[0].t:
            yield batch
            batch = []
        batch.append(e)
    if batch:
        yield batch


def _subscribed_partitions(counts: dict[str, int], subs: dict[str, list[str]]) -> int:
    return sum(counts.get(t, 0) for t in {t for ts in subs.values() for t in ts})


def _bound(
    counts: dict[str, int], subs: dict[str, list[str]], lag: dict[TopicPartition, int]
) -> float:
    """A lower bound on any assignment's largest member lag: the hottest live partition,
    or an even share of all live lag."""
    topics = {t for ts in subs.values() for t in ts}
    live = [
        v for tp, v in lag.items() if tp.topic in topics and tp.partition < counts.get(tp.topic, 0)
    ]
    return max(max(live, default=0), sum(live) / len(subs))


def _vs_bound(worst: int, bound: float) -> float:
    return worst / bound if bound > 0 else 1.0


def replay(events: list[TraceEvent], strategies: Iterable[str]) -> list[StepResult]:
    """One group's trace through each strategy, each carrying its own assignment
    forward as ``current``; one assignment per step. Results come strategy by strategy.

    The group's state (members, partition counts, lag) does not depend on the strategy:
    it is advanced once per step and every strategy assigns from it."""
    names = list(strategies)
    per: dict[str, list[StepResult]] = {s: [] for s in names}
    current: dict[str, dict[str, list[TopicPartition]]] = {s: {} for s in names}
    subs: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    lag: dict[TopicPartition, int] = {}
    ordered = sorted(events, key=lambda e: e.t)  # stable: equal t keeps trace order
    for n, step in enumerate(steps_of(ordered)):
        for e in step:
            if e.kind == "join" and e.member is not None and e.topics is not None:
                subs[e.member] = e.topics
            elif e.kind == "leave" and e.member is not None:
                subs.pop(e.member, None)
            elif e.kind == "partitions" and e.partitions is not None:
                counts.update(e.partitions)
            elif e.kind == "lag" and e.lag is not None:
                lag.update(
                    zip(
                        map(_new_tuple, repeat(TopicPartition), map(_pair, e.lag)),
                        map(_value, e.lag),
                        strict=True,
                    )
                )
        if not subs:
            continue
        bound = _bound(counts, subs, lag)
        partitions = _subscribed_partitions(counts, subs)
        for strategy in names:
            before = current[strategy]
            started = time.perf_counter()
            result = assign(strategy, counts, subs, current=before, lag=lag)
            spent = time.perf_counter() - started
            q = evaluate(result, counts, subs, before=before, lag=lag)
            per[strategy].append(
                StepResult(
                    strategy=strategy,
                    group=step[0].group,
                    step=n,
                    t=step[0].t,
                    members=len(subs),
                    partitions=partitions,
                    moved=q.moved,
                    valid=q.valid,
                    count_spread=q.count_spread,
                    max_member_lag=q.max_member_lag,
                    lag_skew=q.lag_skew,
                    lag_vs_bound=_vs_bound(q.max_member_lag, bound),
                    compute_seconds=spent,
                )
            )
            current[strategy] = result
    return [r for s in names for r in per[s]]


def as_rows(results: Iterable[StepResult]) -> list[dict[str, object]]:
    return [asdict(r) for r in results]
