"""The constraints topic: what operators set through the admin API outlives the replica
that took it. Compacted, keyed by group; the record with the highest (controller epoch,
sequence) counts (``constraints_newer``), so a deposed leader's late write loses to its
successor's and a replayed record to the one that followed it, ties included. A takeover
reads it beside the assignments topic."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as KafkaTP

from controller.adapters.connection import client_options
from controller.adapters.metadata_scope import track_when_idle
from controller.config import Config
from controller.runtime.assignment_log import assigned_reader, catch_up, read_to_end
from controller.wire.assignments import int_header
from controller.wire.records import (
    SEQUENCE_HEADER,
    ConstraintsRecord,
    DecodeError,
    constraints_newer,
    decode,
)
from controller.wire.signing import Signer, Verifier


class ConstraintStore:
    """Only configured groups' records are kept (bounded whatever keys arrive), and with
    a ``verifier`` only the records it accepts count; a ``signer`` signs what is saved."""

    def __init__(
        self,
        cfg: Config,
        on_invalid: Callable[[str], None],
        signer: Signer | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self._cfg = cfg
        self._on_invalid = on_invalid
        self._signer = signer
        self._verifier = verifier
        self._groups = frozenset(g.name for g in cfg.groups)
        self._records: dict[str, ConstraintsRecord] = {}
        #: group -> the held record's sequence header (None: an older controller's).
        self._sequences: dict[str, int | None] = {}
        #: group -> (epoch, the last sequence this replica numbered in it).
        self._numbered: dict[str, tuple[int, int]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._tps: list[KafkaTP] = []
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def catch_up(self, idle: float = 0.3) -> dict[str, ConstraintsRecord]:
        """Every group's constraints as written up to now (our own acknowledged writes
        included); read from the beginning once, then only what is new."""
        async with self._lock:
            topic = self._cfg.assignments.constraints_topic
            if self._consumer is None:
                self._consumer, self._tps = await assigned_reader(
                    client_options(self._cfg), topic, f"{self._cfg.kafka.client_id}-constraints"
                )
                messages = await read_to_end(self._consumer, self._tps, idle)
            else:
                messages = await catch_up(self._consumer, self._tps, idle)
            for msg in messages:
                self._take(msg)
            return dict(self._records)

    def _take(self, msg: Any) -> None:
        key: bytes | None = msg.key
        value: bytes | None = msg.value
        source = f"{msg.topic}[{msg.partition}]@{msg.offset} key {(key or b'')[:80]!r}"
        try:
            headers = list(msg.headers or ())
            if self._verifier is not None:
                problem = self._verifier.problem("constraints", key or b"", value, headers)
                if problem is not None:
                    raise DecodeError(source, problem)
            if value is None:  # a tombstone: clears a group's overrides
                if key:
                    group = key.decode(errors="replace")
                    self._records.pop(group, None)
                    self._sequences.pop(group, None)
                return
            record = decode(ConstraintsRecord, value, source)
            if key != record.group.encode():
                raise DecodeError(source, f"key disagrees with group {record.group!r}")
            sequence = int_header(dict(headers).get(SEQUENCE_HEADER), SEQUENCE_HEADER, source)
        except DecodeError as exc:
            self._on_invalid(str(exc))
            return
        if record.group not in self._groups:
            return
        held, after = self._records.get(record.group), self._sequences.get(record.group)
        if constraints_newer(record, sequence, held, after):
            self._records[record.group] = record
            self._sequences[record.group] = sequence
        elif (record, sequence) != (held, after):  # not our own write read back
            assert held is not None
            self._on_invalid(
                f"{source}: epoch {record.controller_epoch} sequence {sequence} is not newer "
                f"than the record held (epoch {held.controller_epoch} sequence {after}): a "
                "replayed or deposed write, ignored"
            )

    def _number(self, record: ConstraintsRecord) -> int:
        """The next sequence of ``record``'s tenure: above what this replica numbered and
        what the topic holds in the same epoch."""
        epoch = record.controller_epoch
        last = self._numbered.get(record.group, (epoch, 0))
        after = last[1] if last[0] == epoch else 0
        held = self._records.get(record.group)
        if held is not None and held.controller_epoch == epoch:
            after = max(after, self._sequences.get(record.group) or 0)
        self._numbered[record.group] = (epoch, after + 1)
        return after + 1

    def encoded(
        self, record: ConstraintsRecord
    ) -> tuple[int, bytes, bytes, list[tuple[str, bytes]]]:
        """``record``'s sequence, and the key, value and headers it is written with."""
        sequence = self._number(record)
        key, value = record.group.encode(), record.encode()
        headers = [(SEQUENCE_HEADER, str(sequence).encode())]
        if self._signer is not None:
            headers = self._signer.sign("constraints", key, value, headers)
        return sequence, key, value, headers

    async def save(self, record: ConstraintsRecord) -> None:
        """Numbered, then written and acknowledged by every in-sync replica before it is
        acted on."""
        sequence, key, value, headers = self.encoded(record)
        if self._producer is None:
            producer = AIOKafkaProducer(
                **client_options(self._cfg),
                client_id=f"{self._cfg.kafka.client_id}-constraints",
                acks="all",
                enable_idempotence=self._cfg.kafka.idempotent_producer,
                request_timeout_ms=int(self._cfg.kafka.request_timeout * 1000),
            )
            try:
                await producer.start()
            except BaseException:
                await producer.stop()  # a failed start leaves its client open
                raise
            track_when_idle(producer, self._cfg.assignments.constraints_topic)
            self._producer = producer
        topic = self._cfg.assignments.constraints_topic
        await self._producer.send_and_wait(topic, value, key=key, headers=headers)
        self._records[record.group] = record
        self._sequences[record.group] = sequence

    async def stop(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()
