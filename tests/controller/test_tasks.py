"""``cancel_and_wait``: the tasks end; the caller's own cancellation survives."""

from __future__ import annotations

import asyncio

import pytest

from controller.tasks import cancel_and_wait


async def _slow_to_stop(stopping: asyncio.Event) -> None:
    """Cleans up for a while when cancelled (a client closing its connections)."""
    try:
        await asyncio.sleep(3600)
    finally:
        stopping.set()
        await asyncio.sleep(0.2)


async def test_a_caller_cancelled_while_it_waits_stays_cancelled() -> None:
    stopping = asyncio.Event()
    worker = asyncio.create_task(_slow_to_stop(stopping))
    await asyncio.sleep(0)
    went_on = False

    async def stopper() -> None:
        nonlocal went_on
        await cancel_and_wait(worker)
        went_on = True

    caller = asyncio.create_task(stopper())
    await stopping.wait()  # the worker is cleaning up, the caller waits for it
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert not went_on
    assert worker.cancelling() == 1  # the worker was asked to stop, and still ends
    await asyncio.wait([worker])
    assert worker.cancelled()


async def test_tasks_that_failed_or_finished_are_waited_for_and_their_outcome_consumed() -> None:
    async def fails() -> None:
        raise RuntimeError("on the way out")

    async def sleeps() -> None:
        await asyncio.sleep(3600)

    failed = asyncio.create_task(fails())
    sleeping = asyncio.create_task(sleeps())
    await asyncio.sleep(0)
    await cancel_and_wait(failed, None, sleeping)
    assert isinstance(failed.exception(), RuntimeError)
    assert sleeping.cancelled()
    await cancel_and_wait()  # nothing to end
