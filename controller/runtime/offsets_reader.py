"""Committed offsets of the fleet's group, end and beginning offsets of its partitions,
partition counts: the lag poll's reads, on a loop of their own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from assignors import TopicPartition
from controller import logs
from controller.adapters.connection import client_options
from controller.adapters.metadata import topic_metadata
from controller.adapters.metadata_scope import track_topics, track_when_idle
from controller.adapters.offsets import (
    committed_offsets,
    committed_through_coordinator,
    list_offsets,
)
from controller.adapters.side_loop import SideLoop
from controller.config import Config
from controller.wire.metadata import TopicMetadata
from controller.wire.offsets import EARLIEST, LATEST, Offsets, PartitionOffsets
from controller.wire.raw_answers import RawDecodeError

log = logs.get("ballast.controller")


class OffsetReader:
    """Committed offsets of the fleet's group, end/beginning offsets, partition counts.

    Its clients run on a loop of their own (``side_loop``): their answers name every
    partition of the group, and aiokafka decodes them where it reads them."""

    def __init__(self, cfg: Config, commit_group: str) -> None:
        self._cfg = cfg
        self._group = commit_group
        self._side = SideLoop(f"ballast-offsets-{commit_group}")
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._admin_offsets = True

    async def start(self) -> None:
        self._side.start()
        try:
            await self._side.run(self._start())
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if not self._side.running:
            return
        try:
            await self._side.run(self._stop())
        finally:
            await self._side.stop()

    async def topic_metadata(self, topics: Iterable[str]) -> TopicMetadata:
        return await self._side.run(topic_metadata(self._started()[1], topics))

    async def offsets(
        self, partitions_per_topic: Mapping[str, int], with_start: bool
    ) -> dict[TopicPartition, PartitionOffsets]:
        """Committed, end and (when asked) beginning offsets of every partition."""
        return await self._side.run(self._offsets(partitions_per_topic, with_start))

    # ------------------------------------------------------------------ on the side loop

    async def _start(self) -> None:
        cfg = self._cfg
        self._consumer = AIOKafkaConsumer(
            **client_options(cfg),
            client_id=f"{cfg.kafka.client_id}-lag",
            group_id=self._group,  # never subscribes: it only reads the group's commits
            enable_auto_commit=False,
        )
        self._admin = AIOKafkaAdminClient(
            **client_options(cfg), client_id=f"{cfg.kafka.client_id}-admin"
        )
        # Together: a takeover waits for this start (after its reads of the log). Both end
        # before a failure is raised, so ``stop`` never races a start still connecting.
        started = await asyncio.gather(
            self._consumer.start(), self._admin.start(), return_exceptions=True
        )
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        # Only a topic that exists: a refresh may create what it names, and a reader
        # started outside the daemon (which creates the topic first) must not.
        mine = cfg.assignments.name
        if mine in (await topic_metadata(self._admin, [mine])).counts:
            for client in (self._consumer, self._admin):  # neither assigns nor sends
                track_when_idle(client, mine)

    async def _stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()

    def _started(self) -> tuple[AIOKafkaConsumer, AIOKafkaAdminClient]:
        if self._consumer is None or self._admin is None:
            raise RuntimeError("OffsetReader used before start()")
        return self._consumer, self._admin

    async def _committed(self, ppt: Mapping[str, int]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets: one OffsetFetch through the admin client, read
        from its bytes; what it cannot answer goes through the consumer's coordinator
        (every partition in one request: one per partition took 15 s for 100 000), and
        everything does once a broker rejected the admin request (Tansu did)."""
        consumer, admin = self._started()
        found: dict[TopicPartition, int | None] = {}
        again: list[TopicPartition] | None = None  # None: every partition
        if self._admin_offsets:
            try:
                got = await committed_offsets(admin, self._group, ppt)
            except (KafkaError, OSError, TimeoutError, RawDecodeError) as exc:
                log.info("offset_fetch_fallback", group=self._group, error=repr(exc))
                self._admin_offsets = False
            else:
                if not got.error:
                    found = {tp: (o if o >= 0 else None) for tp, o in got.found.items()}
                    again = got.failed
        asked = [KafkaTP(t, p) for t, p in (_every(ppt) if again is None else again)]
        if asked:
            for tp, offset in (await committed_through_coordinator(consumer, asked)).items():
                found[TopicPartition(tp.topic, tp.partition)] = offset
        return found

    async def _listed(self, ppt: Mapping[str, int], timestamp: int) -> dict[TopicPartition, int]:
        """End (or start) offsets, one ListOffsets per leader read from its bytes; what
        that cannot answer goes through aiokafka, which retries and refreshes leaders."""
        consumer = self._started()[0]
        try:
            got = await list_offsets(consumer, ppt, timestamp)
        except (KafkaError, OSError, TimeoutError, RawDecodeError) as exc:
            log.info("list_offsets_fallback", group=self._group, error=repr(exc))
            got = Offsets({}, list(_every(ppt)))
        if got.failed:
            asked = [KafkaTP(tp.topic, tp.partition) for tp in got.failed]
            slow = consumer.end_offsets if timestamp == LATEST else consumer.beginning_offsets
            for tp, offset in (await slow(asked)).items():
                got.found[TopicPartition(tp.topic, tp.partition)] = offset
        return got.found

    async def _offsets(
        self, partitions_per_topic: Mapping[str, int], with_start: bool
    ) -> dict[TopicPartition, PartitionOffsets]:
        consumer = self._started()[0]
        ppt = {t: n for t, n in sorted(partitions_per_topic.items()) if n > 0}
        if not ppt:
            return {}
        await track_topics(consumer, ppt)
        committed = await self._committed(ppt)
        ends = await self._listed(ppt, LATEST)
        begins = await self._listed(ppt, EARLIEST) if with_start else {}
        return _joined(list(_every(ppt)), committed, ends, begins)


#: Entries joined per C call: each call holds the GIL (on the reader's thread) until done.
_JOIN_CHUNK = 8192


def _joined(
    every: list[TopicPartition],
    committed: Mapping[TopicPartition, int | None],
    ends: Mapping[TopicPartition, int],
    begins: Mapping[TopicPartition, int],
) -> dict[TopicPartition, PartitionOffsets]:
    """One ``PartitionOffsets`` per partition, built in C (through the named tuple's
    Python constructor 100 000 cost 0.13 s a poll here), a chunk at a time so the
    controller's thread gets the interpreter in between."""
    out: dict[TopicPartition, PartitionOffsets] = {}
    done, end, start, new = committed.get, ends.get, begins.get, tuple.__new__
    for at in range(0, len(every), _JOIN_CHUNK):
        tps = every[at : at + _JOIN_CHUNK]
        read = zip(map(done, tps), map(end, tps, repeat(0)), map(start, tps), strict=True)
        out.update(zip(tps, map(new, repeat(PartitionOffsets), read), strict=True))
    return out


def _every(ppt: Mapping[str, int]) -> Iterator[TopicPartition]:
    new = tuple.__new__
    return (new(TopicPartition, (t, p)) for t, n in ppt.items() for p in range(n))
