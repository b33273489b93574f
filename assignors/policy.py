"""When lag alone justifies moving partitions, and how many.

Lag readings are noisy. Without hysteresis a fresh reading would reshuffle a healthy
group; without a budget one reading could move half the fleet. Count balance is never
traded for lag.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LagPolicy:
    #: Act only when the largest member lag exceeds ``trigger_ratio`` x the lower bound of
    #: the best achievable largest member lag (max of mean member lag and largest partition).
    trigger_ratio: float = 1.25
    #: Stop improving once the largest member lag is within ``target_ratio`` x that bound.
    target_ratio: float = 1.05
    #: Partition moves allowed per call for lag alone (a swap costs two).
    max_moves: int = 16
    #: Ignore skew while the largest member lag is below this many messages.
    min_lag: int = 1_000
    #: How many of the least-lagged members are tried as partners per step.
    candidates: int = 8
    #: Take a step only when it lowers the largest member's lag (its load per unit of
    #: capacity) by at least this fraction: a move costs its partition a revoke and a
    #: restart, and one that buys 1 % is waste. 0 takes any step that lowers it.
    min_gain: float = 0.0

    def __post_init__(self) -> None:
        if not 1.0 <= self.target_ratio <= self.trigger_ratio:
            raise ValueError(
                "LagPolicy: need 1.0 <= target_ratio <= trigger_ratio, got "
                f"target_ratio={self.target_ratio}, trigger_ratio={self.trigger_ratio}"
            )
        if self.max_moves < 0 or self.min_lag < 0 or self.candidates < 1:
            raise ValueError("LagPolicy: max_moves and min_lag must be >= 0, candidates >= 1")
        if not 0.0 <= self.min_gain < 1.0:
            raise ValueError(f"LagPolicy: need 0 <= min_gain < 1, got {self.min_gain}")


DEFAULT_POLICY = LagPolicy()
