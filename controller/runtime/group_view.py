"""The read-only view of a led group the HTTP API serves."""

from __future__ import annotations

from controller.runtime.replica_state import ManagedGroup


def group_view(g: ManagedGroup) -> dict[str, object]:
    """``GET /groups/<group>``: members, grants, targets, handoffs and quality."""
    engine = g.state.engine
    member_lag = engine.member_lag()
    granted = g.state.reconciler.granted
    members = {}
    for member, topics in engine.members.items():
        p = g.state.presence.get(member)
        members[member] = {
            "topics": sorted(topics),
            "live": p is not None,
            "in_leave_grace": member in g.state.grace,
            "applied_generation": g.state.reconciler.acked.get(member, -1),
            "granted": [[tp.topic, tp.partition] for tp in sorted(granted.get(member, ()))],
            "target": [[tp.topic, tp.partition] for tp in engine.partitions_of(member)],
            "lag": member_lag.get(member, 0),
            "rack": p.rack if p else None,
        }
    counts = [len(v) for v in granted.values()]
    return {
        "group": g.name,
        "generation": g.state.reconciler.generation,
        "controller_epoch": g.epoch,
        "members": members,
        "revoking": [
            {
                "partition": [tp.topic, tp.partition],
                "from": r.member,
                "generation": r.generation,
            }
            for tp, r in sorted(g.state.reconciler.releasing.items())
        ],
        "quality": {
            "count_spread": max(counts) - min(counts) if counts else 0,
            "total_lag": sum(member_lag.values()),
            "max_member_lag": max(member_lag.values(), default=0),
            "lag_skew": engine.lag_skew(),
        },
    }
