"""The read-only views of a led group: what the HTTP API serves (and ``ballast status``
and ``ballast describe`` show), and the gauges read at scrape time. Pure: computed from
the group's state and what the runtime adds to it (``LedGroup``)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from assignors import TopicPartition
from controller.core.autoscale import Sizing, remove_first
from controller.core.group import GroupState
from controller.core.rebalance import Rebalance
from controller.wire.offsets import PartitionOffsets


class LedGroup(Protocol):
    """A group as the runtime leads it: its state, its tenure's epoch, whether a
    publication is in flight, its latest rebalances (wall-clock time, generation, what
    it decided), and the last lag poll's offsets."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> GroupState: ...
    @property
    def epoch(self) -> int: ...
    @property
    def publishing(self) -> bool: ...
    @property
    def recent(self) -> Sequence[tuple[float, int, Rebalance]]: ...
    @property
    def offsets(self) -> Mapping[TopicPartition, PartitionOffsets]: ...
    @property
    def sizing(self) -> Sizing | None: ...


class GroupReading(NamedTuple):
    """A led group's gauges, computed when scraped (bounded: one pass over its members)."""

    group: str
    members: int
    assigned: int
    revoking: int
    unassigned: int
    imbalance: int
    lag_total: int
    lag_max_member: int
    lag_skew: float
    #: Partitions the target assignment puts on a member whose rack holds none of their
    #: replicas (0 without racks).
    cross_rack: int
    #: Operator constraints the target assignment breaks: must stay 0.
    violations: int
    #: (member, lag, partitions) for the capped per-member series; empty when off.
    per_member: list[tuple[str, int, int]]
    #: Members not yet on the current signing key (``GroupState.behind_key``).
    signing_behind: int = 0
    #: The recommended member count (None: ``autoscale`` off, or nothing polled yet).
    desired_members: int | None = None


def group_summary(g: LedGroup) -> dict[str, object]:
    """One row of ``GET /v1/groups``: O(members), never O(partitions)."""
    state = g.state
    member_lag = state.engine.member_lag()
    unassigned = len(state.unread())
    # Settled includes the publication: the plan is committed before its records are
    # acknowledged, and "settled" promises they are.
    settled = state.settled() and not g.publishing
    return {
        "state": group_state(state.paused, unassigned, settled),
        "generation": state.reconciler.generation,
        "controller_epoch": g.epoch,
        "members": state.engine.member_count(),
        "partitions": len(state.reconciler.owner),
        "revoking": state.reconciler.revoking(),
        "settled": settled,
        "publishing": g.publishing,
        "paused": state.paused,
        "drained": len(state.drained),
        "total_lag": sum(member_lag.values()),
        "max_member_lag": max(member_lag.values(), default=0),
        "lag_skew": state.engine.lag_skew(),
        "constraints": {
            "pins": len(state.constraints.pins),
            "max_partitions": len(state.constraints.max_partitions),
            "racks": len(state.constraints.racks),
        },
        "unassigned": unassigned,
        # Members whose record an older signing key (or none) signed, not yet
        # acknowledged again under the current key.
        "signing_behind": state.behind_key(),
        # Seconds until partitions may move for lag again (``rebalance.lag_cooldown``).
        "lag_cooldown_s": round(max(0.0, (state.cooldown.until() or 0.0) - time.monotonic()), 1),
    }


def group_state(paused: bool, unassigned: int, settled: bool) -> str:
    """``paused``; ``degraded`` while partitions have no reader (caps, drains, members
    that subscribe to too little, or a topic whose every reader is drained or gone leave
    them so): never ``settled`` then; ``rebalancing`` while a plan is in flight; else
    ``settled``."""
    if paused:
        return "paused"
    if unassigned:
        return "degraded"
    return "settled" if settled else "rebalancing"


def constraints_view(g: LedGroup) -> dict[str, object]:
    """``GET /v1/groups/<group>/constraints``: the config's, the admin API's, what is in
    force (the latter laid over the former), what the caps leave unassigned, and what is
    broken (always nothing)."""
    state = g.state
    return {
        "group": g.name,
        "configured": state.configured.model_dump(),
        "overrides": state.overrides.model_dump(),
        "effective": state.constraints.model_dump(),
        "unassigned": [[tp.topic, tp.partition] for tp in state.engine.unassigned()],
        "violations": state.violations(),
    }


def member_state(g: LedGroup, member: str) -> str:
    """``cannot-verify`` (it verifies with keys none of which signs our records: given
    nothing, keeps what it reads), ``drained``, ``handing-off`` (leaving once its
    partitions are read elsewhere),
    ``leave-grace``, ``gone`` (no presence, not yet departed), ``applying``
    (has not acknowledged its latest record: a grant or revoke in flight) or ``active``.
    Not "behind the group's generation": a plan writes only the records that change."""
    state = g.state
    if member in state.cannot_verify:
        return "cannot-verify"
    if member in state.drained:
        return "drained"
    if member in state.handing_off:
        return "handing-off"
    if member in state.absences:
        return "leave-grace"
    if member not in state.presence:
        return "gone"
    reconciler = state.reconciler
    if reconciler.acked.get(member, -1) < reconciler.written.get(member, -1):
        return "applying"
    return "active"


def _offsets(o: PartitionOffsets | None, reset: str) -> dict[str, int | None]:
    """The last poll's reading of a partition (nulls without one: ``lag.source: topic``
    without samples)."""
    if o is None:
        return {"committed": None, "log_end": None, "raw_lag": None}
    return {"committed": o.committed, "log_end": o.log_end, "raw_lag": o.lag(reset)}


def group_view(g: LedGroup, partitions: bool = False, reset: str = "latest") -> dict[str, object]:
    """``GET /v1/groups/<group>``: members, grants, targets, handoffs and quality; with
    ``partitions`` (``?partitions=true``) also each partition: its owner (None when it
    has no reader), the owner's client process and rack, the last poll's committed and
    log-end offsets and raw lag, and the smoothed lag the policy uses, as
    ``kafka-consumer-groups --describe`` lists them. ``reset``: ``lag.auto_offset_reset``."""
    engine = g.state.engine
    member_lag = engine.member_lag()
    granted = g.state.reconciler.granted
    now = time.monotonic()
    in_engine = engine.members
    subscribed = dict(in_engine)
    # A drained or handing-off member is out of the engine but present: it is listed,
    # with no target.
    for member in g.state.drained | g.state.handing_off | g.state.cannot_verify:
        p = g.state.presence.get(member)
        if p is not None and member not in subscribed:
            subscribed[member] = frozenset(p.topics)
    pinned = Counter(g.state.constraints.pinned().values())
    members = {}
    for member, topics in sorted(subscribed.items()):
        p = g.state.presence.get(member)
        heard = g.state.heard.get(member)
        members[member] = {
            "topics": sorted(topics),
            "state": member_state(g, member),
            "live": p is not None,
            "in_leave_grace": member in g.state.absences,
            "applied_generation": g.state.reconciler.acked.get(member, -1),
            "last_heard_seconds_ago": None if heard is None else round(now - heard, 3),
            "granted": [[tp.topic, tp.partition] for tp in sorted(granted.get(member, ()))],
            "target": [[tp.topic, tp.partition] for tp in engine.partitions_of(member)]
            if engine.topics_of(member) is not None
            else [],
            "lag": member_lag.get(member, 0),
            "rack": engine.rack_of(member) or g.state.rack_for(member, p.rack if p else None),
            "rack_pinned": member in g.state.constraints.racks,
            "max_partitions": g.state.constraints.max_partitions.get(member),
            "pinned": pinned.get(member, 0),
            "capacity": engine.capacity_of(member) or (p.capacity if p and p.capacity else 1.0),
            # The ids of the keys it verifies its grants with (null: it verifies nothing).
            "verify_keys": None if p is None or p.verify_keys is None else list(p.verify_keys),
        }
    counts = [len(v) for v in granted.values()]
    unassigned = g.state.unread()
    rows = {}
    if partitions:
        lag, owners, offsets = g.state.lag, g.state.reconciler.owner, g.offsets
        tags = g.state.reconciler.tags
        rows["partitions"] = [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "member": owner,
                "lag": round(lag.get(tp, 0)),
                **_offsets(offsets.get(tp), reset),
                "instance": None if owner is None or owner not in tags else tags[owner].instance,
                "rack": None if owner is None else engine.rack_of(owner),
            }
            for tp, owner in sorted(
                [*owners.items(), *((tp, None) for tp in unassigned if tp not in owners)]
            )
        ]
    return rows | {
        "group": g.name,
        "state": group_state(
            g.state.paused, len(unassigned), g.state.settled() and not g.publishing
        ),
        "generation": g.state.reconciler.generation,
        "controller_epoch": g.epoch,
        "paused": g.state.paused,
        "drained": sorted(g.state.drained),
        "signing_behind": g.state.behind_key(),
        "constraints": g.state.constraints.model_dump(),
        "unassigned": [[tp.topic, tp.partition] for tp in unassigned],
        "unread_topics": g.state.unread_topics(),
        "members": members,
        "recent_rebalances": [
            {
                "at": round(at, 3),
                "generation": generation,
                "reasons": list(r.reasons),
                "moved": r.moved,
                "moved_for_lag": r.moved_for_lag,
                "moved_for_rack": r.moved_for_rack,
                "lag_trigger": r.lag_trigger._asdict() if r.lag_trigger else None,
                "why": r.why(),
            }
            for at, generation, r in g.recent
        ],
        "revoking": [
            {
                "partition": [tp.topic, tp.partition],
                "from": r.member,
                "generation": r.generation,
            }
            for tp, r in sorted(g.state.reconciler.releasing.items())
        ],
        "autoscale": None
        if g.sizing is None
        else g.sizing._asdict()
        | {
            "remove_first": remove_first(
                g.sizing.desired,
                {m: member_lag.get(m, 0) for m in in_engine},
                {m: engine.capacity_of(m) or 1.0 for m in in_engine},
            )
        },
        "quality": {
            "count_spread": max(counts) - min(counts) if counts else 0,
            "total_lag": sum(member_lag.values()),
            "max_member_lag": max(member_lag.values(), default=0),
            "lag_skew": engine.lag_skew(),
            "cross_rack": engine.cross_rack(),
            # The best largest member lag any assignment could reach: what the lag
            # policy's trigger_ratio and target_ratio multiply.
            "lag_bound": max(
                -(-sum(member_lag.values()) // max(len(member_lag), 1)),
                max(engine.lag().values(), default=0),
            ),
        },
    }


def reading(g: LedGroup, per_member_cap: int | None) -> GroupReading:
    """The group's gauges (``GroupGauges``): one pass over its members, at scrape time.
    ``per_member_cap``: how many members get their own series (None: none)."""
    state = g.state
    engine = state.engine
    sizes = {name: len(v) for name, v in state.reconciler.granted.items()}
    read = state.subscribed_topics().union(state.unread_topics())
    total = sum(engine.partitions_per_topic.get(t, 0) for t in read)
    granted = sum(sizes.values())
    revoking = state.reconciler.revoking()
    member_lag = engine.member_lag()
    per_member = []
    if per_member_cap is not None:
        per_member = [
            (name, member_lag[name], sizes.get(name, 0))
            for name in sorted(member_lag)[:per_member_cap]
        ]
    return GroupReading(
        group=g.name,
        members=len(state.presence),
        assigned=granted,
        revoking=revoking,
        unassigned=max(0, total - granted - revoking),
        imbalance=max(sizes.values()) - min(sizes.values()) if sizes else 0,
        lag_total=sum(member_lag.values()),
        lag_max_member=max(member_lag.values(), default=0),
        lag_skew=engine.lag_skew(),
        cross_rack=engine.cross_rack(),
        violations=len(state.violations()),
        signing_behind=state.behind_key(),
        per_member=per_member,
        desired_members=None if g.sizing is None else g.sizing.desired,
    )
