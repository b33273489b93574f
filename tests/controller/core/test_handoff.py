"""The reconciler's cost while handoffs are in flight: a plan looks at the members whose
situation changed, not at every member still waiting for a revoke."""

from __future__ import annotations

from typing import Any

from assignors import TopicPartition
from controller.core.handoff import Reconciler

N = 100


class CountingDict(dict[str, Any]):
    """A target map that counts how many members a plan looked up."""

    lookups = 0

    def get(self, key: str, default: Any = None) -> Any:
        CountingDict.lookups += 1
        return super().get(key, default)


def tp(i: int) -> TopicPartition:
    return TopicPartition("t", i)


def test_members_waiting_for_revokes_are_planned_when_freed_not_every_plan() -> None:
    """N receivers each wait for one donor's revoke. Each donor's ack frees one partition
    and its plan grants it: that plan plans the one receiver it woke, not the N - k
    still waiting (before, every plan went over all of them: O(waiting) a tick)."""
    donors = {f"d{i:03d}": [tp(2 * i), tp(2 * i + 1)] for i in range(N)}
    receivers = {f"r{i:03d}": [tp(2 * N + i)] for i in range(N)}
    r = Reconciler(handoff_timeout=60.0, granted={**donors, **receivers})
    r.update_target(
        {
            **{d: [parts[0]] for d, parts in donors.items()},
            **{f"r{i:03d}": sorted([tp(2 * N + i), tp(2 * i + 1)]) for i in range(N)},
        }
    )
    revoke = r.plan(1.0)
    assert revoke is not None
    assert {rec.member for rec in revoke.records} == set(donors)  # revokes only
    assert sorted(revoke.releases) == [tp(2 * i + 1) for i in range(N)]
    r.commit(revoke)
    r.target = CountingDict(r.target)
    for i, donor in enumerate(sorted(donors)):
        CountingDict.lookups = 0
        r.ack(donor, revoke.generation)
        grant = r.plan(2.0 + i / N)
        assert grant is not None
        assert [rec.member for rec in grant.records] == [f"r{i:03d}"]
        assert grant.records[0].partitions == frozenset({tp(2 * N + i), tp(2 * i + 1)})
        assert CountingDict.lookups == 1, (i, CountingDict.lookups)
        r.commit(grant)
    assert r.settled()
    assert r.plan(200.0) is None


def test_a_waiting_member_is_still_granted_when_its_revoke_times_out() -> None:
    """Parked waiters rely on being woken: a handoff that ends by timeout (the donor
    never acks) wakes its receiver too."""
    r = Reconciler(handoff_timeout=5.0, granted={"a": [tp(0), tp(1)], "b": [tp(2)]})
    r.update_target({"a": [tp(0)], "b": [tp(1), tp(2)]})
    revoke = r.plan(0.0)
    assert revoke is not None
    r.commit(revoke)
    assert r.plan(1.0) is None  # b waits; nothing to publish
    assert not r.settled()
    assert r.next_deadline() == 5.0
    grant = r.plan(5.0)
    assert grant is not None
    assert [(rec.member, rec.partitions) for rec in grant.records] == [
        ("b", frozenset({tp(1), tp(2)}))
    ]
    assert [rel.member for rel in r.timed_out] == ["a"]
