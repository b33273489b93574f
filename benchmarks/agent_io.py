"""The fleet agents' side of their pipe to the driver (``fleet_agent.py``,
``group_agent.py``): JSON-line commands in on stdin, each run as its own task and answered
``{"id": N}`` once done; events out on stdout."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any


def say(body: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(body, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def serve(
    run: Callable[[dict[str, Any]], Awaitable[None]], close: Callable[[], Awaitable[object]]
) -> None:
    """Run every command until stdin closes, then ``close``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending: set[asyncio.Task[None]] = set()

    async def answered(cmd: dict[str, Any]) -> None:
        await run(cmd)
        say({"id": cmd["id"]})

    try:
        while line := await reader.readline():
            task = asyncio.create_task(answered(json.loads(line)))
            pending.add(task)
            task.add_done_callback(pending.discard)
    finally:
        await close()
