"""Normalise and validate the caller's inputs once, so strategies work on clean, sorted data.

Every strategy must be deterministic regardless of dict order and hash seed, so all
iteration orders are fixed here (members and topics sorted by name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

from .partition_lists import topic_partitions
from .types import (
    MAX_PARTITION,
    Assignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
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
    check_mapping(partitions_per_topic, "partitions_per_topic")
    check_mapping(subscriptions, "subscriptions")
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
    names = list(subscriptions)
    chosen = list(subscriptions.values())
    if not all(issubclass(t, str) for t in set(map(type, names))) or any(
        issubclass(t, str) or not issubclass(t, Iterable) for t in set(map(type, chosen))
    ):
        _reject_subscriptions(subscriptions)
    # Members usually share subscriptions: build each distinct topic set once (a tuple is
    # far cheaper to hash than a frozenset is to build).
    keys = list(map(tuple, chosen))
    distinct = {key: frozenset(key) for key in set(keys)}
    if not all(issubclass(t, str) for t in set(map(type, chain.from_iterable(distinct)))):
        _reject_subscriptions(subscriptions)
    if len(distinct) == 1:  # identical subscriptions: no second hash of every key
        topics_of = dict.fromkeys(names, *distinct.values())
    else:
        topics_of = dict(zip(names, map(distinct.__getitem__, keys), strict=True))
    subscribed = set().union(*set(topics_of.values())) if topics_of else set()
    topics = tuple(sorted(t for t in subscribed if ppt.get(t, 0) > 0))
    return GroupSpec(
        members=tuple(kafka_sorted(topics_of)),
        topics_of=topics_of,
        partitions_per_topic=ppt,
        topics=topics,
    )


def kafka_sorted(names: Iterable[str]) -> list[str]:
    """Names in Java's ``String`` order, by UTF-16 code unit: Kafka's order of member
    ids in ``range`` and ``roundrobin``. It differs from code point order only between a
    character past U+FFFF (a surrogate pair, 0xD800...) and one in U+E000..U+FFFF."""
    out = sorted(names)
    if max("".join(out), default="") > "\uffff":
        out.sort(key=_utf16)
    return out


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def _reject_subscriptions(subscriptions: Subscriptions) -> None:
    """Name the first bad entry of ``subscriptions``."""
    for member, topics in subscriptions.items():
        check_member(member, "subscriptions")
        check_topics(topics, f"subscriptions[{member!r}]")


def check_member(member: object, where: str) -> str:
    """A member id: a str (Kafka's member and instance ids are strings)."""
    if not isinstance(member, str):
        raise TypeError(f"{where}: member id must be a str, got {member!r}")
    return member


def check_topics(topics: object, where: str) -> frozenset[str]:
    """A subscription: a collection of topic names, never one name (a str is a
    collection of its letters, which is how ``"orders"`` once subscribed to ``o``)."""
    if isinstance(topics, (str, bytes)) or not isinstance(topics, Iterable):
        raise TypeError(f"{where}: expected a collection of topic names, got {topics!r}")
    out = frozenset(topics)
    for topic in out:
        if not isinstance(topic, str):
            raise TypeError(f"{where}: topic name must be a str, got {topic!r}")
    return out


def check_mapping(value: object, argument: str) -> None:
    """``argument`` is a mapping (or None): a list where a mapping belongs is named here,
    not by an ``AttributeError`` deep inside a strategy (or, for ``current``, silently
    read as nothing to keep)."""
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(f"{argument}: expected a mapping, got {type(value).__name__}")


def normalize_lag(lag: LagMap | None) -> dict[TopicPartition, int]:
    """Lag per partition; absent partitions count as 0. Bad lag is a caller bug."""
    if not lag:
        return {}
    check_lag(lag)
    return {tp if type(tp) is TopicPartition else TopicPartition(*tp): v for tp, v in lag.items()}


def check_lag(lag: LagMap) -> None:
    """Every key a ``(topic, partition)`` pair with a Kafka partition number, every value a
    non-negative int (exactly int: a bool is not a lag). Checked in C passes; the loop
    runs only to name the first bad entry. Every strategy checks, even those ignoring lag."""
    check_mapping(lag, "lag")
    if lag_columns(lag) is not None:
        return
    for key, value in lag.items():
        tp = as_partition(key)
        if tp is None:
            raise TypeError(f"lag key {key!r}: expected a (topic, partition) pair")
        if not 0 <= tp.partition <= MAX_PARTITION:
            raise ValueError(f"lag key {key!r}: partition must be 0..{MAX_PARTITION}")
        if type(value) is not int:
            raise TypeError(f"lag[{key!r}]: expected an int, got {value!r}")
        if value < 0:
            raise ValueError(f"lag[{key!r}]: lag must be >= 0, got {value}")


def lag_columns(lag: LagMap) -> tuple[list[int], list[Any]] | None:
    """The partition numbers and values of a lag map keyed by ``TopicPartition`` with
    every entry valid, in its order, read in C passes. None otherwise: ``check_lag`` then
    goes entry by entry (plain pairs pass, a bad entry is named). A caller converting the
    map reuses the columns: each pass over a large map costs a cache miss per entry."""
    if not set(map(type, lag)) <= {TopicPartition}:
        return None
    parts = list(map(itemgetter(1), lag))
    values = list(lag.values())
    if partition_numbers(parts) and set(map(type, values)) <= {int} and min(values, default=0) >= 0:
        return parts, values
    return None


def partition_numbers(parts: Sequence[Any]) -> bool:
    """All exactly int (not bool) and valid Kafka partition numbers."""
    return set(map(type, parts)) <= {int} and (
        not parts or (min(parts) >= 0 and max(parts) <= MAX_PARTITION)
    )


def as_partition(raw: object) -> TopicPartition | None:
    """``raw`` as a partition if it is a ``(str, int)`` pair, else ``None``."""
    if isinstance(raw, (tuple, list)) and len(raw) == 2:
        topic, partition = raw
        if isinstance(topic, str) and type(partition) is int:
            return raw if type(raw) is TopicPartition else TopicPartition(topic, partition)
    return None
