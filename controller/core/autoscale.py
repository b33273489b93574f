"""How many members a group needs: from the offsets each lag poll reads, the input rate
(log-end deltas: over the window, or the last ``RISE`` s when higher), what a member
processes per unit of capacity when it has work waiting
(committed deltas of the partitions it holds), and the backlog; enough members to keep up
with ``headroom`` to spare and to drain the backlog within ``drain_time``.

A member's capacity is measured only while it is *busy* (more than a second of its work
waiting at both ends of a poll interval) and has held the same partitions for
``STARTING`` s: a member that keeps up processes what arrives, which says nothing of how
much more it could, and one that was just given partitions is still starting on them.
Until some member has been busy, the recommendation is the current count, and says why.

Partitions are whole: the member holding the most partitions, not the mean one, must keep
its headroom. The backlog counted is the one there will be when members asked for now
start working (``start_time`` on). The count moves in a band: up once the members there
keep less than ``headroom`` spare, to twice the headroom (a rising input does not ask
again at the next poll), down once they would keep more than twice. Scaling up follows
the measurement at once; scaling down only once every recommendation of the last
``scale_down_delay`` was lower (HPA's downscale stabilization) and those agree within 10 %
(the input has stopped falling: one step down, not a stair), so the count does not flap
with the input.

State stays bounded: the previous poll and its owners (one entry a partition each), the
members whose partitions changed in the last ``STARTING`` s, and four numbers per poll
interval in the rate window.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from assignors import TopicPartition
from controller.wire.offsets import PartitionOffsets

#: The input rate is the higher of the window's and the last this many seconds'.
RISE = 5.0
#: A member's first seconds on partitions it was given (connecting, finding its offsets,
#: its first fetches; a whole pod starting) are not its rate: its intervals count from
#: this long after its partitions last changed.
STARTING = 5.0


@dataclass(frozen=True, slots=True)
class AutoscaleRule:
    min_members: int
    max_members: int
    headroom: float
    drain_time: float
    rate_window: float
    scale_down_delay: float
    #: From asking for a member to its processing (a pod scheduled, started, connected).
    start_time: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.start_time < self.drain_time:
            raise ValueError(f"start_time {self.start_time:g} s is not below drain_time")


class Sizing(NamedTuple):
    """A recommendation and what it was made of."""

    desired: int
    current: int
    #: Records/s arriving on the group's partitions (None: not measured yet).
    input_rate: float | None
    #: Records/s one member of capacity 1 processes when busy (None: not measured yet).
    member_rate: float | None
    backlog: int
    reason: str


class _Interval(NamedTuple):
    seconds: float
    arrived: int
    #: Records processed by members busy throughout the interval, and their capacity.
    busy_processed: int
    busy_capacity: float


@dataclass
class Recommender:
    rule: AutoscaleRule
    _last: tuple[float, dict[TopicPartition, PartitionOffsets]] | None = None
    #: Who held each partition at the last poll.
    _owners: dict[TopicPartition, str] = field(default_factory=dict)
    #: When each member's partitions last changed, for ``STARTING`` s after (bounded:
    #: older entries go).
    _changed_at: dict[str, float] = field(default_factory=dict)
    _window: deque[tuple[float, _Interval]] = field(default_factory=deque)
    #: (time, recommendation before the scale-down delay), for the delay.
    _raw: deque[tuple[float, int]] = field(default_factory=deque)
    #: The last measured per-capacity rate, kept while no member is busy.
    _member_rate: float | None = None
    #: The last recommendation, and since when a lower one has waited for the input to
    #: stop falling.
    _desired: int | None = None
    _lower_since: float | None = None

    def observe(
        self,
        now: float,
        offsets: Mapping[TopicPartition, PartitionOffsets],
        owners: Mapping[TopicPartition, str],
        capacities: Mapping[str, float],
        reset: str,
    ) -> Sizing:
        """One lag poll's offsets, who held each partition and each member's capacity
        (the members now; missing means 1)."""
        backlog = sum(o.lag(reset) for o in offsets.values())
        current = len(capacities)
        changed = {m for tp, m in owners.items() if self._owners.get(tp) != m}
        changed.update(m for tp, m in self._owners.items() if owners.get(tp) != m)
        if self._last is not None and now > self._last[0]:
            then = self._last[0]
            starting = {m for m, t in self._changed_at.items() if t > then - STARTING}
            step = _interval(now, self._last, offsets, owners=owners, capacities=capacities,
                             reset=reset, starting=starting | changed)  # fmt: skip
            self._window.append((now, step))
        self._last = (now, dict(offsets))
        self._owners = dict(owners)
        self._changed_at = {m: t for m, t in self._changed_at.items() if t > now - STARTING}
        self._changed_at.update(dict.fromkeys(changed, now))
        while self._window and self._window[0][0] < now - self.rule.rate_window:
            self._window.popleft()
        if not self._window:
            return self._settle(
                now, Sizing(current, current, None, None, backlog, "measuring: one lag poll so far")
            )
        # A rise in the input counts at once (the last few seconds), a fall over the whole
        # window: a window's mean lags a step up by half the window, a backlog's growth.
        input_rate = max(_arrival_rate(self._window), _arrival_rate(self._window, now - RISE))
        busy = sum(i.busy_capacity * i.seconds for _, i in self._window)
        if busy > 0:
            self._member_rate = sum(i.busy_processed for _, i in self._window) / busy
        rate = self._member_rate
        if rate is None or rate <= 0:
            why = (
                "members keep up or are starting; what one can process is measured once one"
                f" has a backlog on partitions it has held for {STARTING:g} s"
            )
            return self._settle(now, Sizing(current, current, input_rate, None, backlog, why))
        r = self.rule
        mean_capacity = sum(capacities.values()) / current if current else 1.0
        per_member = rate * mean_capacity
        # The backlog when members asked for now start: what the members there cannot
        # process meanwhile adds to it, and it must be gone ``drain_time`` from now.
        behind = backlog + max(0.0, input_rate - current * per_member) * r.start_time
        drain = behind / (r.drain_time - r.start_time)
        low, high = (
            _members_for(input_rate * (1 + spare), drain, per_member, len(offsets))
            for spare in (r.headroom, 2 * r.headroom)
        )
        raw = current if low <= current <= high else high
        spare = _span(round(r.headroom * 100), round(r.headroom * 200), "%")
        reason = (
            f"input {input_rate:,.0f} rec/s, {rate:,.0f} rec/s per member, "
            f"backlog {_count(behind)} to drain in {_duration(r.drain_time)} "
            f"({_span(low, high)} members keep {spare} spare)"
        )
        return self._settle(now, Sizing(raw, current, input_rate, rate, backlog, reason))

    def _settle(self, now: float, found: Sizing) -> Sizing:
        """Bounds, then the scale-down delay: the highest recommendation of the delay,
        and lower only once those agree. ``found.desired`` is the measurement's own count."""
        r, raw = self.rule, found.desired
        partitions = len(self._last[1]) if self._last else 0
        ceiling = max(r.min_members, min(r.max_members, partitions or r.max_members))
        bounded = min(max(raw, r.min_members), ceiling)
        self._raw.append((now, bounded))
        while self._raw and self._raw[0][0] < now - r.scale_down_delay:
            self._raw.popleft()
        recent = [v for _, v in self._raw]
        desired = max(recent)
        notes = []
        if bounded != raw:
            notes.append(f"bounded to {bounded} by min {r.min_members}, max {ceiling}")
        last, falling = self._desired, False
        if last is None or desired >= last:
            self._lower_since = None
        else:
            # Every recommendation of the delay was lower. While they still fall (they
            # differ by more than HPA's 10 % tolerance), hold: one step down at the
            # bottom, not a stair behind the input; at most two delays more, so that
            # noise cannot hold it.
            if self._lower_since is None:  # (a mock clock's 0.0 is a time too)
                self._lower_since = now
            since = self._lower_since
            falling = desired - min(recent) > desired // 10
            if falling and now - since < 2 * r.scale_down_delay:
                desired = last
            else:
                falling, self._lower_since = False, None
        if falling:
            notes.append(f"held at {desired} while the input falls")
        elif desired > bounded:
            notes.append(f"held at {desired} by the scale-down delay")
        self._desired = desired
        text = f"{found.reason} -> {desired}" + "".join(f" ({n})" for n in notes)
        return found._replace(desired=desired, reason=text)


def remove_first(
    desired: int, member_lag: Mapping[str, int], capacities: Mapping[str, float]
) -> list[str]:
    """Which members to stop when fewer are wanted: those holding the least lag per unit
    of capacity (ties: by name). Only a stopped member's partitions move, so
    these move the least backlog onto the members that stay (a scaler that picks whom
    to stop reads this; a Deployment scales down its newest pods)."""
    surplus = len(member_lag) - desired
    if surplus <= 0:
        return []
    ranked = sorted(member_lag, key=lambda m: (member_lag[m] / capacities.get(m, 1.0), m))
    return ranked[:surplus]


def _members_for(keep_up: float, drain: float, per_member: float, partitions: int) -> int:
    """The fewest members that process ``keep_up + drain`` records/s, the one holding the
    most partitions of an even spread keeping up with its share of ``keep_up`` (the
    partitions taken as carrying the input alike: 24 at 31 rec/s each on 11 members of 100
    rec/s leave two holding 3, with 6 % spare; 12 hold 2 each)."""
    total = math.ceil(round((keep_up + drain) / per_member, 6))
    if keep_up <= 0 or partitions == 0:
        return total
    most = math.floor(round(partitions * per_member / keep_up, 6))
    return max(total, math.ceil(partitions / most) if most else partitions)


def _arrival_rate(window: deque[tuple[float, _Interval]], since: float = -math.inf) -> float:
    recent = [i for t, i in window if t > since] or [window[-1][1]]
    return sum(i.arrived for i in recent) / sum(i.seconds for i in recent)


def _interval(
    now: float,
    last: tuple[float, dict[TopicPartition, PartitionOffsets]],
    offsets: Mapping[TopicPartition, PartitionOffsets],
    *,
    owners: Mapping[TopicPartition, str],
    capacities: Mapping[str, float],
    reset: str,
    starting: set[str],
) -> _Interval:
    then, before = last
    arrived = 0
    processed: dict[str, int] = {}
    lag_before: dict[str, int] = {}
    lag_after: dict[str, int] = {}
    for tp, o in offsets.items():
        b = before.get(tp)
        if b is None:
            continue
        arrived += max(0, o.log_end - b.log_end)
        owner = owners.get(tp)
        if owner is None:
            continue
        done = (o.committed or 0) - (b.committed or 0) if b.committed is not None else 0
        processed[owner] = processed.get(owner, 0) + max(0, done)
        lag_before[owner] = lag_before.get(owner, 0) + b.lag(reset)
        lag_after[owner] = lag_after.get(owner, 0) + o.lag(reset)
    seconds = now - then
    # Busy: more than a second of its own work waiting at both ends of the interval. A
    # member that keeps up has only what arrived since its last commit.
    busy = [
        m
        for m, done in processed.items()
        if m not in starting
        and min(lag_before.get(m, 0), lag_after.get(m, 0)) > max(1.0, done / seconds)
    ]
    return _Interval(
        seconds,
        arrived,
        sum(processed[m] for m in busy),
        sum(capacities.get(m, 1.0) for m in busy),
    )


def _span(low: float, high: float, unit: str = "") -> str:
    text = f"{low:g}" if low == high else f"{low:g} to {high:g}"
    return f"{text} {unit}" if unit else text


def _count(n: float) -> str:
    for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f}"


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
