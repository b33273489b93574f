"""Lag moves that do not help are not repeated every poll: after a lag step the group
waits ``lag_cooldown``, doubled while the same member stays the most lagged at no lower
lag. A slow member once drew a lag rebalance per poll (8 in 40 s) while lag rose."""

from __future__ import annotations

from assignors import TopicPartition
from controller.core.group import GroupState
from controller.core.lag_cooldown import LagCooldown
from controller.core.rebalance import GroupTuning
from controller.wire.records import Presence

TPS = [TopicPartition("orders", p) for p in range(8)]


def test_the_wait_doubles_while_moves_do_not_help_the_same_member() -> None:
    c = LagCooldown(cooldown=30.0, backoff_max=100.0)
    assert c.allows(0.0)
    assert c.moved(0.0, "slow", 5000) == 30.0
    assert not c.allows(29.9)
    assert c.allows(30.0)
    assert c.moved(30.0, "slow", 6000) == 60.0  # moved for it, and it lags more
    assert c.moved(90.0, "slow", 6000) == 100.0  # no lower: capped
    assert c.until() == 190.0
    assert c.moved(190.0, "slow", 4000) == 30.0  # its lag fell: the moves helped
    assert c.moved(220.0, "other", 9000) == 30.0  # another member: a fresh start


def _skew(group: GroupState, now: float, slow: str, lag: int) -> None:
    """Every partition of ``slow`` at ``lag``, the others at 0."""
    mine = set(group.engine.partitions_of(slow))
    group.on_lag({tp: (lag if tp in mine else 0) for tp in TPS}, now)


def _lag_moves(group: GroupState, now: float) -> int:
    rebalance, _ = group.tick(now)
    return 0 if rebalance is None else rebalance.moved_for_lag


def test_a_group_moves_for_lag_once_per_cooldown_then_backs_off() -> None:
    tuning = GroupTuning(lag_smoothing=1.0, rebalance_delay=0.0, lag_cooldown=30.0)
    group = GroupState("g", tuning, {"orders": 8})
    for m in ("a", "b"):
        group.on_presence(Presence(group="g", member=m, topics=["orders"]), 0.0)
    group.tick(0.0)
    _skew(group, 1.0, "a", 10_000)
    assert _lag_moves(group, 1.0) > 0
    assert group.cooldown.until() == 31.0
    first = group.cooldown.last
    assert first is not None
    for now in (5.0, 20.0, 30.9):  # a is still the most lagged: no move meanwhile
        top = max(group.engine.member_lag().items(), key=lambda kv: kv[1])[0]
        _skew(group, now, top, 10_000)
        assert _lag_moves(group, now) == 0
    top = max(group.engine.member_lag().items(), key=lambda kv: kv[1])[0]
    _skew(group, 31.0, top, 20_000)
    assert _lag_moves(group, 31.0) > 0
    again = group.cooldown.last
    assert again is not None
    same = again.member == first.member  # the same member, at a higher lag: doubled
    assert group.cooldown.until() == (91.0 if same else 61.0)


def test_no_cooldown_moves_at_every_reading() -> None:
    group = GroupState("g", GroupTuning(lag_smoothing=1.0, rebalance_delay=0.0), {"orders": 8})
    for m in ("a", "b"):
        group.on_presence(Presence(group="g", member=m, topics=["orders"]), 0.0)
    group.tick(0.0)
    moves = []
    for now in (1.0, 2.0, 3.0):
        top = max(group.engine.member_lag().items(), key=lambda kv: kv[1])[0]
        _skew(group, now, top, 10_000)
        moves.append(_lag_moves(group, now))
    assert all(moves), moves
