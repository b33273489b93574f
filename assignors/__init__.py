"""Pure partition assignment: no I/O, no asyncio, no Kafka client.

from assignors import assign, TopicPartition, STRATEGIES
assign(strategy, partitions_per_topic, subscriptions, *, current=None, lag=None,
       member_racks=None, partition_racks=None, member_capacities=None,
       pins=None, max_partitions=None)
"""

from .collector import freeze_built
from .collector import paused as collector_paused
from .engine import IncrementalAssignor, UnassignedPartitionsWarning
from .events import (
    Change,
    ConstraintsChanged,
    Delta,
    Event,
    LagTrigger,
    LagUpdated,
    MemberJoined,
    MemberLeft,
    PartitionRacksChanged,
    PartitionsChanged,
    SubscriptionChanged,
)
from .policy import DEFAULT_POLICY, LagPolicy
from .registry import STRATEGIES, assign
from .types import Assignment, TopicPartition

__all__ = [
    "DEFAULT_POLICY",
    "STRATEGIES",
    "Assignment",
    "Change",
    "ConstraintsChanged",
    "Delta",
    "Event",
    "IncrementalAssignor",
    "LagPolicy",
    "LagTrigger",
    "LagUpdated",
    "MemberJoined",
    "MemberLeft",
    "PartitionRacksChanged",
    "PartitionsChanged",
    "SubscriptionChanged",
    "TopicPartition",
    "UnassignedPartitionsWarning",
    "assign",
    "collector_paused",
    "freeze_built",
]
