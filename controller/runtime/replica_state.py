"""What the parts of one replica's daemon share: the groups it leads now, and what it
has heard of every configured group's members, led or not."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from assignors import TopicPartition
from controller.core.autoscale import Recommender, Sizing
from controller.core.group import GroupState
from controller.core.rebalance import Rebalance
from controller.runtime.collector_policy import Waves
from controller.runtime.offsets_reader import OffsetReader
from controller.wire.offsets import PartitionOffsets
from controller.wire.records import Presence

RECENT_REBALANCES = 20


@dataclass
class ManagedGroup:
    """A group this replica leads: its state, its tenure's epoch, and its task's flags."""

    name: str
    state: GroupState
    epoch: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    revoked_at: dict[TopicPartition, float] = field(default_factory=dict)
    publishing: bool = False
    warned_topics: set[str] = field(default_factory=set)
    warned_racks: set[str] = field(default_factory=set)
    #: The latest rebalances (wall-clock time, generation, what it decided), newest last,
    #: for the group view: why partitions moved.
    recent: deque[tuple[float, int, Rebalance]] = field(
        default_factory=lambda: deque(maxlen=RECENT_REBALANCES)
    )
    #: The last lag poll's offsets of every partition (the poll's own dict, kept as it
    #: is), for ``describe --partitions``: committed, log end, raw lag.
    offsets: Mapping[TopicPartition, PartitionOffsets] = field(default_factory=dict)
    #: The member count recommended for it (``groups[].autoscale``), and its recommender.
    sizing: Sizing | None = None
    recommender: Recommender | None = None
    #: Publications since it last settled, for when to freeze (``collector_policy``).
    waves: Waves = field(default_factory=Waves)


@dataclass
class ReplicaState:
    groups: dict[str, ManagedGroup] = field(default_factory=dict)
    #: Offsets and partition counts for each led group.
    readers: dict[str, OffsetReader] = field(default_factory=dict)
    #: Latest presence of every member of every configured group, led or not: a
    #: replica taking a group over starts from what the fleet already announced.
    heard: dict[str, dict[str, Presence]] = field(default_factory=dict)
    #: When this replica saw members of every configured group leave (monotonic): a
    #: takeover counts their grace from there, not from the takeover.
    last_seen: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Partition counts may have changed or be newly needed (a led group, a new topic).
    metadata_wake: asyncio.Event = field(default_factory=asyncio.Event)
