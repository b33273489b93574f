"""One method per event: each records what it touched for the step to settle."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from operator import sub

import numpy as np
from numpy.typing import NDArray

from ..constraints import Constraints
from ..event_checks import Readings
from ..ids import (
    part_of,
    pid_of,
    topic_of,
)
from ..lag_table import INT64_MAX
from ..types import TopicPartition
from .member import Member
from .moves import REINDEX_SHARE
from .rack_alignment import RackAlignment


class Handlers(RackAlignment):
    """Event handlers: state changes only, no balancing (``Steps._settle`` does that)."""

    def _join(
        self, name: str, topics: frozenset[str], rack: str | None = None, weight: float = 1.0
    ) -> None:
        if name in self._members:
            self._resubscribe(name, topics)
            m = self._members[name]
            if self._racks.set_member(name, rack):
                self._rack_work.update(map(pid_of, m.by_lag))
            if self._set_capacity(m, weight):
                self._touched.add(name)
            return
        self._removed.discard(name)
        self._joined.add(name)
        self._racks.set_member(name, rack)
        m = Member(name, topics, self._tids(topics), cap=self._caps.get(name))
        self._give_slot(m)
        if weight != 1:
            m.capacity = weight
            self._weighted += 1
        self._pin_work.update(self._pins_of.get(name, ()))
        self._capacity_total += m.capacity
        if not topics:
            self._idle_capacity += m.capacity
        self._members[name] = m
        self._refine(m.tids)
        self._attach(m)
        for t in m.tids:
            self._add_subscriber(t, name)
        self._touched.add(name)

    def _leave(self, name: str) -> None:
        m = self._members.get(name)
        if m is None:
            return
        self._detach(m)
        pids = list(map(pid_of, m.by_lag))
        for pid in pids:
            self._before_owner.setdefault(pid, name)
            del self._owner[pid]
        self._holder_slots.put(np.fromiter(pids, np.int64, len(pids)), -1)
        self._free_slots.append(m.slot)
        self._orphans.update(pids)
        self._total_lag -= m.lag
        self._capacity_total -= m.capacity
        if not m.topics:
            self._idle_capacity -= m.capacity
        self._weighted -= m.capacity != 1
        for t in m.tids:
            self._subs[t].discard(name)
        del self._members[name]
        self._racks.drop_member(name)
        self._removed.add(name)
        self._touched.discard(name)

    def _set_capacity(self, m: Member, weight: float) -> bool:
        """Re-weigh a member in place; True when its capacity changed."""
        if weight == m.capacity:
            return False
        self._detach(m)
        self._weighted += (weight != 1) - (m.capacity != 1)
        self._capacity_total += weight - m.capacity
        if not m.topics:
            self._idle_capacity += weight - m.capacity
        m.capacity = weight
        self._attach(m)
        return True

    def _resubscribe(self, name: str, topics: frozenset[str]) -> None:
        m = self._members.get(name)
        if m is None:
            self._join(name, topics)
            return
        if topics == m.topics:
            return
        tids = self._tids(topics)
        for pid in [p for p in map(pid_of, m.by_lag) if topic_of(p) not in tids]:
            self._move(pid, None)
            self._orphans.add(pid)
        old = m.tids
        self._detach(m)
        for t in old - tids:
            self._subs[t].discard(name)
        self._idle_capacity += m.capacity * ((not topics) - (not m.topics))
        m.topics = topics
        m.tids = tids
        m.groups_version = -1
        self._pin_work.update(self._pins_of.get(name, ()))
        self._refine(tids)
        self._attach(m)
        for t in sorted(tids - old):
            self._add_subscriber(t, name)
        self._touched.add(name)

    def _repartition(self, topic: str, count: int) -> None:
        t = self._ids.add(topic)
        old = self._ppt.get(topic, 0)
        self._ppt[topic] = count
        for pid in self._ids.span(topic, old, count):
            self._orphans.discard(pid)
            if pid in self._owner:
                self._touched.add(self._owner[pid])
                self._move(pid, None, vanished=True)
        self._plag.discard(self._ids.span(topic, old, count))
        grown = [p for p in self._ahead if topic_of(p) == t and part_of(p) < count]
        if grown:
            self._plag.swap(grown, [self._ahead.pop(p) for p in grown])
        if self._subs.get(t):
            self._orphans.update(self._ids.span(topic, count, old))
        self._pin_work.update(pid for pid in self._pins if topic_of(pid) == t)

    def _update_lag(self, readings: Readings) -> None:
        """Re-weigh the changed readings. Costs O(readings) plus, per member touched, its
        index entries; when many members are touched the indexes are rebuilt once."""
        pids, values, at, ahead = self._ids.existing(
            self._ppt, *self._ids.checked_lag(readings.lag, readings.columns)
        )
        self._ahead.update(ahead)
        if not self.lag_aware:
            self._plag.swap(pids, values)
            return
        delta = self._lag_deltas(pids, values, at)
        if not delta:
            return
        # A member's lag-ordered list is re-sorted when next read, not here: most members
        # a reading touches are not looked at before the next reading.
        bulk = len(delta) * REINDEX_SHARE > len(self._members)
        members = self._members
        self._total_lag += sum(delta.values())
        if bulk:
            for name, d in delta.items():
                m = members[name]
                m.stale = True
                m.lag += d
            self._reindex()
            return
        for name, d in delta.items():
            m = members[name]
            self._detach(m)
            m.stale = True
            m.lag += d
            self._attach(m)

    def _lag_deltas(
        self, pids: list[int], values: list[int], at: NDArray[np.int64]
    ) -> dict[str, int]:
        """Store the readings; each member whose partitions' lag changed, with the sum of
        the changes (0 when they cancel out: its list still needs re-sorting). In array
        passes (holders gathered, changes summed per slot) unless a lag past 64 bits or
        a sum that could overflow is involved. ``at``: the pids as an array."""
        swapped = self._plag.swap_exact(at, values)
        if swapped is not None:
            old, new = swapped
            holders = self._holder_slots.gather(at)
            change = new - old
            moved = (holders >= 0) & (change != 0)
            holders, change = holders[moved], change[moved]
            if not len(change) or int(np.abs(change).max()) * len(change) <= INT64_MAX:
                sums = np.zeros(len(self._slot_names), dtype=np.int64)
                np.add.at(sums, holders, change)
                touched = np.zeros(len(self._slot_names), dtype=bool)
                touched[holders] = True
                slots = np.flatnonzero(touched)
                names = map(self._slot_names.__getitem__, slots.tolist())
                return dict(zip(names, sums[slots].tolist(), strict=True))
            olds = old.tolist()  # summed as Python ints below
        else:
            olds = self._plag.swap(pids, values)
        delta: dict[str, int] = {}
        for name, d in zip(map(self._owner.get, pids), map(sub, values, olds), strict=True):
            if d and name is not None:
                delta[name] = delta.get(name, 0) + d
        return delta

    def _rerack(self, racks: Mapping[TopicPartition, Collection[str]]) -> None:
        """Racks as ``event_checks`` left them: valid names, in frozensets already."""
        for tp, named in racks.items():
            self._ids.add(tp.topic)
            pid = self._ids.pid(tp)
            assert pid is not None, "event_checks admits Kafka partitions only"
            self._racks.set_partition(pid, frozenset(named))
            self._rack_work.add(pid)

    def _constrain(self, constraints: Constraints) -> None:
        """Take a whole new set of constraints; only what differs is acted on."""
        pins: dict[int, str] = {}
        for tp, member in constraints.pins.items():
            self._ids.add(tp.topic)
            pid = self._ids.pid(tp)
            assert pid is not None, "check_constraints admits Kafka partitions only"
            pins[pid] = member
        old = self._pins
        self._pin_work.update(p for p in pins.keys() | old.keys() if pins.get(p) != old.get(p))
        self._pins = pins
        self._pins_of = {}
        for pid, member in pins.items():
            self._pins_of.setdefault(member, set()).add(pid)
        caps = dict(constraints.caps)
        for name in sorted(self._caps.keys() | caps.keys()):
            m = self._members.get(name)
            if m is None or m.cap == caps.get(name):
                continue
            self._detach(m)
            m.cap = caps.get(name)
            self._attach(m)
            self._touched.add(name)
        self._caps = caps
