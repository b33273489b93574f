"""Building an engine from a whole group at once: the kept part of ``current``, or a
fresh placement in bulk (uniform deal, rack deal, leveling or greedy placement), and the
fast paths of the stateless ``assign`` that need no engine at all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from ..capacity import (
    MemberCapacities,
    build_capacities,
    common_capacity,
    deal_by_capacity,
)
from ..constraints import (
    NONE,
    Constraints,
    check_against,
)
from ..events import Change
from ..ids import (
    PART_BITS,
    PART_MASK,
    Claims,
    TopicIds,
    as_entries,
    runs,
)
from ..lag_table import LagTable
from ..placement import (
    deal_uniform,
    greedy_place_of,
    grouped,
    heaviest_first_array,
    keep_uniform,
    level_place,
    snake_places,
    subscriber_indexes,
    weight_array,
)
from ..policy import LagPolicy
from ..rack_deal import Share, deal_by_rack
from ..racks import MemberRacks, PartitionRacks, Racks, build_racks
from ..replica_layouts import ReplicaLayouts
from ..spec import GroupSpec, build_spec, check_lag
from ..types import (
    Assignment,
    CurrentAssignment,
    LagMap,
    PartitionsPerTopic,
    Subscriptions,
    TopicPartition,
)
from .step import Steps

E = TypeVar("E", bound=Steps)


@dataclass(slots=True)
class Snapshot:
    """The starting point of a snapshot: kept claims, or a fresh bulk placement."""

    spec: GroupSpec
    ids: TopicIds
    #: The validated lag map: pids and values in its order.
    readings: tuple[list[int], list[int]]
    lag_aware: bool
    claims: Claims
    uniform: bool
    #: Validated racks, when any member declares one.
    racks: Racks | None = None
    #: Every member's capacity, when they are not all equal.
    capacities: dict[str, float] | None = None
    #: Without ``capacities``, the capacity every member declared (not always 1).
    common_capacity: float = 1.0
    constraints: Constraints = NONE
    #: Readings of partitions that do not exist yet (``TopicIds.existing``).
    ahead: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(  # noqa: PLR0917 -- from_snapshot's arguments, in its order
        cls,
        partitions_per_topic: PartitionsPerTopic,
        subscriptions: Subscriptions,
        current: CurrentAssignment | None,
        lag: LagMap | None,
        lag_aware: bool,
        member_racks: MemberRacks | None = None,
        partition_racks: PartitionRacks | None = None,
        member_capacities: MemberCapacities | None = None,
        constraints: Constraints = NONE,
        *,
        strict: bool = False,
    ) -> Snapshot:
        spec = build_spec(partitions_per_topic, subscriptions)
        if strict:
            check_against(spec, constraints)
        racks = None
        if member_racks is not None or partition_racks is not None:
            racks = build_racks(spec, member_racks, partition_racks, keep_replicas=not strict)
        ids = TopicIds.for_spec(spec)
        readings: tuple[list[int], list[int]] = ([], [])
        ahead: dict[int, int] = {}
        if lag_aware:
            pids, values, _, ahead = ids.existing(
                spec.partitions_per_topic, *ids.lag(lag, register=False)
            )
            readings = (pids, values)
        elif lag:  # validated all the same: a bad lag map is a caller bug either way
            check_lag(lag)
        claims = ids.claims(spec, current)
        capacities = build_capacities(spec, member_capacities)
        common = 1.0 if capacities else common_capacity(spec, member_capacities)
        return cls(
            spec,
            ids,
            readings,
            lag_aware,
            claims,
            spec.is_uniform(),
            racks,
            capacities,
            common,
            constraints,
            ahead,
        )

    @property
    def fresh(self) -> bool:
        return not self.claims

    @property
    def racked(self) -> bool:
        """Racks can change the result: the rack deal, or the engine, must place. Kafka's
        rule, and beyond it a group whose partitions do not split evenly, where which
        members take one more can keep partitions on their racks that Kafka's rule
        leaves off them."""
        racks = self.racks
        if racks is None:
            return False
        if racks.useful():
            return True
        spec = self.spec
        total = sum(spec.partitions_per_topic[t] for t in spec.topics)
        return bool(spec.members) and total % len(spec.members) != 0 and racks.can_help()

    @property
    def loaded_capacities(self) -> dict[str, float] | None:
        """What the engine holds: equal capacities other than 1 change no placement, but
        the engine keeps them for the members that join later."""
        if self.capacities is None and self.common_capacity != 1:
            return dict.fromkeys(self.spec.members, self.common_capacity)
        return self.capacities

    @property
    def weighted(self) -> bool:
        """Lag can change the result."""
        return self.lag_aware and any(self.readings[1])

    @property
    def free(self) -> bool:
        """Every member may take every partition, and any count: the plain deal's case."""
        return self.uniform and self.capacities is None and not self.constraints

    @property
    def final(self) -> bool:
        """A fresh uniform deal is count-balanced by construction; without lag (and
        capacities or constraints, which the plain deal ignores) it is done."""
        return self.fresh and self.free and not self.weighted

    @property
    def levelable(self) -> bool:
        """Mixed subscriptions and nothing but counts to balance: ``level_place`` places
        and balances the group in array passes, where placing and repairing partition by
        partition costs a Python step per partition."""
        return (
            not self.uniform
            and not self.weighted
            and self.capacities is None
            and not self.constraints
        )

    def leveled(self) -> tuple[NDArray[np.int64], NDArray[np.int64], bool]:
        """``level_place``'s result, from the claims when there are any, as the member
        index of each place in ``every()``; the same before it (-1: unowned); and
        whether it is balanced."""
        spec, ids, claims = self.spec, self.ids, self.claims
        n = len(spec.members)
        sizes = [spec.partitions_per_topic[t] for t in spec.topics]
        offsets = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
        kept = np.full(int(offsets[-1]), -1, dtype=np.int64)
        if claims:
            start = np.zeros(len(ids.names), dtype=np.int64)
            start[[ids.index[t] for t in spec.topics]] = offsets[:-1]
            position = {m: i for i, m in enumerate(spec.members)}
            holder = np.fromiter(map(position.__getitem__, claims.members), np.int64)
            pids = claims.pids
            kept[start[pids >> PART_BITS] + (pids & PART_MASK)] = np.repeat(  # arrays
                holder, np.diff(claims.ends, prepend=0)
            )
        owner, balanced = level_place(subscriber_indexes(spec), offsets, n, kept)
        return owner, kept, balanced

    def leveled_result(self) -> Assignment | None:
        """The final result when ``levelable`` and the leveling balanced the group; with
        claims, only the members whose partitions changed get new lists."""
        owner, kept, balanced = self.leveled()
        if not balanced:
            return None
        members = self.spec.members
        places, ends = grouped(owner, len(members))
        if not self.claims:
            every = np.fromiter(self.partitions(), object, len(places))  # of tuples, not 2-D
            return dict(zip(members, runs(every[places], ends), strict=True))
        moved = np.flatnonzero(owner != kept)
        touched = np.union1d(owner[moved], kept[moved][kept[moved] >= 0]).tolist()
        pids = self.every()[places]
        starts = np.concatenate(([0], ends[:-1]))
        return self._kept_but({members[i]: pids[starts[i] : ends[i]].tolist() for i in touched})

    def partitions(self) -> list[TopicPartition]:
        """Every subscribed partition, topic after topic (the order of ``every()``)."""
        return list(chain.from_iterable(map(self.spec.partitions, self.spec.topics)))

    def dealt(self) -> Assignment:
        """The final result when ``final``: a plain deal of every partition."""
        return deal_uniform(list(self.spec.members), self.partitions(), None)

    def dealt_by_rack(self) -> Assignment:
        """The final result when ``final`` and ``racked``: the rack deal, no engine."""
        shares, _ = self.rack_dealt()
        parts = self.partitions()
        every = np.fromiter(parts, object, len(parts))  # of tuples, not a 2-D array of fields
        return dict(chain.from_iterable(s.dealt(every, self.spec.members) for s in shares))

    def kept_uniform(self) -> Assignment:
        """The result when every member can take every partition and lag cannot matter:
        the claims rebalanced with the least movement, no engine needed."""
        spec, ids, claims = self.spec, self.ids, self.claims
        counts = spec.partitions_per_topic
        unowned = np.empty(0, dtype=np.int64)
        if len(claims.pids) < sum(counts[t] for t in spec.topics):
            every = np.concatenate(
                [
                    np.arange(ids.base[t], ids.base[t] + counts[t], dtype=np.int64)
                    for t in spec.topics
                ]
            )
            owned = np.zeros(sum(counts.values()), dtype=bool)
            owned[ids.dense(counts, claims.pids)] = True
            unowned = every[~owned[ids.dense(counts, every)]]
        return self._kept_but(keep_uniform(spec.members, claims, unowned))

    def _kept_but(self, changed: Mapping[str, list[int]]) -> Assignment:
        """Every member's claim, but ``changed``: the caller's own partition objects are
        handed back where a claim was kept whole."""
        ids, claims = self.ids, self.claims
        out: dict[str, list[TopicPartition] | None] = dict.fromkeys(self.spec.members)
        out.update(claims.given)
        out.update(zip(changed, map(ids.tps, changed.values()), strict=True))
        if None in out.values():
            kept = claims.by_member()
            for m, now in out.items():
                if now is None:
                    out[m] = ids.tps(kept.get(m, []))
        return out  # type: ignore[return-value]

    def initial(
        self,
    ) -> tuple[dict[str, list[int]], dict[str, tuple[list[int], int]] | None, bool]:
        """Each member's starting pids; when a lag-ordered deal made them, its ``by_lag``
        entries and total lag (so the build need not look lag up again); and whether
        they are count-balanced already (no repair to run)."""
        spec = self.spec
        if self.claims:
            return self.claims.by_member(), None, False
        if self.levelable:
            owner, _, balanced = self.leveled()
            places, ends = grouped(owner, len(spec.members))
            placed = dict(zip(spec.members, runs(self.every()[places], ends), strict=True))
            return placed, None, balanced
        return *self._placed(), self.uniform and not self.constraints

    def _lag_map(self) -> dict[int, int] | None:
        """The readings as a dict, for the placements that look partitions up one by one:
        building it is a cost per reading, so only those paths pay it."""
        return dict(zip(*self.readings, strict=True)) if self.lag_aware else None

    def _placed(self) -> tuple[dict[str, list[int]], dict[str, tuple[list[int], int]] | None]:
        """A fresh placement but the leveled one."""
        spec, ids = self.spec, self.ids
        counts = spec.partitions_per_topic
        if self.capacities is not None:
            if not self.uniform:  # each partition placed by the engine's own rule
                return {}, None
            every = list(chain.from_iterable(ids.span(t, counts[t]) for t in spec.topics))
            return deal_by_capacity(spec.members, self.capacities, every, self._lag_map()), None
        if not self.uniform:
            placed = greedy_place_of(spec, lambda t: ids.span(t, counts[t]), self._lag_map())
            return placed, None
        members = list(spec.members)
        every = list(chain.from_iterable(ids.span(t, counts[t]) for t in spec.topics))
        pids, values = self.readings
        if not (self.lag_aware and pids):
            return deal_uniform(members, every), None
        weights = values if pids == every else LagTable.of(pids, values).many(every)
        weight = weight_array(weights)
        order = heaviest_first_array(weight)
        if order is None:
            return deal_uniform(members, every), None
        # The snake deal of deal_uniform on arrays: a million partitions without a
        # million Python-level lookups.
        heavy = weight[order]
        ordered = np.asarray(every, dtype=np.int64)[order]
        dealt: dict[str, list[int]] = {}
        weighed: dict[str, tuple[list[int], int]] = {}
        for i, m in enumerate(members):
            a, b = snake_places(i, len(members))
            mine = ordered[a].tolist() + ordered[b].tolist()
            lags = heavy[a].tolist() + heavy[b].tolist()
            dealt[m] = mine
            entries = sorted(as_entries(lags, mine))
            weighed[m] = (entries, sum(lags))
        return dealt, weighed

    def every(self) -> NDArray[np.int64]:
        """The pids of every subscribed partition, topic after topic."""
        ids, counts = self.ids, self.spec.partitions_per_topic
        spans = [np.arange(ids.base[t], ids.base[t] + counts[t]) for t in self.spec.topics]
        return np.concatenate([np.empty(0, dtype=np.int64), *spans])

    def rack_dealt(self) -> tuple[list[Share], NDArray[np.int64]]:
        """``dealt`` for a racked group (``rack_deal.py``), as shares of places in
        ``every()``, and the places held off their replicas' racks (as few as the counts
        allow). Only without lag: lagsticky's lag moves are not rack aware, so there a
        rack-blind deal and swaps within the lag target stay the rule."""
        assert self.racks is not None
        layout, layouts = self.layouts(self.every())
        return deal_by_rack(self.spec.members, self.racks.member, layout, layouts)

    def layouts(
        self, pids: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], Sequence[frozenset[str]]]:
        """The replica layout of each of ``pids`` (an index into the layouts returned
        with it; -1: no rack known), by array."""
        assert self.racks is not None
        table = self.racks.partition
        assert isinstance(table, ReplicaLayouts), "build_racks reads replicas as a table"
        return table.codes_of(self.ids, pids), table.layouts

    def misplaced(self, owner: Mapping[int, str]) -> list[int]:
        """The pids of ``owner`` held off their replicas' racks, in array passes: a
        snapshot of a hundred thousand partitions is not checked one by one."""
        racks = self.racks
        assert racks is not None
        if not racks.member:
            return []
        pids = np.fromiter(owner, np.int64, len(owner))
        layout, layouts = self.layouts(pids)
        names = {rack: i for i, rack in enumerate(sorted(set(racks.member.values())))}
        rack_of = {m: names[r] for m, r in racks.member.items()}
        held_on = np.fromiter(map(rack_of.get, owner.values(), repeat(-1)), np.int64, len(owner))
        # local[layout, rack]; the last row stands for "no rack known" (layout -1).
        local = np.zeros((len(layouts) + 1, len(names)), dtype=bool)
        for i, named in enumerate(layouts):
            local[i, [names[r] for r in named if r in names]] = True
        off = (held_on >= 0) & ~local[layout, np.maximum(held_on, 0)]
        found: list[int] = pids[off].tolist()
        return found

    def engine(self, policy: LagPolicy, make: type[E]) -> tuple[E, Change]:
        """An engine of class ``make`` (``IncrementalAssignor``) built from here, settled."""
        spec = self.spec
        eng = make(spec.partitions_per_topic, lag_aware=self.lag_aware, policy=policy)
        eng._ids = self.ids
        eng._plag = LagTable.of(*self.readings)
        eng._ahead = self.ahead
        if self.racks is not None and self.racked and self.final:
            shares, misplaced = self.rack_dealt()
            every = self.every()
            initial = dict(chain.from_iterable(s.dealt(every, spec.members) for s in shares))
            eng._bulk_load(spec.members, spec.topics_of, initial, capacities=self.loaded_capacities)
            eng._adopt_racks(self.racks, every[misplaced].tolist(), align=False)
            balanced = True
        else:
            placed, weighed, balanced = self.initial()
            eng._bulk_load(
                spec.members, spec.topics_of, placed, weighed, capacities=self.loaded_capacities
            )
            if self.racks is not None:
                eng._adopt_racks(self.racks, self.misplaced(eng._owner), align=True)
                # A swap keeps counts, but with mixed subscriptions may hand a topic to a
                # member above one of its subscribers: the repair looks again.
                balanced = balanced and self.uniform
        if self.constraints:
            eng._constrain(self.constraints)
        budget = 4 * len(spec.members) + 64 if self.fresh else policy.max_moves
        work = () if balanced else eng._violators()
        # Count-trading rack moves only where nothing is owned, Kafka's rule (or an uneven
        # split) asks for racks, and no lag rounds follow: after a move they can leave more
        # partitions off their racks than the rack-blind placement (found by the property
        # test of test_racks.py). ``lagsticky`` with no lag known has none to follow.
        moves = self.fresh and self.racked and not self.weighted
        change = eng._settle(
            work, lag_budget=budget, count_lag_moves=not self.fresh, rack_moves=moves
        )
        return eng, change
