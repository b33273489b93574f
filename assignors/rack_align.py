"""Rack alignment for the sticky strategies, as count-neutral swaps.

KIP-881's sticky assignors keep an owned partition only where its owner's rack holds a
replica, then fill members rack-first, and never give up count balance for locality.
Ballast's engine balances first; this pass then trades partitions between members two
at a time, so every member keeps exactly its count (balance, KIP-54's definition, is
untouched) and every swap puts at least one more partition on a replica's rack:

* best: ``p`` (misplaced at ``A``, rack ``r``) has a replica on ``s``, and ``q``
  (misplaced at ``B``, rack ``s``) one on ``r``: both become local;
* else ``q`` is local at ``B`` and at ``A`` alike, or misplaced wherever it is.

Each swap raises the number of local partitions, so repeating the pass ends; it stops at
an assignment no swap improves, which is why a second call with that assignment as
``current`` keeps it exactly (stickiness holds where racks match). For ``lagsticky`` a
swap may not lift either member's lag above ``cap`` (the policy's target, or the largest
member lag before the pass if that was already above it), so locality never costs the
lag target. Only members with a rack take part: a member without one is never counted
as misplaced, and nothing is moved onto it for locality's sake.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping

from .policy import LagPolicy
from .racks import Racks
from .types import Assignment, TopicPartition

#: Candidates examined per bucket for one misplaced partition. With identical
#: subscriptions and no lag cap the first valid candidate is always usable.
_SCAN = 64

_Fits = Callable[[TopicPartition], bool]


def align_racks(
    out: Assignment,
    topics_of: Mapping[str, frozenset[str]],
    racks: Racks,
    lag: Mapping[TopicPartition, int],
    cap: int | None,
) -> Assignment:
    """``out`` with swaps applied; lists of members no swap touched are the same objects."""
    rack_of = {m: racks.member[m] for m in sorted(out) if m in racks.member}
    if len(set(rack_of.values())) < 2:
        return out  # one rack: no swap between members can make anything local
    aligner = _Aligner(out, topics_of, rack_of, racks, lag=lag, cap=cap)
    while aligner.sweep():
        pass
    for m in sorted(aligner.changed):
        out[m] = sorted(aligner.held[m])
    return out


class _Aligner:
    def __init__(
        self,
        out: Assignment,
        topics_of: Mapping[str, frozenset[str]],
        rack_of: dict[str, str],
        racks: Racks,
        *,
        lag: Mapping[TopicPartition, int],
        cap: int | None,
    ) -> None:
        self.topics_of = topics_of
        self.rack_of = rack_of
        self.replicas = racks.replicas
        self.lag = lag
        self.cap = cap
        self.held = {m: set(out[m]) for m in rack_of}
        self.holder = {tp: m for m, tps in self.held.items() for tp in tps}
        self.load = {m: sum(map(lag.get, out[m], [0] * len(out[m]))) for m in rack_of}
        self.changed: set[str] = set()

    def sweep(self) -> bool:
        """One greedy pass over the misplaced partitions; whether anything moved."""
        self._buckets()
        swapped = False
        for a, r in self.rack_of.items():
            for p in sorted(self.held[a]):
                if self.holder[p] != a or r in self.replicas(p):
                    continue
                for s in sorted(self.replicas(p) - {r}):
                    q = self._partner(a, p, r, s)
                    if q is not None:
                        self._swap(a, p, self.holder[q], q)
                        swapped = True
                        break
        return swapped

    def _partner(self, a: str, p: TopicPartition, r: str, s: str) -> TopicPartition | None:
        """The best partner on rack ``s``: one misplaced there and local on ``r`` (two
        partitions made local), else one local on both, else any misplaced one."""
        replicas = self.replicas
        pools: list[tuple[list[TopicPartition] | None, _Fits]] = [
            (self.two.get((s, r)), lambda q: s not in replicas(q) and r in replicas(q)),
            (self.keep.get((s, r)), lambda q: s in replicas(q) and r in replicas(q)),
            (self.anywhere.get(s), lambda q: s not in replicas(q)),
        ]
        for bucket, fits in pools:
            if bucket:
                q = self._take(bucket, s, fits, a, p)
                if q is not None:
                    return q
        return None

    def _buckets(self) -> None:
        """Swap partners by (holder rack, rack they would be local on): misplaced ones,
        local ones also local elsewhere, and every misplaced one by holder rack."""
        present = set(self.rack_of.values())
        two: dict[tuple[str, str], list[TopicPartition]] = defaultdict(list)
        keep: dict[tuple[str, str], list[TopicPartition]] = defaultdict(list)
        anywhere: dict[str, list[TopicPartition]] = defaultdict(list)
        for b, s in self.rack_of.items():
            for q in sorted(self.held[b]):
                on = self.replicas(q) & present
                if s in on:
                    for r in sorted(on - {s}):
                        keep[(s, r)].append(q)
                else:
                    anywhere[s].append(q)
                    for r in sorted(on):
                        two[(s, r)].append(q)
        self.two, self.keep, self.anywhere = two, keep, anywhere

    def _take(
        self, bucket: list[TopicPartition], s: str, fits: _Fits, a: str, p: TopicPartition
    ) -> TopicPartition | None:
        """A usable partner from the end of ``bucket``. Entries that moved or no longer
        fit are dropped as met; ones this swap cannot use stay for others."""
        i, seen = len(bucket) - 1, 0
        while i >= 0 and seen < _SCAN:
            q = bucket[i]
            b = self.holder[q]
            if self.rack_of[b] != s or not fits(q):
                bucket[i] = bucket[-1]
                bucket.pop()
            else:
                seen += 1
                if self._allowed(a, p, b, q):
                    bucket[i] = bucket[-1]
                    bucket.pop()
                    return q
            i -= 1
        return None

    def _allowed(self, a: str, p: TopicPartition, b: str, q: TopicPartition) -> bool:
        if q.topic not in self.topics_of[a] or p.topic not in self.topics_of[b]:
            return False
        if self.cap is None:
            return True
        diff = self.lag.get(q, 0) - self.lag.get(p, 0)
        return self.load[a] + diff <= self.cap and self.load[b] - diff <= self.cap

    def _swap(self, a: str, p: TopicPartition, b: str, q: TopicPartition) -> None:
        self.held[a].remove(p)
        self.held[b].remove(q)
        self.held[a].add(q)
        self.held[b].add(p)
        self.holder[p], self.holder[q] = b, a
        diff = self.lag.get(q, 0) - self.lag.get(p, 0)
        self.load[a] += diff
        self.load[b] -= diff
        self.changed.update((a, b))


def lag_cap(out: Assignment, lag: Mapping[TopicPartition, int], policy: LagPolicy) -> int:
    """The largest member lag a swap may create: the policy's target over the lower
    bound of the best largest member lag, or what the group has already if that is more
    (a swap must not make it worse), and never below the lag the policy ignores."""
    loads = [sum(map(lag.get, tps, [0] * len(tps))) for tps in out.values()]
    if not loads:
        return 0
    biggest = max((lag.get(tp, 0) for tps in out.values() for tp in tps), default=0)
    bound = max(sum(loads) / len(loads), biggest)
    return max(*loads, math.floor(policy.target_ratio * bound), policy.min_lag)
