"""Normalise and validate the caller's inputs once, so strategies work on clean, sorted data.

Every strategy must be deterministic regardless of dict order and hash seed, so all
iteration orders are fixed here (members and topics sorted by name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .types import (
    Assignment,
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
    check_lag_values(lag)
    return {tp if type(tp) is TopicPartition else TopicPartition(*tp): v for tp, v in lag.items()}


def check_lag_values(lag: LagMap) -> None:
    """Every value a non-negative int (exactly int: a bool is not a lag). Checked in C;
    the slow loop runs only to name the first bad entry."""
    values = lag.values()
    if set(map(type, values)) <= {int} and min(values, default=0) >= 0:
        return
    for tp, value in lag.items():
        if type(value) is not int:
            raise TypeError(f"lag[{tp!r}]: expected an int, got {value!r}")
        if value < 0:
            raise ValueError(f"lag[{tp!r}]: lag must be >= 0, got {value}")
