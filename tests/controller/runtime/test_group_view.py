from __future__ import annotations

from controller.core.group import GroupState, GroupTuning
from controller.runtime.group_view import group_summary
from controller.runtime.replica_state import ManagedGroup


def test_a_group_is_not_settled_while_its_publication_awaits_the_broker() -> None:
    """A plan is committed before its records are acknowledged: "settled" waits for
    them, or a reader (an operator, a benchmark) sees a step as done before it is."""
    g = ManagedGroup("g", GroupState("g", GroupTuning(), {"orders": 4}), 1)
    assert group_summary(g)["settled"] is True
    g.publishing = True
    summary = group_summary(g)
    assert (summary["settled"], summary["publishing"]) == (False, True)
