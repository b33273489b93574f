"""What a group's rebalances are tuned by and what each one decided: the records the
runtime logs and counts, apart from the state that makes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from assignors import LagPolicy, LagTrigger

REASONS = (
    "join",
    "leave",
    "crash",
    "subscription",
    "lag",
    "partitions",
    "racks",
    "capacity",
    "constraints",
    "drain",
    "undrain",
    "unverifiable",
    "forced",
)
#: How a member's partitions came to need a new reader when it went away.
DEPARTURES = frozenset({"leave", "crash", "drain", "unverifiable"})
#: Members named per reason in a rebalance's ``about`` (a log line stays short).
ABOUT_SHOWN = 10


@dataclass(frozen=True, slots=True)
class GroupTuning:
    rebalance_delay: float = 1.0
    #: An empty group's first rebalance waits until no member joined for
    #: ``rebalance_delay``, but at most this long after the first join (Kafka's
    #: ``group.initial.rebalance.delay.ms``): a fleet starting up gets one placement,
    #: not a placement and then handoffs to everyone who joined a moment later.
    initial_delay: float = 0.0
    #: Joins to a group with members hold its rebalance while they keep arriving, at most
    #: this long after the window's first event (``pending.py``).
    max_delay: float = 0.0
    leave_grace: float = 10.0
    handoff_timeout: float = 15.0
    #: Weight of a new lag reading in the exponential moving average (1.0: no smoothing).
    lag_smoothing: float = 0.3
    #: Lag readings one tick hands the engine; the rest wait for the next ticks, so a
    #: poll of every partition never stalls the loop (costs O(readings), spread out).
    lag_batch: int = 2000
    policy: LagPolicy = field(default_factory=LagPolicy)
    #: After a step that moved partitions for lag, none moves for lag for this long;
    #: doubled, up to ``lag_backoff_max``, while the same member stays the most lagged
    #: at no lower lag (``lag_cooldown.py``). 0: no wait.
    lag_cooldown: float = 0.0
    lag_backoff_max: float = 600.0


@dataclass(frozen=True, slots=True)
class Rebalance:
    """What one rebalance decided, for logs and metrics."""

    reasons: tuple[str, ...]
    moved: int
    moved_for_lag: int
    changed_members: int
    #: Time of the earliest event this rebalance absorbed (for latency).
    first_event_at: float
    #: When its coalescing window closed (``first_event_at`` + the delay it waited).
    due_at: float
    #: Time the engine took (``IncrementalAssignor.apply``).
    assign_seconds: float
    #: Why the lag policy moved partitions, when it did.
    lag_trigger: LagTrigger | None = None
    #: Of ``moved``, those swapped onto a replica's rack.
    moved_for_rack: int = 0
    #: Partitions of members that went away (by how: leave, crash, drain): they change
    #: reader too, though nobody present gave them up.
    freed: Mapping[str, int] = field(default_factory=dict)
    #: The members each reason was about (at most ``ABOUT_SHOWN`` named per reason).
    about: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def reassigned(self) -> int:
        """Partitions whose reader changed: taken from a present member or freed."""
        return self.moved + sum(self.freed.values())

    def by_reason(self) -> dict[str, int]:
        """``reassigned`` split by why: freed ones by how their member went; taken ones
        for lag, for a rack, or else for the step's first other reason (a join, an
        undrain, new constraints...)."""
        out = {k: v for k, v in self.freed.items() if v}
        balance = self.moved - self.moved_for_lag - self.moved_for_rack
        other = next((r for r in self.reasons if r not in DEPARTURES), None)
        cause = other or (self.reasons[0] if self.reasons else "forced")
        for reason, count in (("lag", self.moved_for_lag), ("rack", self.moved_for_rack)):
            if count:
                out[reason] = out.get(reason, 0) + count
        if balance:
            out[cause] = out.get(cause, 0) + balance
        return out

    def why(self) -> str:
        """One line an operator reads: who it was about, what moved, and for lag, whose
        lag and how far past the bound."""
        about = "; ".join(
            f"{reason} {', '.join(names)}" for reason, names in self.about.items() if names
        )
        head = (
            f"{','.join(self.reasons)}{f' ({about})' if about else ''}: "
            f"{self.changed_members} member(s) changed, moved {self.reassigned()}"
        )
        freed = sum(self.freed.values())
        if freed and self.moved:
            head += f" ({freed} from departed members)"
        if self.moved_for_rack:
            head += f" ({self.moved_for_rack} onto a replica's rack)"
        t = self.lag_trigger
        if not self.moved_for_lag or t is None:
            return head
        cause = (
            f"for lag: {t.member} was {t.lag / t.bound:.1f}x the bound "
            f"(lag {t.lag}, best possible largest {t.bound:.0f})"
        )
        if self.moved == self.moved_for_lag:
            return f"{head} {cause}"
        return f"{head}, {self.moved_for_lag} of them {cause}"
