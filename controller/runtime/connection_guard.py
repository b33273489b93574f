"""Bounds on the connections a listener holds, whoever opens them.

aiohttp closes a keep-alive connection that idles after a response, but not one that
never completes its first request: an idle socket, or one that trickles a header byte
every few seconds, stays open for good, and enough of them exhaust the process's file
descriptors (the liveness probe then times out). The guard wraps the server's protocol
factory: a connection that is not inside a request for ``idle_timeout`` is closed, and at
``max_connections`` the connection idle longest makes room for the new one (so a probe
that sends its request at once always gets in; only when every connection is inside a
request is the new one refused).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Literal, cast

#: Why the guard closed a connection (the label of ``ballast_http_connections_closed_total``).
Reason = Literal["idle", "evicted", "refused"]


class ConnectionGuard:
    """One listener's connections: which are inside a request, and since when the others
    have idled. The event loop's callbacks are its only writers."""

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        max_connections: int,
        idle_timeout: float,
        on_close: Callable[[Reason], None],
    ) -> None:
        self._factory = factory
        self._max = max_connections
        self._idle_timeout = idle_timeout
        self._on_close = on_close
        self._open: dict[asyncio.Transport, _Guarded] = {}
        #: Connections outside a request, oldest idle first (dicts keep insertion order).
        self._idle: dict[asyncio.Transport, asyncio.TimerHandle] = {}

    def __call__(self) -> asyncio.Protocol:
        return _Guarded(self, self._factory())

    def count(self) -> int:
        """Connections held now (the ``ballast_http_connections`` gauge)."""
        return len(self._open)

    def busy(self, transport: asyncio.Transport | None) -> None:
        """A request arrived whole on ``transport``: no idle clock while it is handled."""
        if transport is not None and (timer := self._idle.pop(transport, None)) is not None:
            timer.cancel()

    def rested(self, transport: asyncio.Transport | None) -> None:
        """Its request was answered: the idle clock starts again."""
        if transport is not None and transport in self._open and transport not in self._idle:
            self._arm(transport)

    def admit(self, protocol: _Guarded, transport: asyncio.Transport) -> bool:
        if len(self._open) >= self._max:
            if not self._idle:
                transport.abort()
                self._on_close("refused")
                return False
            oldest = next(iter(self._idle))
            self._close(oldest, "evicted")
        self._open[transport] = protocol
        self._arm(transport)
        return True

    def _arm(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        self._idle[transport] = loop.call_later(self._idle_timeout, self._close, transport, "idle")

    def _close(self, transport: asyncio.Transport, reason: Reason) -> None:
        if transport in self._open:
            self.forget(transport)
            transport.abort()
            self._on_close(reason)

    def forget(self, transport: asyncio.Transport) -> None:
        """The connection ended (or is being ended): nothing of it is kept."""
        if (timer := self._idle.pop(transport, None)) is not None:
            timer.cancel()
        self._open.pop(transport, None)


class _Guarded(asyncio.Protocol):
    """The server's protocol for one connection, admitted (or not) by the guard first."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # a stream server's: TCP
        if self._guard.admit(self, transport):
            self._transport = transport
            self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._guard.forget(self._transport)
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._transport is not None else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
