"""When the lag policy may move partitions again.

A member that cannot keep up with any share (a slow host, a poison record) stays the
most lagged whatever it is given: each lag step hands it fresh partitions for the ones
it gave away, and those lag too. Moving every poll then costs a revoke and a restart per
partition and buys nothing (8 lag rebalances in 40 s, 22 partitions moved, total lag
rising, with one worker at a third of its share's rate). So after a lag step the group
waits ``cooldown``; when the next step is for the same member, at a lag no lower than at
the last one, the moves did not help it and its wait doubles (up to ``backoff_max``);
once the most lagged member is another, or its lag fell, the wait is ``cooldown`` again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LastMove:
    member: str
    lag: int
    wait: float
    at: float


class LagCooldown:
    def __init__(self, cooldown: float, backoff_max: float) -> None:
        self.cooldown = cooldown
        self.backoff_max = max(backoff_max, cooldown)
        self.last: LastMove | None = None

    def allows(self, now: float) -> bool:
        last = self.last
        return last is None or now >= last.at + last.wait

    def until(self) -> float | None:
        """When lag moves are allowed again (None: now)."""
        return None if self.last is None else self.last.at + self.last.wait

    def moved(self, now: float, member: str, lag: int) -> float:
        """A lag step moved partitions for ``member`` (the most lagged, at ``lag``): how
        long the group now waits before the next one."""
        last = self.last
        wait = self.cooldown
        if last is not None and last.member == member and lag >= last.lag:
            wait = min(max(last.wait, self.cooldown) * 2, self.backoff_max)
        self.last = LastMove(member, lag, wait, now)
        return wait
