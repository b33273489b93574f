"""A leave through a handoff, for every binding: the member says ``draining`` and reads
on while the controller revokes its partitions one move at a time and grants them to
others, so that a scale-in leaves no partition unread for the rebalance delay. It is
done once a record leaves it holding nothing, or at the deadline, after which the
binding's clean leave releases whatever is left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from controller.client.identity import State

#: How long a member waits for the controller to take its partitions (s): inside
#: Kubernetes' default ``terminationGracePeriodSeconds`` (30 s), with time left to close.
HANDOFF_TIMEOUT = 20.0


@dataclass(slots=True)
class Departure:
    deadline: float | None = None

    def request(self, timeout: float) -> bool:
        """Start (True), or False when already asked: the first deadline holds."""
        if not timeout > 0:
            raise ValueError(f"hand_off timeout must be above 0 s, got {timeout!r}")
        if self.deadline is not None:
            return False
        self.deadline = time.monotonic() + timeout
        return True

    def state(self, state: State) -> State:
        """What to announce: ``draining`` instead of ``active`` once asked."""
        return "draining" if self.deadline is not None and state == "active" else state

    def done(self, holding: bool, pending: bool) -> bool:
        """Asked, and nothing left to read (no grant waiting either), or out of time."""
        if self.deadline is None:
            return False
        return (not holding and not pending) or time.monotonic() >= self.deadline
