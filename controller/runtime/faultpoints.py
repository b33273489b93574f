"""Named points where a test can freeze the daemon on purpose.

The races that break exclusive ownership happen when a process stops between a read and
a write. ``BALLAST_FAULT_POINTS=acquire.after_read,publish.after_confirm@2`` makes the
daemon log ``fault_point`` and SIGSTOP itself the first (or ``@N``-th) time it reaches
each named point; the test sends SIGCONT when it wants the process to go on. Unset (as
in production) it costs one dictionary lookup.

Points: ``acquire.after_read`` (log read, no epoch yet), ``acquire.before_epoch`` (epoch
computed, not committed), ``acquire.before_fence`` (epoch held, markers not written),
``publish.after_confirm`` (leadership confirmed, records not produced),
``release.before_cancel`` (shards revoked, group loops still running),
``admin.after_save`` (an operator action acknowledged by the constraints topic, not yet
applied).
"""

from __future__ import annotations

import os
import signal
import sys

from controller import logs

ENV = "BALLAST_FAULT_POINTS"
POINTS = (
    "acquire.after_read",
    "acquire.before_epoch",
    "acquire.before_fence",
    "publish.after_confirm",
    "release.before_cancel",
    "admin.after_save",
)


def parse(spec: str) -> dict[str, int]:
    """``"a,b@3"`` -> ``{"a": 1, "b": 3}``; unknown names are an error (a typo would
    silently test nothing)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, nth = item.partition("@")
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown fault point {name!r}; known: {', '.join(POINTS)}")
        if nth and (not nth.isdigit() or int(nth) < 1):
            raise ValueError(f"{ENV}: {item!r}: the count after @ must be a positive integer")
        out[name] = int(nth or 1)
    return out


_armed: dict[str, int] = parse(os.environ.get(ENV, ""))


def reached(point: str) -> None:
    """Freeze here if a test armed ``point`` and this is the armed occurrence."""
    if point not in _armed:
        return
    _armed[point] -= 1
    if _armed[point] > 0:
        return
    del _armed[point]
    logs.get("ballast.faultpoints").warning("fault_point", point=point, pid=os.getpid())
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSTOP)
