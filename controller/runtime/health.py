"""What this replica can reach and how its background tasks fare. Readiness,
``ballast_connection_up`` and ``/v1/health`` all read it from here, so the three agree
(the gauge once said 1 for as long as the process lived, whatever the broker did)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from controller import logs
from controller.runtime.metrics import Metrics

log = logs.get("ballast.health")


@dataclass
class Link:
    """A connection to a broker, as last observed."""

    up: bool = False
    #: Wall-clock time of the last change (or of the first observation).
    since: float = 0.0
    last_error: str | None = None


@dataclass
class TaskRecord:
    """A supervised background task: how often it failed and what it said last."""

    failures: int = 0
    last_error: str | None = None
    last_failed_at: float | None = None
    #: Wall-clock time of the next restart while it waits out its backoff; else None.
    restarting_at: float | None = None


class Health:
    def __init__(self, metrics: Metrics, on_change: Callable[[], None] = lambda: None) -> None:
        self._metrics = metrics
        self._on_change = on_change
        self.links: dict[str, Link] = {}
        self.tasks: dict[str, TaskRecord] = {}
        #: Links readiness waits for (the names of ``links``); others are only shown.
        self.required: set[str] = set()

    def link(self, name: str, up: bool, error: str | None = None) -> bool:
        """Record an observation of connection ``name``; True when it changed state."""
        self._metrics.connected.labels(name).set(1 if up else 0)
        current = self.links.get(name)
        if current is not None and current.up == up:
            if error is not None:
                current.last_error = error
            return False
        self.links[name] = Link(
            up, time.time(), error if current is None or error else current.last_error
        )
        self._on_change()
        return True

    def unreachable(self) -> list[str]:
        """Required links that are not up (never observed counts as not up)."""
        return sorted(n for n in self.required if not (n in self.links and self.links[n].up))

    def task_failed(self, name: str, error: str, retry_in: float) -> None:
        record = self.tasks.setdefault(name, TaskRecord())
        now = time.time()
        record.failures += 1
        record.last_error = error
        record.last_failed_at = now
        record.restarting_at = now + retry_in
        self._metrics.task_failures.labels(name).inc()

    def task_running(self, name: str) -> None:
        if name not in self.tasks:  # its failure series exists from the start, at 0
            self._metrics.task_failures.labels(name)
        self.tasks.setdefault(name, TaskRecord()).restarting_at = None

    def view(self) -> dict[str, object]:
        return {
            "connections": {
                name: {
                    "up": link.up,
                    "required": name in self.required,
                    "since": _iso(link.since),
                    "last_error": link.last_error,
                }
                for name, link in sorted(self.links.items())
            },
            "tasks": {
                name: {
                    "state": "restarting" if t.restarting_at is not None else "running",
                    "failures": t.failures,
                    "last_error": t.last_error,
                    "last_failed_at": _iso(t.last_failed_at),
                    "restarting_at": _iso(t.restarting_at),
                }
                for name, t in sorted(self.tasks.items())
            },
        }


def _iso(wall: float | None) -> str | None:
    if wall is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))
