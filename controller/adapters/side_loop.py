"""An event loop on a thread of its own, for Kafka clients whose answers are large.

aiokafka encodes requests and decodes responses in the event loop that reads them. The
lag poll's requests at 100 000 partitions (ListOffsets and OffsetFetch of every
partition, every ``lag.poll_interval``) took 2.7 s of CPU here, in pieces of up to
1.3 s, during which the controller's loop ran nothing: no rebalance, no presence, no
lease renewal. On a loop of its own the same work is interleaved with the controller's
by the interpreter every ``sys.getswitchinterval()`` (5 ms).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class SideLoop:
    """``run`` a coroutine there and await it here; cancelling the awaiting task cancels
    it there too. Whatever the coroutines build (aiokafka clients bind to the loop they
    are built in) lives and dies there."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self.running:
            coro.close()
            raise RuntimeError(f"{self._thread.name} is not running")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def stop(self) -> None:
        """End the loop, cancelling what still runs there, and wait for its thread."""
        if self.running:
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join)

    def _main(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
