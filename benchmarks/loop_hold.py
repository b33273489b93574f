"""What a piece of work costs and how long it holds the event loop it runs on (shared by
the benchmarks): a ticker on the loop wakes every 5 ms, and its longest lateness is the
longest time nothing else on that loop (a rebalance, a presence, a lease renewal) could
run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
TICK = 0.005


async def _ticker(late: list[float]) -> None:
    while True:
        began = time.perf_counter()
        await asyncio.sleep(TICK)
        late.append(time.perf_counter() - began - TICK)


async def timed(work: Callable[[], Awaitable[T]]) -> tuple[T, dict[str, float]]:
    """``work()``'s result, and its wall and CPU seconds and longest hold (ms)."""
    late: list[float] = []
    ticker = asyncio.create_task(_ticker(late))
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        got = await work()
    finally:
        ticker.cancel()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return got, {"wall_s": wall, "cpu_s": cpu, "hold_ms": max(late, default=0.0) * 1000}
