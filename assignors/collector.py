"""Python's cyclic garbage collector around bursts of acyclic objects.

A build, an event of the engine, or a decoded response allocates thousands to millions of
containers that reference counting frees; a collection in the middle walks them all (and
everything else young) for nothing: 25-116 ms seen here. A long-lived state built at
once is moved out of the collector's sight (``freeze_built``), so later full
collections walk only what is new.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
#: Pauses in progress, in every thread, and whether the collector was on when the first
#: of them began: it is turned back on when the last one ends, not before.
_pauses = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside, however pauses overlap, across threads too (the metadata
    decode pauses in a worker thread while the event loop pauses around an engine
    event): the collector is back on when the last pause ends, if it was on before the
    first."""
    global _pauses, _was_enabled  # noqa: PLW0603 -- one collector per process
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def freeze_built() -> None:
    """After a long-lived state was built at once: everything alive moves to the
    permanent generation, which full collections skip (still freed by reference
    counting when replaced). What an earlier call froze is unfrozen and collected first,
    so cycles among replaced states are freed, never kept for good; that one full
    collection is the price, paid where the build already paid far more."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
