"""A member's fail-stop, the same for every binding: when a part that keeps its right to
its partitions dies, it stops fetching and acknowledging, lets go of everything, and the
application's next poll raises ``MemberFailedError``."""

from __future__ import annotations

from prometheus_client import Counter

from controller import logs

log = logs.get("ballast.client")

FAIL_STOPS = Counter(
    "ballast_client_fail_stops_total",
    "Managed consumers that stopped holding partitions because a task that keeps their "
    "right to them died, by task (assignments, presence, heartbeats, watchdog).",
    ["task"],
)

#: How long a failed member waits for its last commit before it lets go anyway (s).
FAIL_STOP_COMMIT_TIMEOUT = 5.0


class MemberFailedError(RuntimeError):
    """A task that keeps this member's right to its partitions died: the consumer has
    released everything and consumes nothing more (``__cause__`` says why)."""


def member_failed(group: str, member: str, task: str, cause: BaseException) -> MemberFailedError:
    """The error to raise at the next poll, counted and logged once."""
    failure = MemberFailedError(
        f"{group}/{member}: the {task} task died ({cause!r}); the member released its "
        "partitions and must be started again"
    )
    failure.__cause__ = cause
    FAIL_STOPS.labels(task).inc()
    log.error("member_failed", group=group, member=member, task=task, error=repr(cause))
    return failure
