"""Pausing Python's cyclic garbage collector around bursts of acyclic objects.

A build, an event of the engine, or a decoded response allocates thousands to millions of
containers that reference counting frees; a collection in the middle walks them all (and
everything else young) for nothing: 25-116 ms seen here.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside. Safe when pauses overlap, across threads too: whoever found
    the collector on turns it back on, so it never stays off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
