"""The group control logic against a simulated fleet, with a simulated clock.

Simulated consumers apply their latest record after a random delay and then ack it, like
``controller.client.consumer`` does. At every step no partition may be applied by two members
(invariant 1), and after things settle every partition is owned by a live member
(invariant 2).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignors import LagTrigger, TopicPartition
from controller.core.group import GroupState, RejectedError
from controller.core.handoff import Outgoing, Plan, Reconciler
from controller.core.rebalance import GroupTuning, Rebalance
from controller.core.recovery import Recovered
from controller.core.views import group_state
from controller.wire.records import Presence

TUNING = GroupTuning(rebalance_delay=1.0, leave_grace=5.0, handoff_timeout=8.0)
PPT = {"orders": 12, "audit": 4}


class Consumer:
    """One client process; a restart under the same name is a new one (a new instance)."""

    processes = 0

    def __init__(self, name: str, topics: list[str]) -> None:
        self.name = name
        self.topics = topics
        Consumer.processes += 1
        self.instance = f"{name}-{Consumer.processes}"
        self.applied: frozenset[TopicPartition] = frozenset()
        self.generation = -1
        self.inbox: list[tuple[float, int, Outgoing]] = []
        self.alive = True
        #: ``draining`` once it asked to leave through a handoff.
        self.state = "active"
        #: Ids of the keys it verifies with (None: it verifies nothing); it applies only
        #: records signed with one of them.
        self.keys: list[str] | None = None

    def apply(self, generation: int, rec: Outgoing) -> None:
        """As ManagedConsumer: a grant issued to another process holds nothing."""
        if rec.partitions is None or rec.instance not in (None, self.instance):
            self.applied = frozenset()
        else:
            self.applied, self.generation = rec.partitions, generation

    def presence(self, group: str = "g", state: str | None = None) -> Presence:
        return Presence(
            group=group,
            member=self.name,
            topics=self.topics,
            generation=self.generation,
            partitions=sorted(self.applied),
            instance=self.instance,
            state=state or self.state,  # type: ignore[arg-type]
            verify_keys=self.keys,
        )


class Sim:
    def __init__(self, seed: int, tuning: GroupTuning = TUNING) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0
        self.group = GroupState("g", tuning, PPT)
        self.consumers: dict[str, Consumer] = {}
        self.published: list[Plan] = []
        #: Presence messages on their way: (arrival time, consumer).
        self.arrivals: list[tuple[float, Consumer]] = []
        self.rebalances: list[Rebalance] = []

    def deliver(self, plan: Plan) -> None:
        granted = self.group.reconciler.granted
        for rec in plan.records:
            if rec.partitions is None:
                continue
            # Encoding writes ``listed`` as the grant, unsorted.
            if rec.listed is not None:
                assert list(rec.listed) == sorted(rec.partitions), rec.member
            # The plan's edits (taken from the assignor's deltas where it can) are the
            # exact difference between the member's grant and its record.
            have, added, dropped = plan.edits[rec.member]
            old = granted.get(rec.member, frozenset())
            assert have is granted.get(rec.member)
            assert set(added) == rec.partitions - old, rec.member
            assert set(dropped) == old - rec.partitions, rec.member
        for tp, rel in plan.releases.items():  # only what the member holds is revoked
            assert tp in granted.get(rel.member, frozenset()), (tp, rel.member)
        self.group.reconciler.commit(plan)
        self.published.append(plan)
        for rec in plan.records:
            c = self.consumers.get(rec.member)
            if c is not None and c.alive and rec.partitions is not None:
                c.inbox.append((self.now + self.rng.uniform(0.0, 3.0), plan.generation, rec))

    def step(self, dt: float) -> None:
        self.now += dt
        for at, c in [a for a in self.arrivals if a[0] <= self.now]:
            self.arrivals.remove((at, c))
            if c.alive and self.consumers.get(c.name) is c:
                self.group.on_presence(c.presence(), self.now)
        for c in list(self.consumers.values()):
            ready = [m for m in c.inbox if m[0] <= self.now]
            if c.alive and ready and (c.keys is None or self.group.signing_key in c.keys):
                _, gen, rec = max(ready, key=lambda m: m[1])
                c.inbox = [m for m in c.inbox if m[0] > self.now]
                if gen > c.generation:
                    c.apply(gen, rec)
                    self.group.on_presence(c.presence(), self.now)
                    if c.state == "draining" and not c.applied:
                        self.leave(c.name)  # handed everything off: now it goes
        rebalance, plan = self.group.tick(self.now)
        if rebalance is not None:
            self.rebalances.append(rebalance)
        if plan is not None:
            self.deliver(plan)
        self.check_exclusive()

    def recovered(self) -> Recovered:
        """What a successor controller reads back from this group's records."""
        granted = {m: frozenset(v) for m, v in self.group.reconciler.granted.items()}
        return Recovered(
            generation=self.group.reconciler.generation,
            controller_epoch=2,
            granted=granted,
            topics={m: frozenset(self.consumers[m].topics) for m in granted},
            instances={m: self.consumers[m].instance for m in granted},
        )

    def check_exclusive(self) -> None:
        seen: dict[TopicPartition, str] = {}
        for c in self.consumers.values():
            if not c.alive:
                continue
            for tp in c.applied:
                assert tp not in seen, f"{tp} applied by {seen[tp]} and {c.name} at t={self.now}"
                seen[tp] = c.name

    def join(self, name: str, topics: list[str], delay: float = 0.0) -> None:
        """``delay``: how long a new process's presence takes to reach the controller
        (meanwhile the controller may decide about its predecessor)."""
        c = self.consumers.get(name)
        if c is not None:
            c.topics = topics
            self.group.on_presence(c.presence(), self.now)
            return
        # A (re)started client first reads its own latest record from the compacted
        # assignments topic, as controller.client does.
        c = Consumer(name, topics)
        latest = [(p.generation, r) for p in self.published for r in p.records if r.member == name]
        if latest:
            c.apply(*latest[-1])
        self.consumers[name] = c
        if delay:
            self.arrivals.append((self.now + delay, c))
        else:
            self.group.on_presence(c.presence(), self.now)

    def leave(self, name: str) -> None:
        c = self.consumers[name]
        c.applied = frozenset()  # stops consuming, commits, then says so
        self.group.on_presence(c.presence(state="leaving"), self.now)
        del self.consumers[name]

    def depart(self, name: str) -> None:
        """Leave through a handoff: read on, say so, go once a record takes everything
        (at once when it holds nothing)."""
        c = self.consumers[name]
        if not c.applied:
            self.leave(name)
            return
        c.state = "draining"
        self.group.on_presence(c.presence(), self.now)

    def crash(self, name: str) -> None:
        c = self.consumers.pop(name)
        c.alive = False
        self.group.on_gone(name, self.now)

    def settle(self, seconds: float) -> None:
        for _ in range(int(seconds / 0.5)):
            self.step(0.5)

    def owners(self) -> dict[TopicPartition, str]:
        return {tp: c.name for c in self.consumers.values() for tp in c.applied}


def settled(seed: int, *names: str) -> Sim:
    """A group whose members (all on ``orders``) have settled."""
    sim = Sim(seed)
    for n in names:
        sim.join(n, ["orders"])
    sim.settle(6)
    return sim


def all_partitions(topics: set[str]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t in topics for p in range(PPT[t])}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    ops=st.lists(
        st.sampled_from(["join", "join", "leave", "depart", "crash", "drain", "undrain", "wait"]),
        min_size=4,
        max_size=30,
    ),
)
def test_never_two_owners_and_everything_owned_after_settling(seed: int, ops: list[str]) -> None:
    """Drains and handoff leaves included: a drained or departing member still runs and
    reads until it has applied its revoke (its partitions were once given away at once,
    as a dead member's are)."""
    sim = Sim(seed)
    rng = random.Random(seed)
    names = [f"c{i}" for i in range(8)]
    for op in ops:
        present = sorted(sim.consumers)
        if op == "join":
            topics = rng.choice([["orders"], ["orders", "audit"]])
            sim.join(rng.choice(names), topics, delay=rng.uniform(0.0, 2.0))
        elif op == "leave" and present:
            sim.leave(rng.choice(present))
        elif op == "depart" and present:
            sim.depart(rng.choice(present))
        elif op == "crash" and present:
            sim.crash(rng.choice(present))
        elif op == "drain" and present:
            sim.group.drain(rng.choice(present), sim.now)
        elif op == "undrain" and sim.group.drained:
            sim.group.undrain(rng.choice(sorted(sim.group.drained)), sim.now)
        sim.step(rng.uniform(0.1, 2.0))
    # Invariant 2: within rebalance_delay + leave_grace + handoff_timeout (+ apply delay).
    sim.settle(TUNING.rebalance_delay + TUNING.leave_grace + TUNING.handoff_timeout + 4)
    serving = [c for n, c in sim.consumers.items() if n not in sim.group.drained]
    assert all(c.state == "active" for c in serving), "a departing member left"
    subscribed = {t for c in serving for t in c.topics}
    assert set(sim.owners()) == all_partitions(subscribed)
    gens = [p.generation for p in sim.published]
    assert gens == sorted(set(gens)), "generations strictly increase"


def test_clean_leave_hands_over_without_waiting_for_timeout() -> None:
    sim = settled(1, "a", "b", "c")
    assert len(sim.owners()) == 12
    sim.leave("b")
    sim.settle(2 + 3)  # delay + apply: far below handoff_timeout
    assert len(sim.owners()) == 12
    assert set(sim.owners().values()) == {"a", "c"}


def test_a_member_leaving_through_a_handoff_reads_until_its_partitions_move() -> None:
    """A clean leave stops reading first, so its partitions are unread for the rebalance
    delay and the grants; a member that says ``draining`` reads on: each of its
    partitions is revoked like any move, granted elsewhere once it acknowledged, and the
    member, holding nothing, leaves, its record a tombstone."""
    sim = settled(1, "a", "b", "c")
    held = sim.consumers["b"].applied
    assert len(held) == 4
    sim.depart("b")
    assert sim.group.handing_off == {"b"}
    revoked_at = None
    for _ in range(40):
        sim.step(0.25)
        owned = sim.owners()
        if "b" in sim.consumers and sim.consumers["b"].applied == held:
            continue  # still reading all of them: nothing unread yet
        revoked_at = revoked_at or sim.now
        if set(owned) == all_partitions({"orders"}) and "b" not in sim.consumers:
            break
    assert revoked_at is not None
    assert revoked_at >= TUNING.rebalance_delay
    assert set(sim.owners()) == all_partitions({"orders"})
    assert set(sim.owners().values()) == {"a", "c"}
    assert not sim.group.handing_off
    assert "b" not in sim.group.presence
    records = [r for p in sim.published for r in p.records if r.member == "b"]
    assert records[-2].partitions == frozenset()  # the revoke of everything
    assert records[-1].partitions is None  # the tombstone once it left
    assert sim.group.reconciler.granted.keys() == {"a", "c"}


def test_a_member_that_stops_draining_joins_back() -> None:
    sim = settled(4, "a", "b")
    sim.depart("b")
    sim.step(TUNING.rebalance_delay / 2)  # its leave waits for the delay
    b = sim.consumers["b"]
    b.state = "active"
    sim.group.on_presence(b.presence(), sim.now)
    assert not sim.group.handing_off
    sim.settle(TUNING.rebalance_delay + 5)
    assert sorted(len(c.applied) for c in sim.consumers.values()) == [6, 6]


def test_crash_waits_for_leave_grace_then_reassigns() -> None:
    sim = settled(2, "a", "b")
    sim.crash("b")
    sim.settle(TUNING.leave_grace - 1)
    assert len(sim.owners()) == 6  # b's six wait out the grace
    sim.settle(TUNING.rebalance_delay + 4)
    assert len(sim.owners()) == 12


def test_restart_within_grace_moves_nothing() -> None:
    sim = settled(3, "a", "b", "c")
    before = {c.name: c.applied for c in sim.consumers.values()}
    generation = sim.group.reconciler.generation
    sim.crash("b")
    sim.settle(2)
    sim.join("b", ["orders"])  # same id, new process: its last record is its predecessor's
    assert not sim.consumers["b"].applied
    sim.settle(TUNING.leave_grace + 5)
    assert {n: c.applied for n, c in sim.consumers.items()} == before
    # One record: b's grant, unchanged, issued again to the new process.
    after = [
        (p.generation, r) for p in sim.published if p.generation > generation for r in p.records
    ]
    assert [(g, r.member, r.partitions, r.instance) for g, r in after] == [
        (generation + 1, "b", before["b"], sim.consumers["b"].instance)
    ]


def test_a_grant_is_never_consumed_by_a_process_it_was_not_issued_to() -> None:
    """The race issue 13's fault suite found: b crashes; its grace expires just as a new b
    process starts. The new process reads its predecessor's grant before the controller
    hears of it; the controller meanwhile gives b's partitions away. Had the new process
    consumed that grant, two members would hold them."""
    sim = settled(8, "a", "b")
    sim.crash("b")
    sim.settle(TUNING.leave_grace - 0.5)
    sim.join("b", ["orders"], delay=2.0)  # its presence arrives after the grace ended
    assert not sim.consumers["b"].applied
    for _ in range(int((TUNING.rebalance_delay + 8) / 0.1)):
        sim.step(0.1)  # check_exclusive after every step
    assert len(sim.owners()) == 12
    assert sim.consumers["b"].applied


def test_a_long_absence_is_recorded_so_a_takeover_keeps_the_clock() -> None:
    sim = settled(3, "a", "b")
    held = sim.consumers["b"].applied
    generation = sim.group.reconciler.generation
    sim.crash("b")
    crashed_at = sim.now
    sim.settle(TUNING.leave_grace / 2 + 0.5)
    # Half-way through its grace, b's record says since when it has been absent
    # (same partitions): a leader taking over now counts the grace from there.
    after = [r for p in sim.published if p.generation > generation for r in p.records]
    assert [(r.member, r.partitions, r.absent_since) for r in after] == [("b", held, crashed_at)]


def test_unresponsive_owner_is_declared_dead_after_handoff_timeout() -> None:
    sim = Sim(4, GroupTuning(rebalance_delay=0.5, leave_grace=60, handoff_timeout=4))
    sim.join("a", ["orders"])
    sim.settle(4)
    stuck = sim.consumers["a"]
    stuck.alive = False  # hangs: never applies or acks again, presence stays
    sim.join("b", ["orders"])
    sim.settle(2)
    assert not sim.consumers["b"].applied  # a has not released anything yet
    sim.settle(4 + 4)
    assert len(sim.consumers["b"].applied) == 6
    assert sim.group.reconciler.timed_out


def test_members_reading_what_no_record_of_ours_grants_are_corrected_first() -> None:
    """A controller that adopted none of the records its members apply (signing just
    turned on, a key changed): what they read goes to nobody else before they applied a
    record of this controller's, written at once, above the generation they applied.
    Every step checks that no partition is read by two members."""
    sim = Sim(5)
    old = {"a": range(0, 6), "b": range(6, 12)}
    for name, parts in old.items():
        c = sim.consumers[name] = Consumer(name, ["orders"])
        c.applied = frozenset(TopicPartition("orders", p) for p in parts)
        c.generation = 7  # the older controller's numbering
        sim.group.on_presence(c.presence(), sim.now)
    for name in old:  # delivered again (a re-announcement): still nobody else's
        sim.group.on_presence(sim.consumers[name].presence(), sim.now)
    corrections = sim.group.pop_corrections()
    assert len(corrections) == 2
    assert "reads 6 partitions no record of this controller grants" in corrections[0]
    assert set(sim.group.reconciler.releasing) == {TopicPartition("orders", p) for p in range(12)}
    sim.join("c", ["orders"])
    sim.settle(TUNING.rebalance_delay + TUNING.handoff_timeout)
    assert not sim.group.reconciler.timed_out
    held = [len(sim.consumers[n].applied) for n in "abc"]
    assert sorted(held) == [4, 4, 4], held
    assert min(c.generation for c in sim.consumers.values()) > 7


def test_a_forged_grant_a_member_applied_is_written_over_above_its_generation() -> None:
    """Unsigned operation: a member applied a forged record (generation 2000) adding a
    partition; the controller's next record for it is numbered above, so the member
    takes it (one below would be stale to it) and drops the partition."""
    sim = Sim(9)
    sim.join("a", ["orders"])
    sim.settle(4)
    a = sim.consumers["a"]
    stray = TopicPartition("audit", 0)
    a.applied, a.generation = a.applied | {stray}, 2000
    sim.group.on_presence(a.presence(), sim.now)
    assert sim.group.pop_corrections()
    sim.settle(4)
    assert stray not in a.applied
    assert a.generation > 2000
    assert len(a.applied) == 12
    assert not sim.group.pop_corrections()


OLD_KEY, NEW_KEY = "0123456789abcdef", "fedcba9876543210"


def test_a_member_that_cannot_verify_the_key_keeps_what_it_reads_until_given_it() -> None:
    """The key changed and b was given only the old one: it can apply none of the new
    controller's records. It is given nothing, and its partitions, revoked, are never
    timed out to another member while it lives (c waits for them); given the new key it
    applies the revoke and they move. Every step checks that no partition is read twice."""
    sim = Sim(13)
    sim.join("a", ["orders"])
    sim.join("b", ["orders"])
    sim.settle(6)
    a, b = sim.consumers["a"], sim.consumers["b"]
    a.keys, b.keys = [NEW_KEY, OLD_KEY], [OLD_KEY]
    held_by_b = b.applied
    sim.group = GroupState("g", TUNING, PPT, sim.recovered(), sim.now, signing_key=NEW_KEY)
    sim.group.re_sign(["a", "b"])
    for c in (a, b):
        sim.group.on_presence(c.presence(), sim.now)
    assert any(
        "verifies with keys 0123456789abcdef" in line for line in sim.group.pop_corrections()
    )
    sim.join("c", ["orders"])
    sim.consumers["c"].keys = [NEW_KEY]
    sim.settle(4 * TUNING.handoff_timeout)
    assert b.applied == held_by_b  # still reading its own: nothing lost, nothing shared
    assert not sim.group.reconciler.timed_out
    assert sim.group.behind_key() == 1  # b
    b.keys = [NEW_KEY, OLD_KEY]  # restarted with both keys
    sim.group.on_presence(b.presence(), sim.now)
    sim.settle(TUNING.rebalance_delay + TUNING.handoff_timeout)
    assert sorted(len(sim.consumers[n].applied) for n in "abc") == [4, 4, 4]
    assert sim.group.behind_key() == 0
    assert not sim.group.reconciler.timed_out


def test_a_corrected_members_revokes_wait_for_its_record_to_be_written() -> None:
    """The correction's record is written at the group's next rebalance, which may be
    later than ``handoff_timeout`` after the claim was seen: its revokes time out only
    from the record's writing, so the member has its full time to apply it."""
    slow = GroupTuning(rebalance_delay=4.0, leave_grace=5.0, handoff_timeout=2.0)
    sim = Sim(17, slow)
    a = sim.consumers["a"] = Consumer("a", ["orders"])
    a.applied, a.generation = frozenset(TopicPartition("orders", p) for p in range(12)), 3
    sim.group.on_presence(a.presence(), sim.now)
    sim.join("b", ["orders"])
    sim.settle(20)
    assert not sim.group.reconciler.timed_out
    assert sorted(len(c.applied) for c in sim.consumers.values()) == [6, 6]


def test_an_acknowledgement_of_a_generation_never_written_counts_for_nothing() -> None:
    """A forged presence (or one from a forged record) naming a generation ahead of the
    controller's must not free a revoke the member has not applied."""
    r = Reconciler(handoff_timeout=60.0, granted={"a": [TopicPartition("t", 0)]})
    r.update_target({"a": [], "b": [TopicPartition("t", 0)]})
    plan = r.plan(0.0)
    assert plan is not None
    r.commit(plan)
    r.ack("a", 10**6)
    waiting = r.plan(1.0)
    assert waiting is None or "b" not in {x.member for x in waiting.records}
    assert TopicPartition("t", 0) in r.releasing
    r.ack("a", plan.generation)
    after = r.plan(1.0)
    assert after is not None
    assert [x.partitions for x in after.records if x.member == "b"] == [
        frozenset({TopicPartition("t", 0)})
    ]


def test_records_of_a_previous_key_are_written_again_and_counted_until_acknowledged() -> None:
    sim = Sim(11)
    sim.join("a", ["orders"])
    sim.join("b", ["orders"])
    sim.settle(6)
    successor = GroupState("g", TUNING, PPT, sim.recovered(), sim.now)
    sim.group = successor
    successor.re_sign(["a", "b", "nobody"])
    assert successor.behind_key() == 2
    before = {n: c.applied for n, c in sim.consumers.items()}
    for c in sim.consumers.values():
        successor.on_presence(c.presence(), sim.now)
    sim.settle(6)
    assert {n: c.applied for n, c in sim.consumers.items()} == before  # nothing moved
    assert successor.behind_key() == 0
    assert {r.member for p in sim.published[-2:] for r in p.records} >= {"a", "b"}


def test_duplicate_member_id_is_rejected() -> None:
    sim = Sim(6)
    p1 = Presence(group="g", member="a", topics=["orders"], instance="i-1")
    sim.group.on_presence(p1, 0.0)
    with pytest.raises(RejectedError, match="duplicate member id"):
        sim.group.on_presence(p1.model_copy(update={"instance": "i-2"}), 0.1)


def test_presence_for_another_group_is_rejected() -> None:
    sim = Sim(7)
    with pytest.raises(RejectedError, match="arrived on group"):
        sim.group.on_presence(Presence(group="other", member="a", topics=["orders"]), 0.0)


def test_burst_of_joins_coalesces_into_one_rebalance() -> None:
    group = GroupState("g", TUNING, {"orders": 600})
    for i in range(500):
        group.on_presence(Presence(group="g", member=f"m{i:03d}", topics=["orders"]), i * 0.001)
    rebalance, plan = group.tick(0.499 + TUNING.rebalance_delay)
    assert rebalance is not None
    assert rebalance.reasons == ("join",)
    assert plan is not None
    assert len(plan.records) == 500
    assert group.tick(10.0)[0] is None


def test_recovery_moves_nothing() -> None:
    granted = {
        "a": frozenset(TopicPartition("orders", p) for p in range(6)),
        "b": frozenset(TopicPartition("orders", p) for p in range(6, 12)),
    }
    rec = Recovered(
        generation=7,
        controller_epoch=3,
        granted=granted,
        topics={"a": frozenset({"orders"}), "b": frozenset({"orders"})},
    )
    group = GroupState("g", TUNING, {"orders": 12}, rec, now=0.0)
    for m, parts in granted.items():
        group.on_presence(
            Presence(
                group="g", member=m, topics=["orders"], generation=7, partitions=sorted(parts)
            ),
            0.5,
        )
    for t in (1.0, 2.0, 30.0):
        _, plan = group.tick(t)
        assert plan is None
    assert group.engine.assignment() == {m: sorted(v) for m, v in granted.items()}


def test_recovered_member_that_never_returns_is_removed_after_grace() -> None:
    granted = {
        "a": frozenset({TopicPartition("orders", 0)}),
        "b": frozenset({TopicPartition("orders", 1)}),
    }
    rec = Recovered(3, 1, granted, {"a": frozenset({"orders"}), "b": frozenset({"orders"})})
    group = GroupState("g", TUNING, {"orders": 2}, rec, now=0.0)
    group.on_presence(
        Presence(
            group="g", member="a", topics=["orders"], generation=3, partitions=[("orders", 0)]
        ),
        0.1,
    )
    now = TUNING.leave_grace + TUNING.rebalance_delay + 0.1
    _, plan = group.tick(now)
    assert plan is not None
    # b's partition is granted by the publication after its tombstone, never with it:
    # a publication depends only on earlier ones (docs/fencing.md).
    assert [(r.member, r.partitions) for r in plan.records] == [("b", None)]
    group.reconciler.commit(plan)
    _, plan = group.tick(now)
    assert plan is not None
    assert [(r.member, r.partitions) for r in plan.records] == [
        ("a", frozenset({TopicPartition("orders", 0), TopicPartition("orders", 1)})),
    ]


def test_lag_smoothing_damps_a_single_spike() -> None:
    group = GroupState("g", GroupTuning(lag_smoothing=0.3), {"orders": 2})
    tp = TopicPartition("orders", 0)
    group.on_lag({tp: 1000}, 0.0)
    group.tick(0.0)
    group.on_lag({tp: 11000}, 1.0)
    group.tick(1.0)
    assert group.lag[tp] == pytest.approx(0.3 * 11000 + 0.7 * 1000)


def test_a_poll_of_every_partition_is_absorbed_a_batch_a_tick_in_order() -> None:
    """Readings queue and each tick hands the engine at most ``lag_batch`` of them, so a
    poll of 100 000 partitions never stalls one tick; the result is as if applied at once."""
    ppt = {"orders": 10}
    tps = [TopicPartition("orders", p) for p in range(10)]
    group = GroupState("g", GroupTuning(lag_smoothing=0.5, lag_batch=4), ppt)
    group.on_presence(Presence(group="g", member="a", topics=["orders"]), 0.0)
    group.tick(1.0)
    group.on_lag({tp: 100 for tp in tps}, 2.0)
    group.forget_lag([tps[0]], 2.0)
    group.on_lag({tps[1]: 300}, 2.0)  # a later reading of a queued partition
    assert group.next_wakeup() == 2.0  # due at once
    absorbed = []
    for step in range(4):
        group.tick(2.0 + step)
        absorbed.append(len(group.lag))
    assert absorbed == [4, 8, 9, 9]  # 4 a tick; the forget then the later reading land last
    assert group.next_wakeup() is None
    assert tps[0] not in group.lag
    assert group.lag[tps[1]] == 200
    assert {tp: v for tp, v in group.engine.lag().items() if v} == {
        tp: round(v) for tp, v in group.lag.items()
    }


def test_a_lag_step_dates_from_its_own_readings() -> None:
    """A step of lag readings counts (``first_event_at``, the recorded trace) from when its
    oldest reading arrived, not from when the queue first filled: readings that came
    later and waited behind others are not billed for the earlier ones' wait."""
    tps = [TopicPartition("orders", p) for p in range(10)]
    group = GroupState("g", GroupTuning(lag_smoothing=1.0, lag_batch=4), {"orders": 10})
    seen: list[tuple[float, int]] = []
    group.recorder = lambda event, at: seen.append((at, len(getattr(event, "lag", ()))))
    group.on_presence(Presence(group="g", member="a", topics=["orders"]), 0.0)
    group.tick(1.0)
    seen.clear()
    group.on_lag({tp: 100 for tp in tps[:6]}, 2.0)
    group.on_lag({tp: 200 for tp in tps[6:]}, 2.5)
    for now in (3.0, 3.1, 3.2):
        group.tick(now)
    # 4 of the first poll; its last 2 with 2 of the second; the second's last 2.
    assert seen == [(2.0, 4), (2.0, 4), (2.5, 2)]
    assert group.next_wakeup() is None


def test_lag_steps_and_membership_steps_stay_apart() -> None:
    """A lag batch is a step of its own, due at once; it does not apply a join that is
    still coalescing (a burst of joins would be cut in two whenever readings flow), and
    a membership step leaves queued readings to the step after it."""
    tps = [TopicPartition("orders", p) for p in range(12)]
    group = GroupState("g", TUNING, {"orders": 12})
    group.on_presence(Presence(group="g", member="a", topics=["orders"]), 0.0)
    group.tick(TUNING.rebalance_delay)
    group.on_presence(Presence(group="g", member="b", topics=["orders"]), 2.0)
    group.on_lag({tp: 5000 for tp in tps}, 2.2)
    lag_step, _ = group.tick(2.2)
    assert group.engine.topics_of("b") is None  # the join still waits for its delay
    assert lag_step is None  # one member: the readings moved nothing
    assert group.engine.member_lag() == {"a": 60_000}
    group.on_lag({tps[0]: 0}, 2.5)
    join_step, _ = group.tick(2.0 + TUNING.rebalance_delay)
    assert join_step is not None
    assert join_step.reasons == ("join",)
    assert group.lag_queued()  # the reading of 2.5 waits for the next step
    assert group.engine.member_lag() == {"a": 30_000, "b": 30_000}
    group.tick(2.0 + TUNING.rebalance_delay)
    assert not group.lag_queued()
    assert sum(group.engine.member_lag().values()) == 60_000 - round(0.3 * 5000)


def test_queued_readings_stay_bounded_while_paused() -> None:
    """Only the latest reading of a partition matters: a paused group (or one whose ticks
    fall behind) keeps at most about two polls' worth queued, never an unbounded backlog."""
    tps = [TopicPartition("orders", p) for p in range(50)]
    group = GroupState("g", GroupTuning(lag_smoothing=1.0, lag_batch=10), {"orders": 50})
    group.paused = True
    for poll in range(100):
        group.on_lag({tp: poll for tp in tps}, float(poll))
    assert len(group._lag) <= 2 * 50 + 10
    group.paused = False
    while group.next_wakeup() is not None:
        group.tick(200.0)
    assert set(group.lag.values()) == {99.0}


def test_no_observation_or_tick_walks_all_partitions_or_members(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cost follows the change: a presence message, an ack or a tick never copies the
    owner map (all partitions) nor builds the member table (all members)."""
    sim = settled(11, "a", "b", "c")

    class Unwalkable(dict[TopicPartition, str]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise AssertionError("walked every partition")

        def keys(self):  # type: ignore[no-untyped-def]
            raise AssertionError("walked every partition")

        def items(self):  # type: ignore[no-untyped-def]
            raise AssertionError("walked every partition")

        def copy(self):  # type: ignore[no-untyped-def]
            raise AssertionError("copied every partition")

    r = sim.group.reconciler
    r.owner = Unwalkable(r.owner)
    monkeypatch.setattr(
        type(sim.group.engine),
        "members",
        property(lambda _: pytest.fail("built the member table")),
    )
    generation = sim.group.reconciler.generation
    sim.join("d", ["orders"])
    sim.leave("a")
    sim.crash("b")
    sim.settle(TUNING.rebalance_delay + TUNING.leave_grace + TUNING.handoff_timeout + 4)
    assert sim.group.reconciler.generation > generation
    assert sorted(sim.group.reconciler.granted) == ["c", "d"]
    assert set(sim.owners()) == all_partitions({"orders"})


def test_recovered_in_flight_handoff_waits_for_the_old_owner() -> None:
    tp = TopicPartition("orders", 1)
    granted = {"a": frozenset({TopicPartition("orders", 0)}), "c": frozenset()}
    rec = Recovered(
        generation=5,
        controller_epoch=1,
        granted=granted,
        topics={"a": frozenset({"orders"}), "c": frozenset({"orders"})},
        releasing={tp: ("a", 5)},
    )
    group = GroupState("g", TUNING, {"orders": 2}, rec, now=0.0)
    # a still holds orders-1 (it has not applied generation 5): not stray, and not granted.
    group.on_presence(
        Presence(
            group="g",
            member="a",
            topics=["orders"],
            generation=4,
            partitions=[("orders", 0), ("orders", 1)],
        ),
        0.1,
    )
    group.on_presence(Presence(group="g", member="c", topics=["orders"], generation=5), 0.1)
    _, plan = group.tick(0.2)
    assert plan is None
    # a applies generation 5: now c gets it.
    group.on_presence(
        Presence(
            group="g", member="a", topics=["orders"], generation=5, partitions=[("orders", 0)]
        ),
        0.3,
    )
    _, plan = group.tick(0.4)
    assert plan is not None
    assert [(r.member, r.partitions) for r in plan.records] == [("c", frozenset({tp}))]


def test_an_empty_groups_first_rebalance_waits_for_joins_to_stop() -> None:
    """Kafka's group.initial.rebalance.delay: a fleet starting up gets one placement
    (no handoffs), but not later than ``initial_delay`` after the first join; once the
    group has members, a join waits ``rebalance_delay`` as before."""
    tuning = GroupTuning(rebalance_delay=1.0, initial_delay=3.0)
    group = GroupState("g", tuning, PPT)

    def join(name: str, at: float) -> None:
        group.on_presence(Presence(group="g", member=name, topics=["orders"]), at)

    join("a", 0.0)
    assert group.next_wakeup() == 1.0
    join("b", 0.8)
    assert group.next_wakeup() == 1.8  # pushed back: joins are still arriving
    join("c", 1.6)
    join("d", 2.5)
    assert group.next_wakeup() == 3.0  # capped at first join + initial_delay
    rebalance, _ = group.tick(3.0)
    assert rebalance is not None
    assert rebalance.changed_members == 4
    join("e", 10.0)
    join("f", 10.5)
    assert group.next_wakeup() == 11.0  # a group with members: the first event's delay


def test_a_burst_of_joins_to_a_group_with_members_is_one_step() -> None:
    """A scale-out whose joins trickle in is one placement: each join holds the window
    another ``rebalance_delay``, up to ``max_delay`` after its first event. A leave never
    waits on joins (its partitions have no reader): it closes the window ``rebalance_delay``
    after it, whatever joins still hold it."""
    tuning = GroupTuning(rebalance_delay=1.0, initial_delay=3.0, max_delay=4.0)
    group = GroupState("g", tuning, PPT)

    def join(name: str, at: float) -> None:
        group.on_presence(Presence(group="g", member=name, topics=["orders"]), at)

    join("a", 0.0)
    join("b", 0.0)
    group.tick(3.0)
    join("c", 10.0)
    join("d", 10.9)
    assert group.next_wakeup() == 11.9  # held: joins are still arriving
    join("e", 11.8)
    join("f", 13.5)
    assert group.next_wakeup() == 14.0  # capped at the window's first event + max_delay
    rebalance, _ = group.tick(14.0)
    assert rebalance is not None
    assert rebalance.reasons == ("join",)
    assert rebalance.changed_members == 6  # four joiners and the two who gave them shares

    join("g", 20.0)
    join("h", 20.9)
    group.on_presence(Presence(group="g", member="a", topics=["orders"], state="leaving"), 21.0)
    join("i", 21.8)
    assert group.next_wakeup() == 22.0  # the leave's own delay, not the joins' hold


def test_a_rebalance_says_why_it_moved_for_lag() -> None:
    """The operator's "why did it move": reasons, moves, and for lag moves whose lag
    passed the trigger and how far past the bound (``ballast describe``, the demo)."""
    base = {"changed_members": 2, "first_event_at": 0.0, "due_at": 0.0, "assign_seconds": 0.0}
    lag = Rebalance(
        reasons=("lag",),
        moved=2,
        moved_for_lag=2,
        lag_trigger=LagTrigger("m2", 4100, 1000.0),
        **base,  # type: ignore[arg-type]
    )
    assert (
        lag.why()
        == "lag: 2 member(s) changed, moved 2 for lag: m2 was 4.1x the bound (lag 4100, best possible largest 1000)"
    )
    mixed = Rebalance(
        reasons=("join", "lag"),
        moved=5,
        moved_for_lag=2,
        lag_trigger=LagTrigger("m2", 4100, 1000.0),
        **base,  # type: ignore[arg-type]
    )
    assert mixed.why().startswith(
        "join,lag: 2 member(s) changed, moved 5, 2 of them for lag: m2 was 4.1x"
    )
    plain = Rebalance(reasons=("leave",), moved=3, moved_for_lag=0, **base)  # type: ignore[arg-type]
    assert plain.why() == "leave: 2 member(s) changed, moved 3"


def test_every_partition_that_changes_reader_is_counted_with_why_and_whom() -> None:
    """A drain, a crash, a clean leave and an undrain each move partitions: each step
    counts all of them (a departed member's too, which nobody present gave up) under
    its reason and names the member it was about. A drain of 4 partitions was logged
    ``moved 0``, and an undrain as a join."""
    sim = settled(7, "a", "b", "c")

    def last_step(action: str) -> Rebalance:
        sim.rebalances.clear()
        sim.settle(12)
        steps = [r for r in sim.rebalances if action in r.reasons]
        assert len(steps) == 1, sim.rebalances
        return steps[0]

    assert sim.group.drain("c", sim.now)
    drained = last_step("drain")
    assert drained.by_reason() == {"drain": 4}
    assert drained.reassigned() == 4
    assert drained.about == {"drain": ("c",)}
    assert drained.why() == "drain (drain c): 3 member(s) changed, moved 4"

    assert sim.group.undrain("c", sim.now)
    undrained = last_step("undrain")
    assert undrained.reasons == ("undrain",)
    assert undrained.by_reason() == {"undrain": 4}
    assert undrained.about == {"undrain": ("c",)}

    sim.crash("b")
    crashed = last_step("crash")
    assert crashed.by_reason() == {"crash": 4}
    assert crashed.about == {"crash": ("b",)}

    sim.join("d", ["orders"])
    sim.settle(12)
    sim.leave("a")
    left = last_step("leave")
    assert left.by_reason() == {"leave": 4}
    assert left.about == {"leave": ("a",)}
    assert sorted(len(c.applied) for c in sim.consumers.values()) == [6, 6]


def assert_recovery_moves_nothing(group: GroupState, heard: list[Presence], now: float) -> None:
    """Invariant 3: the presence heard at takeover, then time passing, move nothing."""
    for p in heard:
        group.on_presence(p, now)
    for t in (1.0, 2.0, 30.0):
        rebalance, plan = group.tick(now + t)
        assert plan is None
        assert rebalance is None or rebalance.moved == 0


@pytest.mark.parametrize("how", ["crash", "leave", "drain"])
def test_a_topic_whose_every_reader_is_gone_or_drained_is_unread_not_healthy(how: str) -> None:
    """Invariant 7: nothing unread looks settled. Its partitions count as unassigned (the
    group is degraded) until a member that subscribes is back."""
    sim = Sim(19)
    sim.join("a", ["orders"])
    sim.join("b", ["orders"])
    sim.settle(6)
    assert sim.group.unread() == []
    for name in ("a", "b"):
        if how == "drain":
            assert sim.group.draining_leaves_unread(name) == ([] if name == "a" else ["orders"])
            sim.group.drain(name, sim.now)
        else:
            getattr(sim, how)(name)
    sim.settle(TUNING.rebalance_delay + TUNING.leave_grace + TUNING.handoff_timeout + 4)
    assert sim.group.unread_topics() == ["orders"]
    assert len(sim.group.unread()) == 12
    assert group_state(False, len(sim.group.unread()), sim.group.settled()) == "degraded"
    sim.join("c", ["orders"])
    sim.settle(6)
    assert sim.group.unread() == []


def test_a_topic_members_stop_subscribing_to_is_no_longer_the_groups() -> None:
    sim = Sim(23)
    sim.join("a", ["orders", "audit"])
    sim.join("b", ["orders"])
    sim.settle(6)
    sim.join("a", ["orders"])  # a changes its subscription: audit is dropped on purpose
    sim.settle(6)
    assert sim.group.unread_topics() == []
    assert sim.group.unread() == []
