"""The cancellation Python 3.11's ``asyncio.wait_for`` drops, made to happen on purpose."""

from __future__ import annotations

import asyncio


async def swallowing_wait(done: asyncio.Future[int], victim: asyncio.Task[None]) -> int:
    """``asyncio.wait_for`` (as aiomqtt's ``publish`` awaits its PUBACK) with ``victim``
    cancelled in the very turn its future completes (cpython gh-86296)."""

    def complete_and_cancel() -> None:
        done.set_result(1)
        victim.cancel()

    asyncio.get_running_loop().call_soon(complete_and_cancel)
    return await asyncio.wait_for(done, 10)  # noqa: TID251 (what the library does)
