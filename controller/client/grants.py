"""What a member makes of the records of its partition of the assignments topic, whatever
Kafka client reads them: each binding hands over the records it fetched, in offset order,
and gets back what to hold next.

Only the member's own key and its group's fence markers matter. A record from a fenced
controller, a malformed one, or (with a verifier) an unsigned one counts for nothing; a
grant issued to another process under the same member id (its predecessor's, before the
controller has seen this one) reads as holding nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from prometheus_client import Counter

from controller import logs
from controller.errors import UnreachableError
from controller.wire.assignments import log_entry
from controller.wire.fencing import AssignmentView, Verdict
from controller.wire.records import LoggedFence, LoggedRecord, assignment_key, fence_key
from controller.wire.signing import Verifier

log = logs.get("ballast.client")

#: A topic partition as ``(topic, partition)``: no client library's type.
Partition = tuple[str, int]

INVALID_RECORDS = Counter(
    "ballast_client_invalid_records_total",
    "Records of the assignments topic a managed consumer skipped: malformed, or not "
    "signed by the controller's key when one is configured.",
    ["source"],
)


def topic_missing(topic: str, waited: float) -> UnreachableError:
    """What a member says when the assignments topic never appeared."""
    return UnreachableError(
        f"assignments topic {topic!r} not found after {waited:g} s: start the controller "
        "first (`ballast run` creates it), or check the member's assignments_topic"
    )


class RawRecord(NamedTuple):
    """A record as any Kafka client hands it over (aiokafka's ``ConsumerRecord`` has the
    same fields)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]


class Grant(NamedTuple):
    """What to hold next, and the generation that applying it acknowledges (None:
    nothing new to acknowledge)."""

    partitions: frozenset[Partition]
    generation: int | None


class GrantReader:
    def __init__(
        self,
        group: str,
        member: str,
        instance: str,
        *,
        verifier: Verifier | None = None,
        on_invalid: Callable[[str], None] | None = None,
    ) -> None:
        """``instance``: this process; a skipped record is counted and logged, and
        ``on_invalid`` told why."""
        self.group = group
        self.member = member
        self._instance = instance
        self._key = assignment_key(group, member)
        self._fence_key = fence_key(group)
        self._verifier = verifier
        self._on_invalid = on_invalid
        self._view = AssignmentView()
        #: Highest controller epoch seen for the group.
        self.epoch = -1

    @property
    def key(self) -> bytes:
        """The member's key: its partition of the topic is the one this key hashes to."""
        return self._key

    def _invalid(self, why: str) -> None:
        INVALID_RECORDS.labels("assignment").inc()
        log.warning("invalid_assignment_record", member=self.member, reason=why)
        if self._on_invalid is not None:
            self._on_invalid(why)

    def read(self, record: RawRecord) -> Grant | None:
        """The grant ``record`` makes current, if it makes one."""
        if record.key not in (self._key, self._fence_key):
            return None
        entry = log_entry(record, self._invalid, self._verifier)
        if entry is None or entry.group != self.group:
            return None
        verdict = self._view.add(entry)
        if verdict is Verdict.FENCED:
            log.warning(
                "fenced_record_ignored",
                member=self.member,
                offset=record.offset,
                current=self.epoch,
            )
        if isinstance(entry, LoggedFence):
            self.epoch = max(self.epoch, entry.epoch)
        if verdict is not Verdict.CURRENT or not isinstance(entry, LoggedRecord):
            return None
        epoch, generation, _ = self._view.order[(self.group, self.member)]
        self.epoch = max(self.epoch, epoch)
        rec = entry.record
        if rec is not None and rec.issued_to(self._instance):
            return Grant(frozenset(rec.partitions), generation)
        # Our tombstone, or a grant issued to another process under our member id (our
        # predecessor's, until the controller has seen us): hold nothing, ack nothing.
        return Grant(frozenset(), None)
