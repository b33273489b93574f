"""Reaching the brokers at start-up.

In Kubernetes a broker that is not up yet is a normal state, not a crash: the daemon
stays alive (``/healthz`` 200, ``/readyz`` 503), logs one line per attempt, retries with
backoff, and gives up after ``startup.timeout`` with one line naming the address and
what to check.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from controller import logs
from controller.errors import CredentialsError, UnreachableError

log = logs.get("ballast.startup")

T = TypeVar("T")

#: What "the other side is not there (yet)" looks like; anything else is not retried.
NOT_REACHABLE: tuple[type[BaseException], ...] = (
    KafkaConnectionError,
    KafkaTimeoutError,
    OSError,
    TimeoutError,
)
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 15.0


def reason(exc: BaseException) -> str:
    """One line for an expected network error (no class paths, no traceback)."""
    if isinstance(exc, KafkaConnectionError):
        return "no broker answered"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


async def reach(
    what: str,
    address: str,
    attempt: Callable[[], Awaitable[T]],
    timeout: float,
    hint: str,
    *,
    refused: Callable[[], Awaitable[str | None]] | None = None,
    credentials: str = "",
) -> T:
    """``attempt()`` until it succeeds or ``timeout`` seconds have passed. ``refused``
    tells a failed attempt that no retry can mend (a login refused: ``CredentialsError``
    at once, naming ``credentials``) from a broker not there yet."""
    deadline = time.monotonic() + timeout
    backoff = FIRST_BACKOFF
    tries = 0
    while True:
        tries += 1
        try:
            return await attempt()
        except NOT_REACHABLE as exc:
            why = await refused() if refused is not None else None
            if why is not None:
                raise CredentialsError(f"{what} at {address}: {why}: check {credentials}") from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnreachableError(
                    f"cannot reach {what} at {address} ({tries} attempt(s) in {timeout:g}s, "
                    f"last: {reason(exc)}); {hint}"
                ) from None
            wait = min(backoff, left)
            log.warning(
                "broker_unreachable",
                broker=what,
                address=address,
                attempt=tries,
                error=reason(exc),
                retry_in=round(wait, 2),
            )
            await asyncio.sleep(wait)
            backoff = min(backoff * 2, MAX_BACKOFF)


async def wait_connected(
    what: str,
    address: str,
    connected: asyncio.Event,
    timeout: float,
    hint: str,
    *,
    given_up: asyncio.Event | None = None,
) -> None:
    """For a client that reconnects by itself (and logs each attempt): wait for it, or
    until ``given_up`` is set (the client stopped trying: its caller says why)."""
    waits = {asyncio.ensure_future(connected.wait())}
    if given_up is not None:
        waits.add(asyncio.ensure_future(given_up.wait()))
    try:
        await asyncio.wait(waits, timeout=max(timeout, 0.001), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    if not connected.is_set() and not (given_up is not None and given_up.is_set()):
        raise UnreachableError(f"cannot reach {what} at {address} within {timeout:g}s; {hint}")
