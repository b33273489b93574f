"""What an operator's constraint change would name that does not exist, and what it
would leave unread. Both are answered before the change is stored: a typo
(``--pin orders:99=w1`` on a 12-partition topic, a member that never joined) is refused
instead of sitting in the constraints topic doing nothing, and a cap that strands
partitions is said at once instead of showing up later as a degraded group."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from assignors import IncrementalAssignor, TopicPartition
from controller.wire.records import ConstraintPatch, ConstraintSet

UNKNOWN_MEMBER_HINT = "(--allow-unknown-members to name a member before it joins)"


def unknown_names(
    patch: ConstraintPatch,
    partitions_per_topic: Mapping[str, int],
    knows: Callable[[str], bool],
    overrides: ConstraintSet,
    allow_unknown_members: bool = False,
) -> list[str]:
    """One problem per entry of ``patch`` that names a topic the group does not read, a
    partition past its topic's count, a member not in the group (unless allowed), or an
    admin entry that is not there to remove. Empty when everything named exists."""
    problems: list[str] = []

    def member(where: str, name: str) -> None:
        if not allow_unknown_members and not knows(name):
            problems.append(f"{where}: no member {name!r} in the group {UNKNOWN_MEMBER_HINT}")

    for pin in patch.pins:
        where = f"pin {pin.topic}:{pin.partition}={pin.member}"
        count = partitions_per_topic.get(pin.topic)
        if count is None:
            problems.append(f"{where}: the group reads no topic {pin.topic!r}")
        elif pin.partition >= count:
            problems.append(f"{where}: {pin.topic} has {count} partition(s), 0 to {count - 1}")
        member(where, pin.member)
    pinned = {(p.topic, p.partition) for p in overrides.pins}
    for topic, partition in patch.unpin:
        if (topic, partition) not in pinned:
            problems.append(f"unpin {topic}:{partition}: no pin of the admin API to remove")
    per_member: tuple[tuple[str, str, Mapping[str, object], Mapping[str, object]], ...] = (
        ("max_partitions", "cap", patch.max_partitions, overrides.max_partitions),
        ("racks", "rack", patch.racks, overrides.racks),
    )
    for key, noun, changes, existing in per_member:
        for name, value in changes.items():
            if value is not None:
                member(f"{key} {name}={value}", name)
            elif name not in existing:
                problems.append(f"{key} {name}: no {noun} of the admin API to remove")
    return problems


def left_unread(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, frozenset[str]],
    constraints: ConstraintSet,
) -> int:
    """How many subscribed partitions no member may read under ``constraints`` (every
    subscriber at its cap), as the assignor decides it. O(partitions): run off the loop."""
    members = set(subscriptions)
    subscribed = {t for topics in subscriptions.values() for t in topics}
    ppt = {t: n for t, n in partitions_per_topic.items() if t in subscribed}
    pins: dict[TopicPartition, str] = {
        tp: m
        for tp, m in constraints.pinned().items()
        if m in members and tp.topic in subscriptions[m] and tp.partition < ppt.get(tp.topic, 0)
    }
    caps = {m: c for m, c in constraints.max_partitions.items() if m in members}
    if not members or not caps:
        return 0
    engine, _ = IncrementalAssignor.from_snapshot(
        ppt,
        {m: sorted(t) for m, t in subscriptions.items()},
        lag_aware=False,
        pins=pins,
        max_partitions=caps,
    )
    return len(engine.unassigned())
