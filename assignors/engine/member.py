"""One member of a group: its partitions ordered by lag, and its place in the orders.

Partitions are ints (``ids.py``) and a member's ``by_lag`` holds ``lag << LAG_SHIFT |
pid`` entries, so sorting and bisection run at C speed. ``key`` and ``take_key`` are the
KIP-54 (or capacity-weighted) donor and receiver orders."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import filterfalse
from operator import attrgetter

from ..ids import (
    pid_of,
    topic_of,
)
from ..types import TopicPartition

#: ``(score, lag, name)``: ``give`` or ``take`` of the member's count (``capacity.py``)
#: and its lag, both per unit of capacity. With capacity 1 (the default) the scores are
#: ``2 * count -+ 1`` and the lag is the member's lag, all ints: the order is by count.
Key = tuple[float, float, str]


#: A member's pinned partitions when it holds none (shared; replaced on its first pin).
NO_PINS: frozenset[int] = frozenset()


@dataclass(slots=True, eq=False)
class Member:
    name: str
    topics: frozenset[str]
    #: ``topics`` as topic ids.
    tids: frozenset[int]
    #: ``effective lag << 64 | pid``, ascending: the member's partitions by lag. After a
    #: lag update it may be ``stale`` (right partitions, old weights) until first needed:
    #: read it in weight order through ``IncrementalAssignor._entries``.
    by_lag: list[int] = field(default_factory=list)
    lag: int = 0
    #: topic id -> how many of its partitions this member holds; counted on first need
    #: (``holding``), since most members of a large build are never asked.
    held: dict[int, int] | None = None
    stale: bool = False
    #: The topic groups this member subscribes to, valid while ``groups_version`` is current.
    groups: tuple[int, ...] = ()
    groups_version: int = -1
    #: The member's declared weight: balance gives it partitions and lag in proportion.
    capacity: float = 1
    #: The operator's cap on its count (``constraints.py``), pins included.
    cap: int | None = None
    #: Pinned partitions it holds: counted in its load, never moved by balance.
    pinned: AbstractSet[int] = NO_PINS
    #: Its number in the engine's per-partition owner array (``_holder_slots``).
    slot: int = -1
    #: With shared partitions: its sorted partition list as first handed out
    #: (``IncrementalAssignor._lists``), then kept in step move by move (``_relist``).
    #: None until first listed, and without shared ones.
    listed: list[TopicPartition] | None = None

    @property
    def count(self) -> int:
        return len(self.by_lag)

    def key(self) -> Key:
        """The donor order (``_donors``, holder heaps): who gives first. A member above
        its cap gives before anyone."""
        c, w = len(self.by_lag), self.capacity
        if self.cap is not None and c > self.cap:
            return (math.inf, self.lag / w, self.name)
        if w == 1:
            return (2 * c - 1, self.lag, self.name)
        return ((2 * c - 1) / w, self.lag / w, self.name)

    def take_key(self) -> Key:
        """The receiver order (topic-group heaps): who takes first. A member at its cap
        takes nothing."""
        c, w = len(self.by_lag), self.capacity
        if self.cap is not None and c >= self.cap:
            return (math.inf, self.lag / w, self.name)
        if w == 1:
            return (2 * c + 1, self.lag, self.name)
        return ((2 * c + 1) / w, self.lag / w, self.name)

    def load(self) -> float:
        """The member's lag per unit of capacity: what lag balance evens out."""
        return self.lag if self.capacity == 1 else self.lag / self.capacity

    def share(self, lag: float) -> float:
        """``lag`` per unit of this member's capacity."""
        return lag if self.capacity == 1 else lag / self.capacity

    def holding(self) -> dict[int, int]:
        """topic id -> how many of its partitions the member could give away."""
        held = self.held
        if held is None:
            pids: Iterable[int] = map(pid_of, self.by_lag)
            if self.pinned:
                pids = filterfalse(self.pinned.__contains__, pids)
            held = self.held = Counter(map(topic_of, pids))
        return held


lag_of = attrgetter("lag")


capacity_weight = attrgetter("capacity")


by_lag_of = attrgetter("by_lag")


name_of = attrgetter("name")


slot_of = attrgetter("slot")
