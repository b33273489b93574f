"""Which assignment records count: the one rule that members, a new leader's recovery,
``ballast audit`` and the simulated fleet all apply, so that they agree on who holds what.

Every leader tenure has an epoch that no other tenure has (the election grants it; see
docs/fencing.md). A new leader writes a fence marker carrying its epoch to every partition
of the assignments topic before its first record. Reading one partition in order, a
reader keeps, per group, the highest epoch of the fence markers seen there (the
*floor*). A record below the floor, or below its own key's current epoch, was written by
a deposed leader after its successor had fenced that partition: it is *fenced* and
nobody acts on it. Of the records that count, a key's *current* one has the highest
(epoch, generation); one that does not beat it (a retried write, a regression) is
*stale* and skipped too.

A record that landed before the marker counts, and the new leader sees it: it reads the
log to its own markers before deciding anything.

A record that does not verify (unsigned, or signed with a key the reader lacks) grants
nothing, but it proves that its epoch and generation were used: members may still honour
it (they were given no key, or the old one). So it raises the numbers a new leader takes
its epoch and generations above (``count``), and turning signing on or changing the key
never restarts the count (docs/operations.md, "Signing").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from controller.wire.records import Logged, LoggedFence, LoggedRecord


class Verdict(Enum):
    FENCE = "fence"  # a marker (raises the floor)
    CURRENT = "current"  # the key's record now
    FENCED = "fenced"  # below the floor: written by a deposed leader, ignored
    STALE = "stale"  # does not beat the key's current record


#: (epoch, generation, tombstone last): a headerless tombstone of a foreign writer takes
#: its key's current generation and wins the tie, as a delete that follows the record.
Order = tuple[int, int, int]


@dataclass
class AssignmentView:
    """The assignments log as every reader must see it, fed one entry at a time in each
    partition's offset order (partitions may interleave)."""

    #: ``(group, partition)`` -> highest fence epoch seen there. Only markers raise it, so
    #: a member that reads just its own key and the markers decides exactly as we do.
    floor: dict[tuple[str, int], int] = field(default_factory=dict)
    #: ``(group, member)`` -> the record that counts now (``record`` None: a tombstone).
    current: dict[tuple[str, str], LoggedRecord] = field(default_factory=dict)
    order: dict[tuple[str, str], Order] = field(default_factory=dict)
    #: Per group, over everything seen, fenced records included: a new leader numbers its
    #: epoch and generations above these, so no (epoch, generation) is ever reused.
    max_epoch: dict[str, int] = field(default_factory=dict)
    max_generation: dict[str, int] = field(default_factory=dict)

    def count(self, entry: Logged) -> None:
        """An entry that does not verify: its epoch and generation were used by someone,
        so no tenure of ours may use them again; it changes nothing else."""
        group = entry.group
        if isinstance(entry, LoggedFence):
            self.max_epoch[group] = max(self.max_epoch.get(group, -1), entry.epoch)
            return
        rec = entry.record
        epoch = rec.controller_epoch if rec is not None else entry.epoch
        generation = rec.generation if rec is not None else entry.generation
        if epoch is not None:
            self.max_epoch[group] = max(self.max_epoch.get(group, -1), epoch)
        if generation is not None:
            self.max_generation[group] = max(self.max_generation.get(group, -1), generation)

    def add(self, entry: Logged) -> Verdict:
        group = entry.group
        slot = (group, entry.partition)
        if isinstance(entry, LoggedFence):
            self.floor[slot] = max(self.floor.get(slot, -1), entry.epoch)
            self.max_epoch[group] = max(self.max_epoch.get(group, -1), entry.epoch)
            return Verdict.FENCE
        key = (group, entry.member)
        floor = self.floor.get(slot, -1)
        prev = self.order.get(key)
        order = self.order_of(entry, floor, prev)
        self.max_epoch[group] = max(self.max_epoch.get(group, -1), order[0])
        self.max_generation[group] = max(self.max_generation.get(group, -1), order[1])
        if order[0] < max(floor, prev[0] if prev else -1):
            return Verdict.FENCED
        if prev is not None and order <= prev:
            return Verdict.STALE
        self.current[key] = entry
        self.order[key] = order
        return Verdict.CURRENT

    @staticmethod
    def order_of(entry: LoggedRecord, floor: int, prev: Order | None) -> Order:
        """Where ``entry`` stands, given its partition's floor and its key's current order."""
        rec = entry.record
        if rec is not None:
            return (rec.controller_epoch, rec.generation, 0)
        epoch = entry.epoch if entry.epoch is not None else max(floor, prev[0] if prev else 0)
        if entry.generation is not None:
            return (epoch, entry.generation, 1)
        return (epoch, prev[1] if prev else 0, 1)

    def group_records(self, group: str) -> dict[str, LoggedRecord]:
        """``member -> current record`` of one group (tombstones included)."""
        return {m: r for (g, m), r in self.current.items() if g == group}
