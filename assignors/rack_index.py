"""Racks inside the incremental engine: who is on which rack, where each partition's
replicas are, and where the misplaced partitions sit, so that finding a swap partner
costs a lookup, not a scan of the group.

A partition is *misplaced* when its holder declares a rack that holds none of its
replicas (Kafka's cross-rack count). The engine aligns by count-neutral swaps: every
member keeps its count, so KIP-54 balance is untouched, and each swap makes at least one
more partition local. Partners, best first, for ``p`` misplaced at ``A`` (rack ``r``)
that has a replica on rack ``s``:

1. a partition misplaced on rack ``s`` with a replica on ``r``: both become local;
2. any partition misplaced on rack ``s``: ``p`` becomes local, the partner stays
   misplaced, as it was;
3. a partition local on ``s`` that is local on ``r`` too: moves, and stays local;
4. a partition with a replica on ``r`` held by a member without a rack: ``p`` goes
   there, where nothing counts as off a rack (Kafka's count), and the partner becomes
   local. The fresh rack deal routes any layout to such members for the same reason;
   without this kind, a rackless member holding what a racked one needs kept it.

Within kinds 1 and 2, partitions that moved in the same step come first: trading those
between their receivers costs no movement at all, so a step's moved partitions land on
their receivers' racks before any partition that stayed put is disturbed. Kinds 3 and 4
scan members' partitions, so they are searched only where some partition's replicas
allow them (every replica on one zone, or none known, allows neither).

The misplaced indexes are kept lazily: an entry is added whenever the engine sees a
partition misplaced (every move and every rack change passes by), and dropped when a
lookup finds it no longer true. Pids are ints (see ``ids.py``); dicts serve as ordered
sets, so lookups are deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from itertools import islice

_NONE: frozenset[str] = frozenset()
#: Index entries examined per lookup, and members of a rack scanned for kind 3.
_SCAN = 256
_MEMBERS = 8

#: ``fits(b, q)``: whether ``q`` (held by ``b``) may trade places with the partition
#: being aligned (subscriptions, lag cap). ``entries(b)``: ``b``'s pids.
Fits = Callable[[str, int], bool]


class Misplaced:
    """Pids misplaced by (holder rack, a replica rack), and by holder rack: partners of
    kinds 1 and 2. Entries may be stale; lookups drop them."""

    __slots__ = ("one", "two")

    def __init__(self) -> None:
        self.two: dict[tuple[str, str], dict[int, None]] = {}
        self.one: dict[str, dict[int, None]] = {}

    def add(self, pid: int, rack: str, racks: frozenset[str]) -> None:
        self.one.setdefault(rack, {})[pid] = None
        for r in racks:
            self.two.setdefault((rack, r), {})[pid] = None


class RackIndex:
    def __init__(self) -> None:
        self.member: dict[str, str] = {}
        self.on_rack: dict[str, dict[str, None]] = {}
        self.replicas: dict[int, frozenset[str]] = {}
        #: How many partitions have each layout, and the rack pairs some layout holds
        #: both of (``(r, r)``: some layout holds ``r``), made when first needed: a
        #: partner kind that needs a layout no partition has is not searched for.
        self._layouts: Counter[frozenset[str]] = Counter()
        self._pairs: set[tuple[str, str]] | None = None
        #: Members known to have no rack: partners of kind 4.
        self.rackless: dict[str, None] = {}
        self._misplaced = Misplaced()

    def __bool__(self) -> bool:
        return bool(self.member)

    def set_member(self, name: str, rack: str | None) -> bool:
        """Record ``name``'s rack (``None``: it has none); whether it changed."""
        old = self.member.get(name)
        changed = old != rack
        if changed and old is not None:
            self.drop_member(name)
        if rack is None:
            self.rackless[name] = None
        elif changed:
            self.rackless.pop(name, None)
            self.member[name] = rack
            self.on_rack.setdefault(rack, {})[name] = None
        return changed

    def drop_member(self, name: str) -> None:
        self.rackless.pop(name, None)
        rack = self.member.pop(name, None)
        if rack is not None:
            peers = self.on_rack[rack]
            del peers[name]
            if not peers:
                del self.on_rack[rack]

    def set_partition(self, pid: int, racks: frozenset[str]) -> None:
        old = self.replicas.pop(pid, None)
        if old is not None:
            self._layouts[old] -= 1
            if not self._layouts[old]:
                del self._layouts[old]
                self._pairs = None
        if racks:
            self.replicas[pid] = racks
            if not self._layouts[racks]:
                self._pairs = None
            self._layouts[racks] += 1

    def adopt_partitions(self, pids: Iterable[int], racks: Iterable[frozenset[str]]) -> None:
        """The replica racks of many partitions at once (a build: none known before)."""
        self.replicas.update((pid, named) for pid, named in zip(pids, racks, strict=True) if named)
        self._layouts = Counter(self.replicas.values())
        self._pairs = None

    def layout_count(self) -> int:
        """Distinct replica layouts, with "none known" one of them."""
        return len(self._layouts) + 1

    def _shares(self, a: str, b: str) -> bool:
        """Some partition has replicas on both racks ``a`` and ``b`` (the same rack: on it)."""
        if self._pairs is None:
            self._pairs = {(r, s) for layout in self._layouts for r in layout for s in layout}
        return (a, b) in self._pairs

    def misplaced(self, holder: str | None, pid: int) -> bool:
        rack = self.member.get(holder) if holder is not None else None
        return rack is not None and rack not in self.replicas.get(pid, _NONE)

    def note(self, pid: int, holder: str, into: Misplaced | None = None) -> None:
        """Index ``pid`` (in ``into``, by default the group's index) if it is misplaced
        at ``holder``."""
        rack = self.member.get(holder)
        if rack is None:
            return
        racks = self.replicas.get(pid, _NONE)
        if rack not in racks:
            (self._misplaced if into is None else into).add(pid, rack, racks)

    def partner(
        self,
        a: str,
        p: int,
        owner: Callable[[int], str | None],
        fits: Fits,
        entries: Callable[[str], Iterable[int]],
        *,
        moved: Misplaced | None = None,
    ) -> int | None:
        """The best swap partner for ``p``, misplaced at ``a``, or None; of each kind,
        one of ``moved`` (this step's) first."""
        r = self.member[a]
        wanted = sorted(s for s in self.replicas.get(p, _NONE) if s in self.on_rack)
        replicas = self.replicas
        indexes = (self._misplaced,) if moved is None else (moved, self._misplaced)
        for index in indexes:
            for s in wanted:
                q = self._lookup(
                    index.two.get((s, r)), s, owner, fits, lambda q: r in replicas.get(q, _NONE)
                )
                if q is not None:
                    return q
        for index in indexes:
            for s in wanted:
                q = self._lookup(index.one.get(s), s, owner, fits, lambda q: True)
                if q is not None:
                    return q
        for s in wanted:
            if not self._shares(s, r):
                continue  # no partition is local to both racks
            for b in list(self.on_rack[s])[:_MEMBERS]:
                for q in list(entries(b))[:_SCAN]:
                    both = replicas.get(q, _NONE)
                    if s in both and r in both and fits(b, q):
                        return q
        if not self._shares(r, r):
            return None  # no partition is local to ``a``'s rack
        for b in islice(self.rackless, _MEMBERS):
            for q in list(entries(b))[:_SCAN]:
                if r in replicas.get(q, _NONE) and fits(b, q):
                    return q
        return None

    def _lookup(
        self,
        index: dict[int, None] | None,
        s: str,
        owner: Callable[[int], str | None],
        fits: Fits,
        also: Callable[[int], bool],
    ) -> int | None:
        """The first entry still misplaced on rack ``s`` that ``also`` and ``fits``
        accept; entries no longer misplaced there are dropped on the way."""
        if not index:
            return None
        stale: list[int] = []
        found: int | None = None
        for seen, q in enumerate(index):
            if seen >= _SCAN:
                break
            b = owner(q)
            if b is None or self.member.get(b) != s or s in self.replicas.get(q, _NONE):
                stale.append(q)
            elif also(q) and fits(b, q):
                found = q
                break
        for q in stale:
            del index[q]
        if found is not None:
            del index[found]
        return found
