from __future__ import annotations

import gc
import threading
import weakref

from assignors import collector, collector_paused, freeze_built


def _paused_in_a_thread() -> tuple[threading.Thread, threading.Event, threading.Event]:
    inside, leave = threading.Event(), threading.Event()

    def worker() -> None:
        with collector_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    assert inside.wait(10)
    return t, inside, leave


def test_overlapping_pauses_keep_the_collector_off_until_the_last_one_ends() -> None:
    """The metadata decode pauses the collector in a worker thread while the event loop
    may pause it too (the engine's ``apply``), in any order: it stays off while either
    runs, and is on again once both are done. (Until 2026-11-27 a pause that found the
    collector on turned it back on at its end, with the other one still inside.)"""
    assert gc.isenabled()
    t, _, leave = _paused_in_a_thread()
    try:
        with collector.paused():  # begins second, ends first
            assert not gc.isenabled()
        assert not gc.isenabled()  # the worker is still inside
    finally:
        leave.set()
        t.join(10)
    assert gc.isenabled()

    with collector.paused():  # begins first, ends first
        t, _, leave = _paused_in_a_thread()
    try:
        assert not gc.isenabled()
    finally:
        leave.set()
        t.join(10)
    assert gc.isenabled()


def test_a_pause_leaves_a_collector_that_was_off_off() -> None:
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_cycles_frozen_by_an_earlier_build_are_freed_by_the_next() -> None:
    """A group state frozen after its build and then replaced is freed by reference
    counting, except what sits in cycles: the next freeze collects it first instead of
    keeping it for good (until 2026-11-27 it stayed in the permanent generation)."""
    gc.disable()  # no collection but the ones this test makes
    try:
        node = _Node()
        gone = weakref.ref(node)
        freeze_built()  # the node is part of the built state
        assert gc.get_freeze_count() > 0
        del node  # the state is replaced: its cycle is garbage, frozen
        gc.collect()
        assert gone() is not None  # a plain collection does not look at frozen objects
        freeze_built()
        assert gone() is None
    finally:
        gc.unfreeze()
        gc.enable()
