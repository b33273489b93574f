"""Pure partition assignment: no I/O, no asyncio, no Kafka client.

from assignors import assign, TopicPartition, STRATEGIES
assign(strategy, partitions_per_topic, subscriptions, *, current=None, lag=None,
       member_racks=None, partition_racks=None, member_capacities=None,
       pins=None, max_partitions=None)
"""

from .capacity import MAX_CAPACITY, check_capacity
from .collector import freeze_built
from .collector import paused as collector_paused
from .constraints import check_constraints
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
from .quality import evaluate, member_lag
from .racks import check_rack, valid_rack
from .registry import STRATEGIES, assign
from .types import MAX_PARTITION, Assignment, TopicPartition

__all__ = [
    "DEFAULT_POLICY",
    "MAX_CAPACITY",
    "MAX_PARTITION",
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
    "check_capacity",
    "check_constraints",
    "check_rack",
    "collector_paused",
    "evaluate",
    "freeze_built",
    "member_lag",
    "valid_rack",
]
