"""Chains of moves that bring a partition onto its racks where no swap or single move
does, on a fresh ``sticky`` placement with mixed subscriptions too large (or pinned) for
the count search of ``rack_counts.py``.

A chain hands a misplaced partition to another member, which hands one of its own on,
and so on: it ends at a member that keeps what it got (it and the first member trade
counts), or back at the first member (no count changes). Min-cost flow calls these
augmenting paths and negative cycles; here they are searched depth first, a few moves
deep, within a budget of steps, and applied when they leave fewer partitions off their
racks and KIP-54 balance holds after them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from ..ids import topic_of
from .member import Member
from .repair import Repair

#: Moves in one chain, at most.
CHAIN_MOVES = 4
#: Steps (a member considered as the next link) searched for one misplaced partition.
STEPS_PER_PARTITION = 5_000
#: Steps for one placement: ``STEPS_PER_GROUP`` over the members, at least
#: ``MIN_STEPS``. A small group is searched through (its chains are what its optimum
#: needs); in one of hundreds, where swaps and single moves leave one or two off their
#: racks and nothing more can be placed, the search ends within a few milliseconds.
STEPS_PER_GROUP = 100_000
MIN_STEPS = 2_000
#: What applying a chain (its moves, the balance checks, perhaps the undo) costs, in steps.
APPLY_STEPS = 100

#: (partition, from, to), in order.
Chain = list[tuple[int, str, str]]
#: What makes two misplaced partitions meet the same chains: their topic and replica
#: racks, and their holder's rack, count and subscription.
Alike = tuple[int, frozenset[str] | None, str | None, int, frozenset[int]]


@dataclass
class _Search:
    """One placement's search: its budget, and what stays true while nothing moves."""

    steps: int
    #: Where the steps of the partition being searched run out.
    floor: int = 0
    #: Each topic's subscribers, in name order (subscriptions do not change here).
    subscribers: dict[int, list[str]] = field(default_factory=dict)
    #: One partition of each kind a member holds; forgotten when a chain moves anything.
    kinds: dict[str, list[int]] = field(default_factory=dict)
    #: The subscribers of each start's topics, in name order.
    givers: dict[str, list[str]] = field(default_factory=dict)

    def spend(self, steps: int = 1) -> bool:
        """Whether the search may go on after ``steps`` more."""
        self.steps -= steps
        return self.steps >= self.floor


@dataclass
class _Chain:
    """The chain being built from ``start``."""

    start: Member
    links: Chain = field(default_factory=list)
    moved: set[int] = field(default_factory=set)
    members: set[str] = field(default_factory=set)


def _placed_first(
    search: _Search, names: list[str], placed: Callable[[str], bool]
) -> Iterator[str]:
    """``names`` where ``placed`` holds, then the others, each in order. Every name
    looked at is a step: a topic with thousands of subscribers costs the budget, no
    more."""
    for wanted in (True, False):
        for name in names:
            if not search.spend():
                return
            if placed(name) is wanted:
                yield name


class RackChains(Repair):
    """The chain search (``RackAlignment`` calls it after its swaps and moves)."""

    def _rack_chains(self, misplaced: list[int]) -> None:
        """Place what can be placed by a chain, until no chain is found. A partition
        alike one whose search failed is not searched again until a chain is applied."""
        racks, owner = self._racks, self._owner
        search = _Search(max(MIN_STEPS, STEPS_PER_GROUP // len(self._members)))
        failed: set[Alike] = set()
        found = True
        while found and search.steps > 0:
            found = False
            for p, a in self._off_their_racks(misplaced):
                if search.steps <= 0:
                    return
                alike = (
                    topic_of(p),
                    racks.replicas.get(p),
                    racks.member.get(a.name),
                    a.count,
                    a.tids,
                )
                if alike in failed:
                    continue
                search.floor = max(0, search.steps - STEPS_PER_PARTITION)
                if self._extend(search, _Chain(a, members={a.name}), p, a.name, 0):
                    found = True
                    failed.clear()
                else:
                    failed.add(alike)
            misplaced = [p for p in misplaced if racks.misplaced(owner.get(p), p)]

    def _off_their_racks(self, pids: Iterable[int]) -> Iterator[tuple[int, Member]]:
        """Each of ``pids`` that is off its racks when reached, with its holder, unless
        pinned there."""
        misplaced, owner, members = self._racks.misplaced, self._owner, self._members
        for p in pids:
            name = owner.get(p)
            if name is not None and misplaced(name, p):
                m = members[name]
                if p not in m.pinned:
                    yield p, m

    def _extend(self, search: _Search, chain: _Chain, q: int, x: str, gain: int) -> bool:
        """Try ``q`` from ``x`` to each subscriber of its topic, ``gain`` the partitions
        the chain has placed so far; whether a chain was applied."""
        misplaced, start = self._racks.misplaced, chain.start.name
        here = misplaced(x, q)
        subscribers = self._subscribers(search, topic_of(q))
        # Members where ``q`` is on its racks first: a chain that places early is short.
        for c in _placed_first(search, subscribers, lambda c: not misplaced(c, q)):
            if c == x or (c in chain.members and c != start):
                continue
            g = gain + here - misplaced(c, q)
            if g + CHAIN_MOVES - len(chain.links) - 1 <= 0:
                continue  # each further move places one more at most
            chain.links.append((q, x, c))
            chain.moved.add(q)
            if g > 0 and (
                self._apply_chain(search, chain.links)
                or (c != start and self._led_in(search, chain, g))
            ):
                return True
            if c != start and len(chain.links) < CHAIN_MOVES:
                chain.members.add(c)
                for r in self._kinds(search, c):
                    if r not in chain.moved and self._extend(search, chain, r, c, g):
                        return True
                chain.members.discard(c)
            chain.moved.discard(q)
            chain.links.pop()
        return False

    def _led_in(self, search: _Search, chain: _Chain, gain: int) -> bool:
        """The chain with a first move more, into its start: the start then keeps its
        count, and the member that gave to it trades counts with the chain's end."""
        a = chain.start
        misplaced = self._racks.misplaced
        givers = search.givers.get(a.name)
        if givers is None:
            subscribers = (self._subscribers(search, t) for t in a.tids)
            givers = search.givers[a.name] = sorted(set().union(*subscribers))
        for giver in givers:
            if not search.spend():
                return False
            if giver in chain.members:
                continue
            for r in self._kinds(search, giver):
                if topic_of(r) not in a.tids or r in chain.moved:
                    continue
                if gain + misplaced(giver, r) - misplaced(a.name, r) > 0:
                    chain.links.insert(0, (r, giver, a.name))
                    if self._apply_chain(search, chain.links):
                        return True
                    del chain.links[0]
        return False

    def _subscribers(self, search: _Search, t: int) -> list[str]:
        got = search.subscribers.get(t)
        if got is None:
            got = search.subscribers[t] = sorted(self._subs.get(t, ()))
        return got

    def _kinds(self, search: _Search, name: str) -> list[int]:
        """One partition of each kind ``name`` holds (topic, replica racks): any of a
        kind goes where the others would, at the same cost. Pinned ones stay."""
        got = search.kinds.get(name)
        if got is None:
            replicas, pinned = self._racks.replicas.get, self._members[name].pinned
            kinds: dict[tuple[int, frozenset[str] | None], int] = {}
            for q in self._pids_of(name):
                if q not in pinned:
                    kinds.setdefault((topic_of(q), replicas(q)), q)
            got = search.kinds[name] = list(kinds.values())
        return got

    def _apply_chain(self, search: _Search, links: Chain) -> bool:
        """Make the chain's moves; undo them if KIP-54 balance breaks at a member they
        touched (no other member's count or holding changed)."""
        search.spend(APPLY_STEPS)
        for q, _, c in links:
            self._move(q, c)
        touched = {n for _, x, c in links for n in (x, c)}
        members = self._members
        if any(self._find_donor(members[n]) or self._receiver_for(members[n]) for n in touched):
            for q, x, _ in reversed(links):
                self._move(q, x)
            return False
        self._rack_moved.update(q for q, _, _ in links)
        search.kinds.clear()
        return True
