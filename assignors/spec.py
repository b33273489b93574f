"""Normalise and validate the caller's inputs once, so strategies work on clean, sorted data.

Every strategy must be deterministic regardless of dict order and hash seed, so all
iteration orders are fixed here (members and topics sorted by name).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from .types import (
    Assignment,
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
    topic_partitions,
)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A validated group: sorted members, their topic sets, and the partitions that exist."""

    members: tuple[str, ...]
    topics_of: Mapping[str, frozenset[str]]
    partitions_per_topic: Mapping[str, int]
    #: Subscribed topics that exist, sorted by name.
    topics: tuple[str, ...]

    def partitions(self, topic: str) -> list[TopicPartition]:
        return topic_partitions(topic, self.partitions_per_topic.get(topic, 0))

    def subscribers(self) -> dict[str, list[str]]:
        """Topic -> sorted subscribing members, for existing subscribed topics only."""
        out: dict[str, list[str]] = {t: [] for t in self.topics}
        for m in self.members:
            for t in self.topics_of[m]:
                if t in out:
                    out[t].append(m)
        return out

    def is_uniform(self) -> bool:
        """All members subscribe to the same set of existing topics."""
        existing = set(self.topics)
        first: frozenset[str] | None = None
        for fs in set(self.topics_of.values()):  # frozensets cache their hash
            mine = fs & existing
            if first is None:
                first = mine
            elif mine != first:
                return False
        return True

    def empty_assignment(self) -> Assignment:
        return {m: [] for m in self.members}


def build_spec(partitions_per_topic: PartitionsPerTopic, subscriptions: Subscriptions) -> GroupSpec:
    ppt: dict[str, int] = {}
    for topic, count in partitions_per_topic.items():
        if not isinstance(topic, str):
            raise TypeError(f"partitions_per_topic: topic name must be str, got {topic!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(
                f"partitions_per_topic[{topic!r}]: partition count must be an int >= 0, "
                f"got {count!r}"
            )
        ppt[topic] = count
    topics_of: dict[str, frozenset[str]] = {}
    # Members usually share subscriptions: build each distinct topic set once (a tuple is
    # far cheaper to hash than a frozenset is to build).
    seen: dict[tuple[str, ...], frozenset[str]] = {}
    for member, topics in subscriptions.items():
        if not isinstance(member, str):
            raise TypeError(f"subscriptions: member id must be str, got {member!r}")
        if isinstance(topics, str):
            raise TypeError(
                f"subscriptions[{member!r}]: expected a collection of topic names, got a str"
            )
        key = tuple(topics)
        fs = seen.get(key)
        if fs is None:
            fs = seen[key] = frozenset(key)
        topics_of[member] = fs
    subscribed = set().union(*set(topics_of.values())) if topics_of else set()
    topics = tuple(sorted(t for t in subscribed if ppt.get(t, 0) > 0))
    return GroupSpec(
        members=tuple(sorted(topics_of)),
        topics_of=topics_of,
        partitions_per_topic=ppt,
        topics=topics,
    )


def normalize_lag(lag: LagMap | None) -> dict[TopicPartition, int]:
    """Lag per partition; absent partitions count as 0. Negative lag is a caller bug."""
    if not lag:
        return {}
    out: dict[TopicPartition, int] = {}
    for tp, value in lag.items():
        if type(value) is not int or value < 0:  # exact type: bool is not a lag
            if type(value) is not int:
                raise TypeError(f"lag[{tp!r}]: expected an int, got {value!r}")
            raise ValueError(f"lag[{tp!r}]: lag must be >= 0, got {value}")
        out[tp if type(tp) is TopicPartition else TopicPartition(*tp)] = value
    return out


def valid_claims(
    spec: GroupSpec, current: CurrentAssignment | None
) -> dict[str, list[TopicPartition]]:
    """The part of ``current`` that can be kept, with conflicts resolved.

    Claims by departed members, on vanished partitions or unsubscribed topics are dropped.
    A partition claimed by several members stays with the claimant holding the fewest valid
    claims (ties: smallest member id), which keeps the result closer to balance.
    """
    if not current:
        return {}
    claims: dict[TopicPartition, list[str]] = {}
    for member in sorted(m for m in current if isinstance(m, str)):
        if member not in spec.topics_of:
            continue
        topics = spec.topics_of[member]
        seen: set[TopicPartition] = set()
        for raw in _iter_partitions(current[member]):
            tp = _coerce(raw)
            if tp is None or tp in seen:
                continue
            if tp.topic in topics and 0 <= tp.partition < spec.partitions_per_topic.get(
                tp.topic, 0
            ):
                seen.add(tp)
                claims.setdefault(tp, []).append(member)
    load: dict[str, int] = {}
    for owners in claims.values():
        for m in owners:
            load[m] = load.get(m, 0) + 1
    kept: dict[str, list[TopicPartition]] = {}
    for tp in sorted(claims):
        owners = claims[tp]
        winner = owners[0] if len(owners) == 1 else min(owners, key=lambda m: (load[m], m))
        kept.setdefault(winner, []).append(tp)
    return kept


def _iter_partitions(value: Collection[TopicPartition | tuple[str, int]] | object) -> list[object]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        return []
    return list(value)


def _coerce(raw: object) -> TopicPartition | None:
    if isinstance(raw, TopicPartition):
        return raw
    if isinstance(raw, (tuple, list)) and len(raw) == 2:
        topic, partition = raw
        if (
            isinstance(topic, str)
            and isinstance(partition, int)
            and not isinstance(partition, bool)
        ):
            return TopicPartition(topic, partition)
    return None
