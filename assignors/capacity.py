"""Member capacity: partitions, and lag, in proportion to each member's declared weight.

Balance with capacities is Sainte-Laguë (Webster) apportionment. Moving one partition
from member a to member b lowers ``sum(count**2 / capacity)`` exactly when

    (2 * count_a - 1) / capacity_a  >  (2 * count_b + 1) / capacity_b

(``give`` of a above ``take`` of b), so a group is balanced when no member could hand a
partition to one that may take it under that rule. With every capacity equal the rule is
KIP-54's (counts differ by at most one), which is why a group that declares no capacity
is assigned exactly as before. A balanced member holds its exact share of the partitions
rounded to the nearest whole number: ``count = round(lambda * capacity)`` for one
``lambda`` shared by the group (identical subscriptions).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence

import numpy as np

from .placement import heaviest_first
from .spec import GroupSpec, check_mapping

MemberCapacities = Mapping[str, float | None]
#: The same bound as the presence record's: a weight, not a partition count.
MAX_CAPACITY = 1_000_000.0


def check_capacity(value: object, where: str) -> float:
    """A capacity weight: a finite number in (0, MAX_CAPACITY]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where}: capacity must be a number, got {value!r}")
    if not (math.isfinite(value) and 0 < value <= MAX_CAPACITY):
        raise ValueError(f"{where}: capacity must be > 0 and <= {MAX_CAPACITY:g}, got {value!r}")
    return float(value)


def build_capacities(
    spec: GroupSpec, member_capacities: MemberCapacities | None
) -> dict[str, float] | None:
    """Validate ``{member: capacity}`` against the group. ``None`` (capacity 1) is the
    default; the result is ``None`` when every member's capacity is the same, since then
    the rule is KIP-54's and callers keep their unweighted paths."""
    check_mapping(member_capacities, "member_capacities")
    given = member_capacities or {}
    if not given.keys() <= spec.topics_of.keys():
        member = next(m for m in given if m not in spec.topics_of)
        raise ValueError(f"member_capacities: {member!r} is not a member of subscriptions")
    out = {
        m: 1.0 if c is None else check_capacity(c, f"member_capacities[{m!r}]")
        for m, c in given.items()
    }
    values = {out.get(m, 1.0) for m in spec.members}
    if len(values) <= 1:
        return None
    return {m: out.get(m, 1.0) for m in spec.members}


def common_capacity(spec: GroupSpec, member_capacities: MemberCapacities | None) -> float:
    """The capacity every member shares when ``build_capacities`` found them all equal:
    a stateless call may ignore it (the rule is KIP-54's), an engine must remember it,
    for the member that joins later with another."""
    given = member_capacities or {}
    if not spec.members or len(given) < len(spec.members):
        return 1.0
    value = given[spec.members[0]]
    return 1.0 if value is None else float(value)


def give(count: int, capacity: float) -> float:
    """How much a member gains by handing one partition away (higher gives first)."""
    return 2 * count - 1 if capacity == 1 else (2 * count - 1) / capacity


def take(count: int, capacity: float) -> float:
    """What one more partition costs a member (lower takes first)."""
    return 2 * count + 1 if capacity == 1 else (2 * count + 1) / capacity


def quotas(total: int, capacities: Sequence[float]) -> list[int]:
    """Sainte-Laguë counts of ``total`` partitions over members of these capacities.

    Where the rule leaves a choice (a tie at the margin), members earlier in the list get
    the larger count, so a caller can favour those that would otherwise give partitions
    away, and move the least.
    """
    n = len(capacities)
    if n == 0 or total <= 0:
        return [0] * n
    w = np.asarray(capacities, dtype=np.float64)
    w_sum = float(w.sum())

    def counts(lam: float) -> np.ndarray:
        return np.floor(lam * w + 0.5).astype(np.int64)

    # A lambda whose rounded counts do not exceed ``total``, as close to it as bisection
    # gets; the few partitions left are then placed one at a time by the rule itself.
    lo, hi = 0.0, (total + n) / w_sum
    for _ in range(64):
        mid = (lo + hi) / 2
        if int(counts(mid).sum()) <= total:
            lo = mid
        else:
            hi = mid
    out: list[int] = counts(lo).tolist()
    heap = [(take(c, capacities[i]), i) for i, c in enumerate(out)]
    heapq.heapify(heap)
    for _ in range(total - sum(out)):
        _, i = heapq.heappop(heap)
        out[i] += 1
        heapq.heappush(heap, (take(out[i], capacities[i]), i))
    return out


def deal_by_capacity(
    members: Sequence[str],
    capacities: Mapping[str, float],
    partitions: Sequence[int],
    lag: Mapping[int, int] | None = None,
) -> dict[str, list[int]]:
    """A fresh placement for members who can all take any partition: each member gets
    its Sainte-Laguë count. Without lag, in runs. With lag, each member's picks are spread
    evenly over the partitions ordered heaviest first (its k-th of c picks at fraction
    (k + 1/2) / c of the order, members of equal count taking turns), so every member's
    average lag is near the group's and its lag near its share: ``deal_uniform``'s snake,
    for unequal counts."""
    counts = quotas(len(partitions), [capacities[m] for m in members])
    if not lag or not any(lag.values()):
        out: dict[str, list[int]] = {}
        start = 0
        for m, c in zip(members, counts, strict=True):
            out[m] = sorted(partitions[start : start + c])
            start += c
        return out
    sizes = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(members)), sizes)
    first = np.repeat(np.cumsum(sizes) - sizes, sizes)
    k = np.arange(len(owner)) - first
    place = (k + 0.5) / np.repeat(sizes, sizes)
    # Members of equal count pick at the same places: like the snake, they take turns
    # going first (ascending on even picks, descending on odd ones).
    turn = np.where(k % 2 == 0, owner, -owner)
    slots = owner[np.lexsort((turn, place))]  # the member of each rank
    ordered = np.asarray(heaviest_first(partitions, lag), dtype=np.int64)
    mine = ordered[np.argsort(slots, kind="stable")]  # grouped by member, in rank order
    parts = np.split(mine, np.cumsum(sizes)[:-1])
    return {m: sorted(p.tolist()) for m, p in zip(members, parts, strict=True)}
