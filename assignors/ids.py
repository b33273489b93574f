"""Partition ids: the engine's compact encoding of a ``TopicPartition``, and bulk conversion.

Inside the engine a partition is the int ``topic_id << 32 | partition`` (a *pid*) and an
entry of a member's lag-ordered list is the int ``lag << 64 | pid``. Ints are not tracked
by the cyclic garbage collector and compare in C: a group of a million partitions costs
tens of thousands of tracked objects instead of millions (no multi-second collection
after a build) and sorting and bisecting cost what they cost for ints.

Inputs arrive as ``TopicPartition`` maps and lists. They are converted here, in bulk,
with C-level ``map`` passes when they are well formed, and item by item (with the same
rules and errors) when they are not.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import add, itemgetter, lshift, or_
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .partition_lists import new_partitions, new_range
from .spec import GroupSpec, as_partition, check_lag, check_mapping, check_member, lag_columns
from .types import MAX_PARTITION, CurrentAssignment, LagMap, TopicPartition

PART_BITS = 32
PART_MASK = (1 << PART_BITS) - 1
LAG_SHIFT = 64
PID_MASK = (1 << LAG_SHIFT) - 1

#: The encoding's parts as C-level callables (also for ``map``): a pid's topic id and
#: partition number, an entry's pid and weight (its lag).
topic_of = PART_BITS.__rrshift__
part_of = PART_MASK.__and__
pid_of = PID_MASK.__and__
weight_of = LAG_SHIFT.__rrshift__


def as_entry(weight: int, pid: int) -> int:
    """A member's ``by_lag`` entry: ordered by weight, then pid."""
    return weight << LAG_SHIFT | pid


def with_rank(entry: int, rank: int) -> int:
    """An entry as one int ordered by its weight, then ``rank`` (below 2**64), then pid:
    a sort key that is not a tuple."""
    return (entry >> LAG_SHIFT) << 2 * LAG_SHIFT | rank << LAG_SHIFT | (entry & PID_MASK)


def as_entries(weights: Iterable[int], pids: Iterable[int]) -> list[int]:
    """``as_entry`` of each pair, in C-level passes."""
    return list(map(or_, map(lshift, weights, repeat(LAG_SHIFT)), pids))


_new_tuple = tuple.__new__


_first = itemgetter(0)
_second = itemgetter(1)


class TopicIds:
    """Topic name <-> small int, in first-seen order.

    While names are added in sorted order (``in_order``), pid order is ``TopicPartition``
    order and sorted pid lists convert to sorted partition lists without a sort.
    """

    __slots__ = ("_at", "_laid_out", "_objects", "base", "in_order", "index", "interned", "names")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        #: name -> ``id << 32``, the pid of the topic's partition 0.
        self.base: dict[str, int] = {}
        self.in_order = True
        #: topic id -> its partitions as shared objects, once ``intern()`` was called.
        self.interned: list[list[TopicPartition]] | None = None
        #: Every interned partition in one object array, topic after topic, for gathers:
        #: topic ``t`` starts at ``_at[t]`` with ``_laid_out[t]`` of them. Laid out again
        #: when a gather needs a partition created since.
        self._objects: NDArray[np.object_] = np.empty(0, dtype=object)
        self._at: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._laid_out: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        for name in names:
            self.add(name)

    @classmethod
    def for_spec(cls, spec: GroupSpec) -> TopicIds:
        """Every topic the group names (existing or subscribed), in sorted order."""
        subscribed: set[str] = set().union(*set(spec.topics_of.values()))
        return cls(sorted(subscribed.union(spec.partitions_per_topic)))

    def add(self, name: str) -> int:
        t = self.index.get(name)
        if t is None:
            t = len(self.names)
            if self.names and name < self.names[-1]:
                self.in_order = False
            self.names.append(name)
            self.index[name] = t
            self.base[name] = t << PART_BITS
            if self.interned is not None:
                self.interned.append([])
        return t

    def intern(self) -> None:
        """From now on ``tps`` hands out one shared object per partition, for a caller
        that keeps them all anyway (the controller): no new partition objects per change,
        for the allocator and the cyclic collector to deal with."""
        if self.interned is None:
            self.interned = [[] for _ in self.names]

    def span(self, topic: str, stop: int, start: int = 0) -> range:
        """The pids of partitions ``start .. stop-1`` of a known topic."""
        base = self.base[topic]
        return range(base + start, base + stop)

    def pid(self, tp: TopicPartition) -> int | None:
        base = self.base.get(tp.topic)
        if base is None or not 0 <= tp.partition <= MAX_PARTITION:
            return None
        return base + tp.partition

    def pids_of(self, tps: Collection[TopicPartition]) -> list[int]:
        """Pids of partitions of known topics, in C-level passes (``KeyError`` for an
        unknown topic)."""
        bases = map(self.base.__getitem__, map(_first, tps))
        return list(map(add, bases, map(_second, tps)))

    def tp(self, pid: int) -> TopicPartition:
        """One partition: the shared object once ``intern()`` was called."""
        if self.interned is not None:
            return self._interned_up_to(pid >> PART_BITS, (pid & PART_MASK) + 1)[pid & PART_MASK]
        return _new_tuple(TopicPartition, (self.names[pid >> PART_BITS], pid & PART_MASK))

    def tps(self, pids: Iterable[int]) -> list[TopicPartition]:
        """Ascending pids -> sorted partitions."""
        out = self.each(pids)
        if not self.in_order:
            out.sort()
        return out

    def each(self, pids: Iterable[int]) -> list[TopicPartition]:
        """The partition of each pid, in the pids' order (for pairing with values: once
        topics were named out of order, ``tps`` sorts)."""
        if self.interned is not None:
            return self._shared(pids if isinstance(pids, list) else list(pids))
        names = self.names
        return [_new_tuple(TopicPartition, (names[p >> PART_BITS], p & PART_MASK)) for p in pids]

    def tps_runs(
        self, pids: NDArray[np.int64], counts: Sequence[int]
    ) -> list[list[TopicPartition]]:
        """``tps`` of each run of ``pids`` (ascending runs, ``counts`` long each), every
        object made in one bulk pass instead of a Python step per partition: gathered from
        the interned ones, or built."""
        ends = np.cumsum(counts, dtype=np.intp)
        topics, parts = pids >> PART_BITS, pids & PART_MASK
        if self.interned is None:
            out = list(runs(self._made(topics, parts), ends))
        else:
            out = list(runs(self._gather(topics, parts), ends))
        if not self.in_order:
            for run in out:
                run.sort()
        return out

    def _made(self, topics: NDArray[np.int64], parts: NDArray[np.int64]) -> list[TopicPartition]:
        """A new object for each partition, in C-level passes (twice as fast as a Python
        step per partition; copying whole topics' cached lists and indexing them was no
        faster, the objects being touched in scattered order)."""
        names = np.array(self.names, dtype=object)[topics].tolist()
        return new_partitions(names, parts.tolist(), len(names))

    def _gather(self, topics: NDArray[np.int64], parts: NDArray[np.int64]) -> NDArray[np.object_]:
        """The interned objects of these partitions, in one fancy index."""
        laid = self._laid_out
        if len(laid) < len(self.names) or (len(parts) and (parts >= laid[topics]).any()):
            for t in np.unique(topics).tolist():
                self._interned_up_to(t, int(parts[topics == t].max()) + 1)
            self._lay_out()
        got: NDArray[np.object_] = self._objects[self._at[topics] + parts]
        return got

    def _lay_out(self) -> None:
        assert self.interned is not None
        sizes = np.fromiter(map(len, self.interned), np.int64, len(self.interned))
        self._objects = np.fromiter(
            chain.from_iterable(self.interned), dtype=object, count=int(sizes.sum())
        )
        self._at = np.cumsum(sizes) - sizes
        self._laid_out = sizes

    def _shared(self, pids: list[int]) -> list[TopicPartition]:
        """``tps`` from the interned objects, creating those of partitions not seen yet."""
        interned = self.interned
        assert interned is not None
        while True:
            try:
                return [interned[p >> PART_BITS][p & PART_MASK] for p in pids]
            except IndexError:
                for p in pids:
                    self._interned_up_to(p >> PART_BITS, (p & PART_MASK) + 1)

    def _interned_up_to(self, t: int, need: int) -> list[TopicPartition]:
        """Topic ``t``'s interned partitions, created up to ``need`` if fewer."""
        assert self.interned is not None
        known = self.interned[t]
        if len(known) < need:
            known.extend(new_range(self.names[t], len(known), need))
        return known

    # ------------------------------------------------------------------ lag

    def lag(self, lag: LagMap | None, *, register: bool) -> tuple[list[int], list[int]]:
        """Validated lag as parallel lists of pids and values, in the map's order.

        Readings for unknown topics are kept only if ``register`` (the engine keeps them
        for topics that appear later); a one-shot call drops them."""
        check_mapping(lag, "lag")
        if not lag:
            return [], []
        columns = lag_columns(lag)
        if columns is None:
            check_lag(lag)  # entry by entry: names a bad one, or admits plain pairs
        return self.checked_lag(lag, columns, register=register)

    def checked_lag(
        self,
        lag: LagMap,
        columns: tuple[list[int], list[Any]] | None,
        *,
        register: bool = True,
    ) -> tuple[list[int], list[int]]:
        """``lag`` for a map already checked, with its ``lag_columns`` when it had them."""
        if columns is not None:
            parts, values = columns
            try:
                bases = list(map(self.base.__getitem__, map(_first, lag)))
            except KeyError:
                pass
            else:
                return list(map(add, bases, parts)), values
        pids: list[int] = []
        known: list[int] = []
        for (topic, partition), value in lag.items():
            if register:
                self.add(topic)
            base = self.base.get(topic)
            if base is not None:
                pids.append(base + partition)
                known.append(value)
        return pids, known

    def existing(
        self, ppt: Mapping[str, int], pids: list[int], values: list[int]
    ) -> tuple[list[int], list[int], NDArray[np.int64], dict[int, int]]:
        """Readings (``pids`` and ``values``) of partitions that exist, their topic's count
        in ``ppt`` above their number, with their pids as an array; and the others' by
        pid. Readings may name partitions a topic has yet to grow into, up to partition
        2**31 - 1: the arrays the engine keeps per partition are sized by the largest
        number they hold, so those readings wait beside them."""
        at = np.fromiter(pids, np.int64, len(pids))
        exists = (at & PART_MASK) < self._sizes(ppt)[at >> PART_BITS]
        if exists.all():
            return pids, values, at, {}
        keep = exists.tolist()
        ahead = {p: v for p, v, k in zip(pids, values, keep, strict=True) if not k}
        return list(compress(pids, keep)), list(compress(values, keep)), at[exists], ahead

    # ------------------------------------------------------------------ claims

    def claims(self, spec: GroupSpec, current: CurrentAssignment | None) -> Claims:
        """The part of ``current`` that can be kept.

        Claims by departed members, on vanished partitions or unsubscribed topics are
        dropped. A partition claimed by several members stays with the claimant holding
        the fewest valid claims (ties: smallest member id), which keeps the result closer
        to balance.

        When every claim is a ``TopicPartition`` of an existing partition (the usual case:
        the previous result), the whole group is read in a few C and NumPy passes, never a
        Python step per claim; otherwise member by member, item by item, with the same
        rules.
        """
        check_mapping(current, "current")
        if not current:
            return Claims.none()
        named = sorted(check_member(k, "current") for k in current)
        members = [m for m in named if m in spec.topics_of]
        lists: list[object] = [current[m] for m in members]
        read = self._well_formed(lists, spec.partitions_per_topic)
        whole = read is not None
        owner, pids = read if read is not None else self._item_by_item_all(spec, members, lists)
        n = len(members)
        intact = np.ones(n, dtype=bool)
        keep = self._subscribed(spec, members, owner, pids)
        if not keep.all():
            intact[owner[~keep]] = False
            owner, pids = owner[keep], pids[keep]
        # Each member's claims are ascending and distinct unless the pid sequence fails
        # to rise inside the member's run.
        falls = (pids[1:] <= pids[:-1]) & (owner[1:] == owner[:-1])
        if falls.any():
            intact[owner[1:][falls]] = False
            order = np.lexsort((pids, owner))
            owner, pids = owner[order], pids[order]
            again = np.concatenate(([False], (pids[1:] == pids[:-1]) & (owner[1:] == owner[:-1])))
            owner, pids = owner[~again], pids[~again]
        held = np.bincount(owner, minlength=n)
        owner, pids, lost = self._resolve_conflicts(spec, owner, pids, held)
        if lost.size:
            intact[lost] = False
            held = np.bincount(owner, minlength=n)
        keeping = held > 0
        given: dict[str, list[TopicPartition]] = {}
        if whole and self.in_order:
            reuse = (intact & keeping).tolist()
            given = dict(
                zip(compress(members, reuse), map(list, compress(lists, reuse)), strict=True)  # type: ignore[arg-type]
            )
        return Claims(
            list(compress(members, keeping.tolist())),
            pids,
            np.cumsum(held[keeping]),
            given,
        )

    def _well_formed(
        self, lists: list[object], ppt: Mapping[str, int]
    ) -> tuple[NDArray[np.intp], NDArray[np.int64]] | None:
        """Every claim's owner (an index into ``lists``) and pid, in order, if every claim
        is a list or tuple of ``TopicPartition`` with a partition that exists; ``None``
        otherwise."""
        if set(map(type, lists)) - {list, tuple}:
            return None
        flat: list[Any] = list(chain.from_iterable(lists))  # type: ignore[arg-type]
        if set(map(type, flat)) - {TopicPartition}:
            return None
        parts = list(map(_second, flat))
        if set(map(type, parts)) - {int}:  # exact: a bool is no partition number
            return None
        n = len(flat)
        try:
            tids = np.fromiter(map(self.index.__getitem__, map(_first, flat)), np.int64, n)
            numbers = np.fromiter(parts, np.int64, n)
        except (KeyError, OverflowError):
            return None
        if n and not ((numbers >= 0) & (numbers < self._sizes(ppt)[tids])).all():
            return None
        lens = np.fromiter(map(len, lists), np.intp, len(lists))  # type: ignore[arg-type]
        owner = np.repeat(np.arange(len(lists), dtype=np.intp), lens)
        return owner, (tids << PART_BITS) | numbers

    def _item_by_item_all(
        self, spec: GroupSpec, members: list[str], lists: list[object]
    ) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """``_well_formed``'s result for claims that are not all well formed: each member's
        valid entries, the rest dropped."""
        ppt = spec.partitions_per_topic
        read = [
            list(self._item_by_item(m, items, spec.topics_of[m], ppt))
            for m, items in zip(members, lists, strict=True)
        ]
        lens = np.fromiter(map(len, read), np.intp, len(read))
        owner = np.repeat(np.arange(len(read), dtype=np.intp), lens)
        return owner, np.fromiter(chain.from_iterable(read), np.int64, int(lens.sum()))

    def _subscribed(
        self,
        spec: GroupSpec,
        members: list[str],
        owner: NDArray[np.intp],
        pids: NDArray[np.int64],
    ) -> NDArray[np.bool_]:
        """Which claims are on a topic their member subscribes to."""
        sets = list(set(map(spec.topics_of.__getitem__, members)))
        if all(fs.issuperset(spec.partitions_per_topic) for fs in sets):
            return np.ones(len(pids), dtype=bool)
        allowed = np.zeros((len(sets), len(self.names)), dtype=bool)
        lengths = np.fromiter(map(len, sets), np.intp, len(sets))
        topic = np.fromiter(
            map(self.index.get, chain.from_iterable(sets), repeat(-1)), np.intp, int(lengths.sum())
        )
        row = np.repeat(np.arange(len(sets), dtype=np.intp), lengths)
        known = topic >= 0
        allowed[row[known], topic[known]] = True
        row_of = dict(zip(sets, range(len(sets)), strict=True))
        rows = np.fromiter(
            map(row_of.__getitem__, map(spec.topics_of.__getitem__, members)), np.intp, len(members)
        )
        keep: NDArray[np.bool_] = allowed[rows[owner], pids >> PART_BITS]
        return keep

    def _resolve_conflicts(
        self,
        spec: GroupSpec,
        owner: NDArray[np.intp],
        pids: NDArray[np.int64],
        held: NDArray[np.intp],
    ) -> tuple[NDArray[np.intp], NDArray[np.int64], NDArray[np.intp]]:
        """Each partition claimed by several members to the one holding fewest valid
        claims (ties: the smaller index, i.e. the smaller member id); the members that
        lost one are returned too."""
        dense = self.dense(spec.partitions_per_topic, pids)
        if not dense.size or np.bincount(dense).max() <= 1:
            return owner, pids, np.empty(0, dtype=np.intp)
        order = np.lexsort((owner, held[owner], dense))
        first = np.ones(len(order), dtype=bool)
        first[1:] = dense[order][1:] != dense[order][:-1]
        win = np.empty(len(order), dtype=bool)
        win[order] = first
        return owner[win], pids[win], np.unique(owner[~win])

    def dense(self, ppt: Mapping[str, int], pids: NDArray[np.int64]) -> NDArray[np.int64]:
        """Valid pids as indexes ``0 .. sum(partition counts) - 1``, topic after topic."""
        sizes = self._sizes(ppt)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        index: NDArray[np.int64] = offsets[pids >> PART_BITS] + (pids & PART_MASK)
        return index

    def _sizes(self, ppt: Mapping[str, int]) -> NDArray[np.int64]:
        """Partition count per topic id (0 for a topic ``ppt`` does not name)."""
        return np.fromiter(map(ppt.get, self.names, repeat(0)), np.int64, len(self.names))

    def _item_by_item(
        self, member: str, items: object, topics: frozenset[str], ppt: Mapping[str, int]
    ) -> Iterable[int]:
        """The member's claims that can be kept. A claim on a partition that no longer
        exists or a topic no longer subscribed is stale and dropped; one that is not a
        ``(topic, partition)`` pair is a caller bug and named."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Collection):
            raise TypeError(f"current[{member!r}]: expected a collection of partitions")
        for raw in items:
            tp = as_partition(raw)
            if tp is None:
                raise TypeError(f"current[{member!r}]: {raw!r} is not a (topic, partition) pair")
            if tp.topic in topics and 0 <= tp.partition < ppt.get(tp.topic, 0):
                yield self.base[tp.topic] + tp.partition


@dataclass(frozen=True, slots=True)
class Claims:
    """What a sticky strategy keeps of ``current``.

    ``pids`` holds every kept claim, member after member (``members`` sorted), each
    member's ascending; no pid twice. ``given`` holds, for members whose claim was well
    formed, already sorted and kept whole, a copy of their list as the caller gave it: a
    one-shot call hands those partition objects back instead of building new ones.
    """

    members: list[str]
    pids: NDArray[np.int64]
    #: ``members[i]`` keeps ``pids[ends[i-1]:ends[i]]``.
    ends: NDArray[np.intp]
    given: dict[str, list[TopicPartition]]

    @classmethod
    def none(cls) -> Claims:
        return cls([], np.empty(0, dtype=np.int64), np.empty(0, dtype=np.intp), {})

    def __len__(self) -> int:
        return len(self.members)

    def by_member(self) -> dict[str, list[int]]:
        return dict(zip(self.members, runs(self.pids, self.ends), strict=True))


def runs(flat: NDArray[Any] | list[Any], ends: NDArray[np.intp]) -> Iterator[list[Any]]:
    """``flat`` cut at ``ends`` into lists (of ints, or of the objects of an object array
    or a list): run ``i`` is ``flat[ends[i-1]:ends[i]]``."""
    values = flat if isinstance(flat, list) else flat.tolist()
    stops = ends.tolist()
    return map(values.__getitem__, map(slice, [0, *stops[:-1]], stops))


def sort_runs(pids: NDArray[np.int64], run: NDArray[np.int64]) -> NDArray[np.int64]:
    """``pids`` ascending within each run, runs kept in place (``run``: each pid's run
    number, non-decreasing). One sort of the key ``run * span + pid`` where it fits in 63
    bits (with topic ids below 2**15, any number of runs below 65 536), else a
    ``lexsort``, which costs about three times as much."""
    if not len(pids):
        return pids
    span = int(pids.max()) + 1
    if int(run[-1]) >= (1 << 63) // span - 1:
        return pids[np.lexsort((pids, run))]
    key = run * span + pids
    key.sort()
    key %= span
    return key


def valid_claims(
    spec: GroupSpec, current: CurrentAssignment | None
) -> dict[str, list[TopicPartition]]:
    """``TopicIds.claims`` as partitions: what a sticky strategy keeps of ``current``."""
    ids = TopicIds.for_spec(spec)
    return {m: ids.tps(pids) for m, pids in ids.claims(spec, current).by_member().items()}
