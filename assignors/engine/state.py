"""What an engine holds, in one place: every attribute, with what it means."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from sortedcontainers import SortedList

from ..events import LagTrigger
from ..ids import TopicIds
from ..lag_table import LagTable
from ..pid_array import PidArray
from ..policy import DEFAULT_POLICY, LagPolicy
from ..rack_index import RackIndex
from ..spec import build_spec
from ..types import PartitionsPerTopic
from .member import Key, Member


class EngineState:
    """The engine's state and the bookkeeping of one step."""

    def __init__(
        self,
        partitions_per_topic: PartitionsPerTopic | None = None,
        *,
        lag_aware: bool = True,
        policy: LagPolicy = DEFAULT_POLICY,
    ) -> None:
        self.lag_aware = lag_aware
        self.policy = policy
        self._ppt: dict[str, int] = dict(
            build_spec(partitions_per_topic or {}, {}).partitions_per_topic
        )
        self._ids = TopicIds(sorted(self._ppt))
        self._members: dict[str, Member] = {}
        self._owner: dict[int, str] = {}
        #: ``_owner`` again, as each holder's slot in an array: read in batches (a lag
        #: update's holders) without a lookup per partition in a million-entry dict.
        self._holder_slots = PidArray(-1)
        self._slot_names: list[str] = []
        self._free_slots: list[int] = []
        self._plag = LagTable()
        #: Readings of partitions that do not exist (yet): moved into ``_plag`` when their
        #: topic grows to include them (``TopicIds.existing``).
        self._ahead: dict[int, int] = {}
        #: topic id -> subscribing members.
        self._subs: dict[int, set[str]] = {}
        self._donors: SortedList = SortedList()
        self._by_load: SortedList = SortedList()
        #: topic id -> topic group; topic group -> its topic ids.
        self._tgroup: dict[int, int] = {}
        self._gtopics: dict[int, set[int]] = {}
        self._gheap: dict[int, list[Key]] = {}
        #: A heap longer than this is mostly stale entries and is rebuilt on next need.
        self._glimit: dict[int, int] = {}
        self._gversion = 0
        self._groups_cache: dict[frozenset[int], tuple[int, ...]] = {}
        self._groups_cache_version = -1
        #: topic id -> lazy max-heap (negated count and lag) of members holding its
        #: partitions; built on first need, only groups with mixed subscriptions need it.
        self._hheap: dict[int, list[Key]] | None = None
        self._hheap_size = 0
        self._total_lag = 0
        #: The members' capacities summed (their count when none is declared), and how
        #: many members declare one other than 1: with none, every path is KIP-54's.
        self._capacity_total: float = 0
        #: Of that, members subscribed to nothing: they carry no lag, so the mean lag a
        #: member is measured against leaves them out (``_mean_lag``).
        self._idle_capacity: float = 0
        self._weighted = 0
        self._racks = RackIndex()
        #: Partitions held by a member whose rack holds none of their replicas.
        self._cross_rack: set[int] = set()
        #: Operator constraints (``constraints.py``): pid -> pinned member, the reverse,
        #: member -> cap; and the partitions no subscriber has room for under the caps.
        self._pins: dict[int, str] = {}
        self._pins_of: dict[str, set[int]] = {}
        self._caps: dict[str, int] = {}
        self._stranded: set[int] = set()
        self._begin()

    def _tids(self, topics: AbstractSet[str]) -> frozenset[int]:
        index = self._ids.index
        if index.keys() >= topics:
            return frozenset(map(index.__getitem__, topics))
        return frozenset(map(self._ids.add, topics))

    def _mean_lag(self) -> float:
        """Lag per unit of capacity of the members that can carry lag (subscribed to
        something): what a member's lag is held against. Counting idle members pulled it
        below what any placement reaches, so the lag search chased an unreachable bound
        and rack swaps were refused as lifting members above it."""
        carrying = self._capacity_total - self._idle_capacity
        return self._total_lag / carrying if carrying > 0 else 0.0

    def _pcount(self, topic: int) -> int:
        return self._ppt.get(self._ids.names[topic], 0)

    def _topic_pids(self, topic: int) -> range:
        name = self._ids.names[topic]
        return self._ids.span(name, self._ppt.get(name, 0))

    def _begin(self) -> None:
        #: Each partition that changed hands, and its holder before the event (None
        #: when it had none, or vanished): what ``_diff`` compares, O(moves).
        self._before_owner: dict[int, str | None] = {}
        #: Vanished partitions' holders before the event (their ``_before_owner`` is None
        #: so that no vanishing counts as a move, yet the holder's list changed).
        self._vanished_from: dict[int, str] = {}
        self._touched: set[str] = set()
        self._orphans: set[int] = set()
        self._removed: set[str] = set()
        self._joined: set[str] = set()
        self._lag_moved: set[int] = set()
        self._trigger: LagTrigger | None = None
        #: Partitions whose racks or holder's rack changed: to align even if unmoved.
        self._rack_work: set[int] = set()
        self._rack_moved: set[int] = set()
        #: Pinned partitions whose pin may have started or stopped holding.
        self._pin_work: set[int] = set()
