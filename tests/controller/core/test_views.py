from __future__ import annotations

from controller.core.group import GroupState
from controller.core.rebalance import GroupTuning
from controller.core.views import group_summary, group_view, member_state
from controller.runtime.replica_state import ManagedGroup
from tests.controller.core.test_group_state import settled


def test_a_group_is_not_settled_while_its_publication_awaits_the_broker() -> None:
    """A plan is committed before its records are acknowledged: "settled" waits for
    them, or a reader (an operator, a benchmark) sees a step as done before it is."""
    g = ManagedGroup("g", GroupState("g", GroupTuning(), {"orders": 4}), 1)
    assert group_summary(g)["settled"] is True
    g.publishing = True
    summary = group_summary(g)
    assert (summary["settled"], summary["publishing"]) == (False, True)


def test_member_states_follow_a_handoff_step_by_step() -> None:
    """Each state means what ``describe`` says at every step: ``applying`` exactly while a
    member has not acknowledged its latest record (a revoke or a grant in flight),
    ``active`` once it has, even when later plans leave its record alone (it was shown
    ``applying`` for as long as the group's generation was ahead of its own),
    ``leave-grace`` after a crash, ``drained`` after a drain."""
    sim = settled(5, "a", "b")
    g = ManagedGroup("g", sim.group, 1)
    assert {m: member_state(g, m) for m in ("a", "b")} == {"a": "active", "b": "active"}
    sim.join("c", ["orders"])
    seen: dict[str, set[str]] = {"a": set(), "b": set(), "c": set()}
    for _ in range(100):
        sim.step(0.1)
        r = sim.group.reconciler
        for m, states in seen.items():
            state = member_state(g, m)
            states.add(state)
            expected = "applying" if r.acked.get(m, -1) < r.written.get(m, -1) else "active"
            assert state == expected, (m, state, r.acked.get(m), r.written.get(m))
    assert seen == {m: {"applying", "active"} for m in seen}  # each had a record in flight
    assert sorted(len(c.applied) for c in sim.consumers.values()) == [4, 4, 4]
    # Another member's handoff moves the group's generation past a and b's records.
    sim.join("d", ["orders"])
    sim.settle(10)
    r = sim.group.reconciler
    behind = [m for m in ("a", "b", "c", "d") if r.written[m] < r.generation]
    assert behind  # some record was left alone by the last plan...
    assert {member_state(g, m) for m in behind} == {"active"}  # ...and its member is active
    sim.crash("b")
    assert member_state(g, "b") == "leave-grace"
    assert sim.group.drain("c", sim.now)
    assert member_state(g, "c") == "drained"


def test_describe_shows_which_members_verify_and_with_which_keys() -> None:
    """The production checklist's check that every member verifies its grants."""
    sim = settled(7, "a", "b")
    sim.consumers["a"].keys = ["0123456789abcdef"]
    sim.group.on_presence(sim.consumers["a"].presence(), sim.now)
    g = ManagedGroup("g", sim.group, 1)
    members = group_view(g)["members"]
    assert isinstance(members, dict)
    assert (members["a"]["verify_keys"], members["b"]["verify_keys"]) == (
        ["0123456789abcdef"],
        None,
    )
    assert member_state(g, "a") == "cannot-verify"  # the group signs with no key
