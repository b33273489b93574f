"""``SideLoop``: a coroutine run on another thread's loop behaves, for the caller, like
one awaited here: its result, its exception and its cancellation cross over."""

from __future__ import annotations

import asyncio
import threading

import pytest

from controller.adapters.side_loop import SideLoop


async def _sleeps_until_cancelled(started: threading.Event, cancelled: threading.Event) -> None:
    started.set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        cancelled.set()
        raise


async def test_results_exceptions_and_cancellation_cross_over() -> None:
    side = SideLoop("test-side")
    side.start()
    try:

        async def where() -> str:
            return threading.current_thread().name

        assert await side.run(where()) == "test-side"

        async def fails() -> None:
            raise KeyError("there")

        with pytest.raises(KeyError, match="there"):
            await side.run(fails())

        started, cancelled = threading.Event(), threading.Event()
        task = asyncio.create_task(side.run(_sleeps_until_cancelled(started, cancelled)))
        await asyncio.to_thread(started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(cancelled.wait, 10)
    finally:
        await side.stop()
    assert not side.running


async def test_stop_cancels_what_still_runs_there_and_run_then_refuses() -> None:
    side = SideLoop("test-side-stop")
    side.start()
    started, cancelled = threading.Event(), threading.Event()
    pending = asyncio.create_task(side.run(_sleeps_until_cancelled(started, cancelled)))
    await asyncio.to_thread(started.wait)
    await side.stop()
    assert cancelled.is_set()
    with pytest.raises(asyncio.CancelledError):
        await pending
    with pytest.raises(RuntimeError, match="test-side-stop is not running"):
        await side.run(asyncio.sleep(0))
