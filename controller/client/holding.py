"""What a member holds and has handed to its application, and what a grant changes: the
rules every binding applies the same way, with no client library.

Records handed out before have been processed once the application polls again, so a
revoke commits them first and only then is the generation acknowledged; partitions kept
go on from what was handed out (an ``assign()`` resets positions to the commits), new
ones start from their commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from controller.client.grants import Grant, Partition


class Change(NamedTuple):
    target: frozenset[Partition]
    revoked: frozenset[Partition]
    added: frozenset[Partition]
    #: The generation applying it acknowledges (None: nothing new to acknowledge).
    generation: int | None


class Holding:
    def __init__(self) -> None:
        #: What is held and the generation of the last record applied, replaced as one
        #: (a presence made on another thread never pairs one with the other's old value).
        self.held: tuple[frozenset[Partition], int] = (frozenset(), -1)
        #: Per partition, the next offset after the last record handed out.
        self.consumed: dict[Partition, int] = {}

    @property
    def assignment(self) -> frozenset[Partition]:
        return self.held[0]

    @property
    def generation(self) -> int:
        return self.held[1]

    def change(self, grant: Grant) -> Change:
        target = grant.partitions
        return Change(target, self.assignment - target, target - self.assignment, grant.generation)

    def handed_out(self, partition: Partition, offset: int) -> None:
        """The application got the record at ``offset``."""
        self.consumed[partition] = offset + 1

    def handed_out_up_to(self, positions: Mapping[Partition, int]) -> None:
        """The application got everything before these offsets, of partitions held."""
        for partition, position in positions.items():
            if partition in self.assignment:
                self.consumed[partition] = position

    def release(self, revoked: frozenset[Partition]) -> dict[Partition, int]:
        """The commits that must land before ``revoked`` is let go."""
        return {p: self.consumed.pop(p) for p in sorted(revoked) if p in self.consumed}

    def resume_at(self, change: Change) -> dict[Partition, int]:
        """Where the kept partitions go on after the new ``assign()``."""
        kept = change.target - change.added
        return {p: o for p, o in self.consumed.items() if p in kept}

    def applied(self, change: Change) -> None:
        generation = self.generation if change.generation is None else change.generation
        self.held = (change.target, generation)

    def committable(self) -> dict[Partition, int]:
        """Everything handed out on partitions still held."""
        return {p: o for p, o in sorted(self.consumed.items()) if p in self.assignment}

    def let_go(self) -> dict[Partition, int]:
        """Hold nothing; the commits that should land first (a fail-stop or a leave)."""
        offsets = self.committable()
        self.consumed.clear()
        self.held = (frozenset(), self.generation)
        return offsets
