"""Structured logging: JSON lines when not on a TTY, readable console output when on one.

Third-party loggers (aiokafka, aiomqtt, asyncio) go through the same processors and
renderer, so a log stream is one format, and an expected network error from a library is
one line, not a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Literal

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(level: str = "info", fmt: Literal["auto", "json", "console"] = "auto") -> None:
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Library loggers at warning (their info lines are per-connection chatter); their
    # tracebacks only at debug.
    errors = structlog.processors.format_exc_info if level == "debug" else _one_line
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(LibraryFlood())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *shared,
                structlog.stdlib.add_logger_name,
                structlog.stdlib.ExtraAdder(allow={"suppressed"}),
                errors,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.WARNING, _LEVELS[level]))


def _one_line(_: object, __: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """A library's exception becomes its type and message, not a traceback: these are
    network errors the caller already handles (reconnect, retry). ``logging.level: debug``
    keeps the traceback."""
    exc_info = event.pop("exc_info", None)
    if exc_info:
        if exc_info is True:
            exc_info = sys.exc_info()
        if isinstance(exc_info, tuple) and exc_info[1] is not None:
            event["error"] = f"{type(exc_info[1]).__name__}: {exc_info[1]}"
    return event


@contextlib.contextmanager
def quiet(name: str) -> Iterator[None]:
    """Silence a library's logger for the block: for attempts whose failure the caller
    reports itself, once (``aiokafka`` logs every refused connection as an error)."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def get(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger


class Throttle:
    """At most ``burst`` lines per key (a bounded set: input sources, causes) in each
    ``window`` seconds. A flood of bad input must not become a flood of log lines (each
    one is still counted in a metric); the next line that gets through says how many
    were held back since the last one (``suppressed``)."""

    def __init__(
        self,
        burst: int = 10,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        self._burst = burst
        self._window = window
        self._clock = clock
        self._max_keys = max_keys
        #: key -> (window start, lines let through in it, lines held back since the last)
        self._state: dict[str, tuple[float, int, int]] = {}

    def __len__(self) -> int:
        """Keys tracked now."""
        return len(self._state)

    def allow(self, key: str) -> int | None:
        """None: hold this line back. Otherwise log it, with the count returned."""
        now = self._clock()
        if key not in self._state and len(self._state) >= self._max_keys:
            self._state.clear()  # bounded whatever the keys: start every count afresh
        start, passed, held = self._state.get(key, (now, 0, 0))
        if now - start >= self._window:
            start, passed = now, 0
        if passed >= self._burst:
            self._state[key] = (start, passed, held + 1)
            return None
        self._state[key] = (start, passed + 1, 0)
        return held


class LibraryFlood(logging.Filter):
    """One line per library message (logger and template: a bounded set, written in the
    library's code) every ``window`` seconds. With a broker down, aiokafka logs each
    failed attempt of each client (1 600 lines in 20 s here); the line that gets through
    says how many were held back (``suppressed``)."""

    def __init__(self, throttle: Throttle | None = None) -> None:
        super().__init__()
        self._throttle = Throttle(burst=1, window=10.0) if throttle is None else throttle

    def filter(self, record: logging.LogRecord) -> bool:
        held = self._throttle.allow(f"{record.name}\0{record.msg}")
        if held is None:
            return False
        if held:
            record.suppressed = held
        return True


def clipped(text: str, limit: int = 500) -> str:
    """Outside text in a log line, bounded (a name or reason may be megabytes long)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
