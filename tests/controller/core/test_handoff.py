"""The reconciler's cost while handoffs are in flight: a plan looks at the members whose
situation changed, not at every member still waiting for a revoke."""

from __future__ import annotations

import random
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


def test_the_next_deadline_is_the_earliest_revoke_still_in_flight() -> None:
    """Revokes of one plan share a deadline (one heap entry); acks, timeouts and later
    plans leave ``next_deadline`` the earliest of the revokes still in flight and time
    out exactly the ones past it, in deadline and partition order."""
    rng = random.Random(7)
    members = [f"m{i}" for i in range(6)]
    parts = [tp(i) for i in range(60)]
    granted = {m: parts[i * 10 : i * 10 + 10] for i, m in enumerate(members)}
    r = Reconciler(handoff_timeout=5.0, granted=granted)
    now, acked, timeouts = 0.0, ("", -1), 0
    for _ in range(400):
        now += rng.choice([0.0, 0.5, 1.0, 3.0])
        if rng.random() < 0.4:
            shuffled = rng.sample(parts, len(parts))
            cuts = [0, *sorted(rng.sample(range(1, len(parts)), len(members) - 1)), len(parts)]
            r.update_target({m: shuffled[cuts[i] : cuts[i + 1]] for i, m in enumerate(members)})
        member, generation = acked
        due = sorted(
            (rel.deadline, part, rel)
            for part, rel in r.releasing.items()
            if rel.deadline <= now and not (rel.member == member and rel.generation <= generation)
        )
        plan = r.plan(now)
        assert r.timed_out == [rel for _, _, rel in due]
        timeouts += len(r.timed_out)
        r.timed_out = []
        if plan is not None:
            r.commit(plan)
        pending = [rel.deadline for rel in r.releasing.values()]
        assert r.next_deadline() == (min(pending) if pending else None)
        acked = ("", -1)
        if rng.random() < 0.5:
            member = rng.choice(members)
            acked = (member, r.written.get(member, 0))
            r.ack(*acked)
    assert timeouts > 20  # the walk reaches deadlines, not only acks
