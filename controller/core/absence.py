"""Members whose presence was lost: when each is declared gone (its leave grace), and
when its absence is written into its record.

A short absence (a rolling restart) ends before it is recorded and costs no record; a
long one is recorded at half the grace, so a replica that takes over mid-grace counts
from when the member was last seen, not from its own start.
"""

from __future__ import annotations

from controller.core.deadlines import Deadlines


class Absences:
    def __init__(self, grace: float) -> None:
        self._grace_seconds = grace
        #: member -> when it is declared gone unless it comes back.
        self._gone_at: Deadlines[str] = Deadlines()
        #: member -> when it was last seen, written into its record at ``_record_at``.
        self._unrecorded: dict[str, float] = {}
        self._record_at: Deadlines[str] = Deadlines()

    def __contains__(self, member: object) -> bool:
        """Is ``member`` in its leave grace?"""
        return member in self._gone_at

    def deadline(self, member: str) -> float | None:
        """When ``member`` is declared gone, if it is in its grace."""
        return self._gone_at.get(member)

    def lost(self, member: str, seen: float, now: float, *, recorded: bool = False) -> None:
        """``member`` was last seen at ``seen``: its grace starts there. ``recorded``: its
        record already says so (a recovered member), nothing to write."""
        self._gone_at.set(member, seen + self._grace_seconds)
        if not recorded:
            self._unrecorded[member] = seen
            self._record_at.set(member, now + self._grace_seconds / 2)

    def seen_since(self, member: str, since: float) -> bool:
        """Another source saw ``member`` leave at ``since``: its grace counts from there
        if that is earlier. False when it is in no grace."""
        deadline = self._gone_at.get(member)
        if deadline is None:
            return False
        self._gone_at.set(member, min(deadline, since + self._grace_seconds))
        if member in self._unrecorded:
            self._unrecorded[member] = since
        return True

    def back(self, member: str) -> None:
        """``member`` is heard again: no grace, nothing to record."""
        self._gone_at.pop(member)
        self.recorded(member)

    def departed(self, member: str) -> None:
        """``member`` departs for good: its grace ends; an absence already due to be
        recorded still is (its record says when it was last seen)."""
        self._gone_at.pop(member)

    def recorded(self, member: str) -> None:
        """No absence of ``member`` is waiting to be recorded any more."""
        self._unrecorded.pop(member, None)
        self._record_at.pop(member)

    def to_record(self, now: float) -> list[tuple[str, float]]:
        """The absences due to be written, with when each member was last seen."""
        return [(m, self._unrecorded.pop(m)) for m, _ in self._record_at.due(now)]

    def expired(self, now: float) -> list[tuple[str, float]]:
        """The members whose grace ended, with when it ended."""
        gone = list(self._gone_at.due(now))
        for member, _ in gone:
            self.recorded(member)
        return gone

    def earliest(self) -> float | None:
        """The next time ``to_record`` or ``expired`` has something."""
        times = (self._gone_at.earliest(), self._record_at.earliest())
        return min((t for t in times if t is not None), default=None)
