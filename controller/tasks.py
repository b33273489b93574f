"""Ending background tasks without losing the caller's own cancellation.

The usual ``task.cancel(); with suppress(CancelledError): await task`` cannot tell the
task's cancellation from the caller's: a caller cancelled while it waits (a shutdown
stopping the code that is stopping a group) swallows its cancellation and goes on.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel ``tasks`` (``None`` skipped) and wait until each has ended. How they ended
    (cancelled, failed on the way out) is consumed; a cancellation of the caller is not."""
    ending = [t for t in tasks if t is not None]
    for task in ending:
        task.cancel()
    if not ending:
        return
    await asyncio.wait(ending)
    for task in ending:
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not report it at collection


def reraise_swallowed_cancel() -> None:
    """Raise the cancellation a library swallowed. ``asyncio.wait_for`` on Python 3.11
    (aiomqtt's ``publish`` waits with it) returns its result when the cancellation
    arrives as the awaited thing completes (cpython gh-86296), but the task still counts
    the request (``cancelling()``): a loop that polls on would never end, and whoever
    awaits it after ``cancel()`` waits forever. Call it where a loop goes round, never in
    cleanup that runs while a cancellation is being handled."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
