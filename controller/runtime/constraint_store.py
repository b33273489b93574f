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
from controller.wire.records import ConstraintsRecord, DecodeError, constraints_newer, decode
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
            if self._verifier is not None:
                headers = list(msg.headers or ())
                problem = self._verifier.problem("constraints", key or b"", value, headers)
                if problem is not None:
                    raise DecodeError(source, problem)
            if value is None:  # a tombstone: clears a group's overrides
                if key:
                    self._records.pop(key.decode(errors="replace"), None)
                return
            record = decode(ConstraintsRecord, value, source)
            if key != record.group.encode():
                raise DecodeError(source, f"key disagrees with group {record.group!r}")
        except DecodeError as exc:
            self._on_invalid(str(exc))
            return
        if record.group not in self._groups:
            return
        held = self._records.get(record.group)
        if constraints_newer(record, held):
            self._records[record.group] = record
        elif record != held:  # not our own write read back: a replay, or a deposed write
            assert held is not None
            self._on_invalid(
                f"{source}: epoch {record.controller_epoch} sequence {record.sequence} is not "
                f"newer than the record held (epoch {held.controller_epoch} sequence "
                f"{held.sequence}): a replayed or deposed write, ignored"
            )

    def _number(self, record: ConstraintsRecord) -> ConstraintsRecord:
        """``record`` with the next sequence of its tenure: above what this replica
        numbered and what the topic holds in the same epoch."""
        epoch = record.controller_epoch
        last = self._numbered.get(record.group, (epoch, 0))
        held = self._records.get(record.group)
        after = last[1] if last[0] == epoch else 0
        if held is not None and held.controller_epoch == epoch:
            after = max(after, held.sequence or 0)
        self._numbered[record.group] = (epoch, after + 1)
        return record.model_copy(update={"sequence": after + 1})

    def encoded(
        self, record: ConstraintsRecord
    ) -> tuple[ConstraintsRecord, bytes, bytes, list[tuple[str, bytes]]]:
        """``record`` numbered, and the key, value and headers it is written with."""
        record = self._number(record)
        key, value = record.group.encode(), record.encode()
        headers = [] if self._signer is None else self._signer.sign("constraints", key, value)
        return record, key, value, headers

    async def save(self, record: ConstraintsRecord) -> None:
        """Numbered, then written and acknowledged by every in-sync replica before it is
        acted on."""
        record, key, value, headers = self.encoded(record)
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

    async def stop(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()
