"""A test phase that hangs fails after ``HANG_SECONDS`` with the stack of every thread and
of every asyncio task, so one hang costs one test instead of the whole CI run (a run once
sat in one test until CI's limit, and the thread dump showed only the event loop's
``select``: the task stacks say which ``await`` never returned).

Not a time limit on anything a test measures: it is far above the slowest test."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import os
import signal
import sys
from collections.abc import Generator, Iterator
from types import FrameType

import pytest

HANG_SECONDS = int(os.environ.get("BALLAST_TEST_HANG_SECONDS", "600"))
# A cleanup that hangs after the first alarm (cancelled tasks that never finish) gets this.
CLEANUP_SECONDS = 60


class HungError(Exception):
    """The phase was still running at the alarm."""


def _dump_and_raise(where: str) -> None:
    print(f"\n=== {where}: still running after {HANG_SECONDS} s ===", file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    waits: list[str] = []
    if loop is not None:
        for task in asyncio.all_tasks(loop):
            print(f"--- task {task.get_name()}, awaiting (outermost first):", file=sys.stderr)
            chain = list(_awaits(task.get_coro()))
            for line in chain:
                print(f"  {line}", file=sys.stderr)
            waits.append(f"{task.get_name()}: {' > '.join(_ours(chain))}")
        for gen in _async_generators_in_progress():
            print(f"--- async generator {gen!r}, awaiting:", file=sys.stderr)
            for line in _awaits(gen):
                print(f"  {line}", file=sys.stderr)
    signal.alarm(CLEANUP_SECONDS)
    # CI's report keeps the failure's message but may cut stderr: the awaits go in it.
    raise HungError(
        f"{where} still running after {HANG_SECONDS} s (stacks on stderr); tasks awaiting: "
        + " | ".join(sorted(waits))
    )


def _ours(chain: list[str]) -> list[str]:
    """The frames of this repository's code, and the innermost one whatever its file."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    venv = os.path.join(root, ".venv")
    kept = [
        line.removeprefix(root + os.sep)
        for line in chain
        if line.startswith(root) and not line.startswith(venv)
    ]
    if chain and (not kept or not chain[-1].startswith(root) or chain[-1].startswith(venv)):
        kept.append(chain[-1].removeprefix(root + os.sep))
    return kept


def _awaits(coro: object) -> Iterator[str]:
    """The chain of awaits down from a coroutine or async generator (``Task.print_stack``
    shows only the outermost frame). It stops at an ``async with`` on an
    ``asynccontextmanager`` (its ``asend`` does not say which generator it steps): the
    generators in progress are dumped after the tasks."""
    while coro is not None:
        frame = next(
            (f for a in ("cr_frame", "gi_frame", "ag_frame") if (f := getattr(coro, a, None))),
            None,
        )
        if frame is not None:
            yield f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        coro = next(
            (x for a in ("cr_await", "gi_yieldfrom", "ag_await") if (x := getattr(coro, a, None))),
            None,
        )


def _async_generators_in_progress() -> list[object]:
    return [
        g
        for g in gc.get_objects()
        if type(g).__name__ == "async_generator" and getattr(g, "ag_running", False)
    ]


@contextlib.contextmanager
def _guard(where: str) -> Iterator[None]:
    def on_alarm(signum: int, frame: FrameType | None) -> None:
        _dump_and_raise(where)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _guard(f"{item.nodeid} (setup)"):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _guard(item.nodeid):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    with _guard(f"{item.nodeid} (teardown)"):
        yield
