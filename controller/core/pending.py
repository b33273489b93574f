"""The events of a group's next rebalance while its coalescing window is open.

A burst of joins or leaves becomes one step. The window closes ``rebalance_delay`` after
its first event, except while joins keep arriving: each join holds it open another
``rebalance_delay``, up to ``max_delay`` after the first event (``initial_delay`` for an
empty group's first step). A scale-out whose joins trickle in over seconds is then one
placement, not one per wave in which early joiners take shares that later ones take back.
Other events never wait on joins: a leave still closes the window ``rebalance_delay`` after
it, whatever joins hold it open. Until the step runs, membership is read through it: a
member queued to join is in the group, one queued to leave is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from assignors import Event, MemberJoined, MemberLeft, SubscriptionChanged
from controller.core.rebalance import ABOUT_SHOWN, REASONS


class Declared(NamedTuple):
    """What a member declares about itself beside its topics."""

    rack: str | None
    capacity: float


def weight(capacity: float | None) -> float:
    return 1.0 if capacity is None else capacity


class Step(NamedTuple):
    """A closed window: its events and what they were for."""

    events: list[Event]
    #: In ``REASONS`` order.
    reasons: tuple[str, ...]
    #: When the first event was queued.
    first: float
    due: float
    #: The members each reason was about, in order (see ``Rebalance.about``).
    about: Mapping[str, tuple[str, ...]]
    #: How each member with a queued ``MemberLeft`` went (a ``DEPARTURES`` reason).
    departing: Mapping[str, str]


class PendingStep:
    def __init__(self, rebalance_delay: float, initial_delay: float, max_delay: float) -> None:
        self._delay = rebalance_delay
        self._initial = initial_delay
        self._max = max_delay
        self._clear()

    def _clear(self) -> None:
        self.events: list[Event] = []
        #: When the window closes (None: nothing queued).
        self.due: float | None = None
        #: A member's topics as they will be once the events are applied (None: leaving).
        self.topics: dict[str, frozenset[str] | None] = {}
        #: A member's rack and capacity as they will be once the events are applied.
        self.declared: dict[str, Declared] = {}
        self._first: float | None = None
        #: When the joins' window closes, and when the other events' does (None: none).
        self._joins_due: float | None = None
        self._others_due: float | None = None
        self._reasons: set[str] = set()
        self._about: dict[str, list[str]] = {}
        self._departing: dict[str, str] = {}

    def add(
        self,
        event: Event,
        reason: str,
        now: float,
        delay: float | None = None,
        *,
        group_empty: bool = False,
    ) -> None:
        """``delay``: how long the window stays open after this event (None: the
        rebalance delay; an empty group's join: up to the initial delay)."""
        self.events.append(event)
        if isinstance(event, MemberJoined | SubscriptionChanged):
            self.topics[event.member] = frozenset(event.topics)
            if isinstance(event, MemberJoined):
                self.declared[event.member] = Declared(event.rack, weight(event.capacity))
        elif isinstance(event, MemberLeft):
            self.topics[event.member] = None
            self.declared[event.member] = Declared(None, 1.0)
            self._departing[event.member] = reason
        member = getattr(event, "member", None)
        if isinstance(member, str):
            named = self._about.setdefault(reason, [])
            if len(named) < ABOUT_SHOWN and member not in named:
                named.append(member)
        self._reasons.add(reason)
        if self._first is None:
            self._first = now
        due = now + (self._delay if delay is None else delay)
        if delay is None and isinstance(event, MemberJoined):
            limit = self._initial if group_empty else self._max
            latest = self._first + max(limit, self._delay)
            held = due if self._joins_due is None else max(due, self._joins_due)
            self._joins_due = min(held, latest)
        elif self._others_due is None or due < self._others_due:
            self._others_due = due
        self.due = min(t for t in (self._joins_due, self._others_due) if t is not None)

    def take(self, now: float) -> Step:
        """Close the window: its step, and an empty window."""
        reasons = tuple(r for r in REASONS if r in self._reasons)
        step = Step(
            events=self.events,
            reasons=reasons,
            first=self._first if self._first is not None else now,
            due=self.due if self.due is not None else now,
            about={r: tuple(ms) for r, ms in self._about.items() if r in reasons},
            departing=self._departing,
        )
        self._clear()
        return step
