"""A plan's records as they go on the assignments topic: keys, values, the generation and
epoch headers, and the controller's signature. Pure: the publisher writes them."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import NamedTuple

from assignors import TopicPartition
from controller.core.handoff import Outgoing
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER
from controller.wire.records import Assignment, assignment_key
from controller.wire.signing import Signer


class Encoded(NamedTuple):
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


def encode_plan(
    group: str,
    epoch: int,
    generation: int,
    records: Iterable[Outgoing],
    topics_of: Callable[[str], frozenset[str] | None],
    *,
    issued_at: float,
    wall_clock: Callable[[float], float],
    signer: Signer | None = None,
) -> list[Encoded]:
    """A plan's records as they go on the assignments topic, signed with ``signer`` when
    given. ``wall_clock`` turns the state clock of ``absent_since`` into Unix time.

    Built without validation (``model_construct``): everything in them comes from
    validated input, and validating a thousand records of our own on every mass change
    would triple the encoding time. Every reader validates what it decodes."""
    # Headers date tombstones too (their value must stay null for compaction).
    headers = [(GENERATION_HEADER, str(generation).encode()), (EPOCH_HEADER, str(epoch).encode())]
    out = []
    for rec in records:
        value = None
        if rec.partitions is not None:
            value = Assignment.model_construct(
                group=group,
                member=rec.member,
                generation=generation,
                controller_epoch=epoch,
                # TopicPartitions are (topic, partition) tuples: serialized as they are.
                partitions=_as_list(rec.partitions, rec.listed),
                revoking=sorted(rec.revoking),
                topics=sorted(topics_of(rec.member) or ()),
                issued_at=issued_at,
                absent_since=None if rec.absent_since is None else wall_clock(rec.absent_since),
                instance=rec.instance,
            ).encode()
        key = assignment_key(group, rec.member)
        if signer is None:
            out.append(Encoded(key, value, headers))
        else:
            out.append(Encoded(key, value, signer.sign("assignments", key, value, headers)))
    return out


def _as_list(
    partitions: Collection[TopicPartition], listed: Sequence[TopicPartition] | None
) -> list[TopicPartition]:
    """The grant as the schema's list: the assignor's own list as it is (no copy of a
    large grant), anything else sorted (a drained member's empty tuple included)."""
    return listed if isinstance(listed, list) else sorted(partitions)
