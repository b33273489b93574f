"""Many records through one producer at once, packed into one batch per topic partition.

A ``send`` per record costs a coroutine, a partitioner call and an accumulator lookup
each; packing the records into a ``BatchBuilder`` per partition and sending each full
batch whole is about 4x cheaper (100 000 records: 1.8 s -> 0.48 s). Records are placed by
the Java client's partitioner (murmur2 of the key), so a key lands where any Kafka client
would put it and per-key order holds.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Iterable
from itertools import repeat
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder

_PARTITIONER = DefaultPartitioner()
#: Slots of one name remembered at most (16 MiB): a larger slot number is placed anew.
_MAX_SLOTS = 1 << 22


class Placements:
    """Where the partitioner put keys that come back, by a slot the caller names for each
    (a sampled topic and partition: its key is the same every poll). The partitioner is
    murmur2 in Python, ~8 µs a key, 0.8 s a poll of 100 000 partitions; a slot costs 4
    bytes. Forgotten when the destination's partitions change."""

    def __init__(self) -> None:
        self._parts: list[int] = []
        self._slots: dict[str, array[int]] = {}

    def place(self, parts: list[int], key: bytes, slot: tuple[str, int]) -> int:
        if parts != self._parts:
            self._parts, self._slots = parts, {}
        name, at = slot
        if not 0 <= at < _MAX_SLOTS:
            anew: int = _PARTITIONER(key, parts, parts)
            return anew
        placed = self._slots.get(name)
        if placed is None:
            placed = self._slots[name] = array("i")
        if at >= len(placed):
            placed.extend(repeat(-1, at + 1 - len(placed)))
        part = placed[at]
        if part < 0:
            part = placed[at] = _PARTITIONER(key, parts, parts)
        return part


class PackedSender:
    """Collects records for ``producer``; ``flush`` sends what is open and awaits every
    batch's acknowledgement. With ``placements``, a record added with a ``slot`` is
    placed where that slot's key went before."""

    def __init__(self, producer: AIOKafkaProducer, placements: Placements | None = None) -> None:
        self._producer = producer
        self._placements = placements
        self._partitions: dict[str, list[int]] = {}
        self._open: dict[tuple[str, int], BatchBuilder] = {}
        self._sent: list[asyncio.Future[Any]] = []
        self.records = 0

    async def add(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        slot: tuple[str, int] | None = None,
    ) -> None:
        await self.add_many(topic, ((key, value, slot),))

    async def add_many(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes | None, tuple[str, int] | None]],
    ) -> None:
        """``add`` of each ``(key, value, slot)``, in one loop: a poll's samples are
        100 000 records, and a call each cost a tenth of their writing."""
        parts = self._partitions.get(topic)
        if parts is None:
            parts = self._partitions[topic] = sorted(await self._producer.partitions_for(topic))
        placements, opened = self._placements, self._open
        added = 0
        for key, value, slot in records:
            if slot is not None and key is not None and placements is not None:
                part = placements.place(parts, key, slot)
            else:
                part = _PARTITIONER(key, parts, parts)
            builder = opened.get((topic, part))
            if builder is None or builder.append(key=key, value=value, timestamp=None) is None:
                if builder is not None:  # full: send it, start the next
                    sent = await self._producer.send_batch(builder, topic, partition=part)
                    self._sent.append(sent)
                builder = opened[topic, part] = self._producer.create_batch()
                builder.append(key=key, value=value, timestamp=None)
            added += 1
        self.records += added

    async def flush(self) -> None:
        """Send the open batches and wait for all; raises the first delivery error."""
        for (topic, part), builder in self._open.items():
            self._sent.append(await self._producer.send_batch(builder, topic, partition=part))
        self._open.clear()
        sent, self._sent = self._sent, []
        await asyncio.gather(*sent)
