"""``Holding``: what a grant changes, and which commits a revoke needs first."""

from __future__ import annotations

from controller.client.grants import Grant
from controller.client.holding import Holding


def _grant(*partitions: int, generation: int | None = 1) -> Grant:
    return Grant(frozenset(("t", p) for p in partitions), generation)


def test_a_grant_revokes_what_it_leaves_out_and_adds_what_is_new() -> None:
    h = Holding()
    first = h.change(_grant(0, 1, 2))
    assert first.added == {("t", 0), ("t", 1), ("t", 2)}
    assert first.revoked == frozenset()
    h.applied(first)
    second = h.change(_grant(1, 2, 3, generation=2))
    assert second.revoked == {("t", 0)}
    assert second.added == {("t", 3)}
    h.applied(second)
    assert h.assignment == {("t", 1), ("t", 2), ("t", 3)}
    assert h.generation == 2
    # A grant with nothing new to acknowledge (a predecessor's) keeps the generation.
    h.applied(h.change(_grant(generation=None)))
    assert h.assignment == frozenset()
    assert h.generation == 2


def test_a_revoke_commits_what_was_handed_out_of_the_revoked_partitions_only() -> None:
    h = Holding()
    h.applied(h.change(_grant(0, 1)))
    h.handed_out(("t", 0), 41)
    h.handed_out(("t", 1), 9)
    change = h.change(_grant(1, generation=2))
    assert h.release(change.revoked) == {("t", 0): 42}
    assert h.release(change.revoked) == {}  # committed once
    h.applied(change)
    assert h.resume_at(h.change(_grant(1, 2, generation=3))) == {("t", 1): 10}
    assert h.committable() == {("t", 1): 10}


def test_letting_go_holds_nothing_and_returns_what_to_commit() -> None:
    h = Holding()
    h.applied(h.change(_grant(0, 1)))
    h.handed_out(("t", 1), 5)
    assert h.let_go() == {("t", 1): 6}
    assert h.assignment == frozenset()
    assert h.committable() == {}
