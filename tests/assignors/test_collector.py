from __future__ import annotations

import gc
import threading

from assignors import collector


def test_a_pause_overlapping_another_never_leaves_the_collector_off() -> None:
    """The metadata decode pauses the collector in a worker thread while the event loop
    may pause it too (the engine's ``apply``), in any order: whoever found it on turns
    it back on, so it is on once both are done, and off while the first one runs."""
    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def worker() -> None:
        with collector.paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    try:
        assert not gc.isenabled()
        with collector.paused():  # found it off: leaves it to the worker
            leave.set()
            t.join(10)
        assert gc.isenabled()  # the worker, which found it on, turned it back on
    finally:
        leave.set()
        t.join(10)
        gc.enable()
    with collector.paused():
        inside.clear()
        leave.clear()
        t = threading.Thread(target=worker)
        t.start()
        inside.wait(10)
    assert gc.isenabled()  # this pause found it on and turned it on; the worker is still in
    leave.set()
    t.join(10)
    assert gc.isenabled()
