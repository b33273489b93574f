"""Leave graces and record-write times: the earliest in O(log n), what is due in order."""

from __future__ import annotations

from controller.core.deadlines import Deadlines


def test_due_returns_what_is_due_in_key_order_and_forgets_it() -> None:
    d: Deadlines[str] = Deadlines()
    d.set("b", 5.0)
    d.set("a", 5.0)
    d.set("c", 9.0)
    assert d.earliest() == 5.0
    assert d.due(4.9) == []
    assert d.due(5.0) == [("a", 5.0), ("b", 5.0)]
    assert "a" not in d
    assert d.earliest() == 9.0
    assert len(d) == 1


def test_retimed_and_removed_keys_do_not_surface_from_the_heap() -> None:
    d: Deadlines[str] = Deadlines()
    d.set("a", 1.0)
    d.set("a", 7.0)  # re-timed: the 1.0 entry is stale
    d.set("b", 2.0)
    assert d.pop("b") == 2.0
    assert d.earliest() == 7.0
    assert d.due(6.0) == []
    assert d.due(7.0) == [("a", 7.0)]
    assert d.earliest() is None


def test_the_heap_is_compacted_when_mostly_stale() -> None:
    d: Deadlines[str] = Deadlines()
    for t in range(10_000):
        d.set("m", float(t))
    assert len(d._heap) <= 2 * len(d) + 64
    assert d.due(1e9) == [("m", 9999.0)]
