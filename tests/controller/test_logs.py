"""Library log floods: one line per message and window, the next one counting what was
held back; the throttle's memory stays bounded whatever the keys."""

from __future__ import annotations

import logging

from controller.logs import LibraryFlood, Throttle


def _record(template: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, template, args, None)


def test_a_library_flood_is_one_line_per_message_and_window() -> None:
    now = [0.0]
    flood = LibraryFlood(Throttle(burst=1, window=10.0, clock=lambda: now[0]))
    passed = [flood.filter(_record("Unable connect to node %s", n % 3)) for n in range(100)]
    assert passed.count(True) == 1  # the template is the cause, whatever its arguments
    assert flood.filter(_record("Unable to update metadata from %s", [1]))  # another cause
    now[0] = 10.0
    later = _record("Unable connect to node %s", 1)
    assert flood.filter(later)
    assert later.__dict__["suppressed"] == 99


def test_the_throttle_forgets_rather_than_grows() -> None:
    throttle = Throttle(burst=1, window=60.0, clock=lambda: 0.0, max_keys=100)
    for n in range(10_000):
        assert throttle.allow(f"key-{n}") == 0
    assert len(throttle) <= 100
