"""Records shared by every strategy: one place for the shapes the public API accepts."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NamedTuple, TypeAlias

#: Kafka partition numbers are int32.
MAX_PARTITION = 2**31 - 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


PartitionsPerTopic: TypeAlias = Mapping[str, int]
Subscriptions: TypeAlias = Mapping[str, Collection[str]]
CurrentAssignment: TypeAlias = Mapping[str, Collection[TopicPartition | tuple[str, int]]]
LagMap: TypeAlias = Mapping[TopicPartition, int]
Assignment: TypeAlias = dict[str, list[TopicPartition]]
