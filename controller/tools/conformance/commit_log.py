"""When the broker stored a group's offset commits, read from ``__consumer_offsets``: the
one account of a commit's time that no client can shade. A commit stored after the
acknowledgement that gave its partition up is one the next owner may miss. Offsets
fetched once the kit has noticed the acknowledgement cannot see a commit that lands
within the kit's own delay in noticing it (tens of milliseconds on a loaded machine, more
than a client that commits 20 ms late needs); the commit's stored time can. Only the two
partitions of ``__consumer_offsets`` that hold the group's and the probe group's commits
are read, not every group's on the broker.

The broker's clock is not the kit's (the client runs on the kit's machine, so its clock
is). ``open`` bounds the difference by committing to a probe group of its own a few times
and reading back when each commit was stored: a commit counts as after an
acknowledgement only when it is for every difference within those bounds. A broker whose
``__consumer_offsets`` the kit may not read (an ACL, a broker without one, Tansu's that
stays empty) gives no evidence here; the fetched offsets still judge.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from controller.wire.raw_answers import I16, I32, RawDecodeError, read_string

OFFSETS_TOPIC = "__consumer_offsets"
#: Round trips that bound the broker's clock against the kit's; the tightest counts.
PROBES = 5
#: Commits kept per group: a scenario makes a few dozen.
MAX_KEPT = 10_000
#: How long a probe's commit may take to appear in the log. Kafka has written it before
#: it answers the commit; Tansu lists the topic but keeps commits elsewhere, and waiting
#: out the whole step (30 s) for each scenario made the spec member's run there 5 min.
SEEN_WITHIN = 2.0


I64 = struct.Struct(">q")


def _compact_string_end(data: bytes, at: int) -> int:
    """Where a flexible version's non-null string (unsigned varint length + 1) ends."""
    length = shift = 0
    while True:
        byte = data[at]
        at += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 28:
            raise RawDecodeError("a length longer than 5 bytes")
    if length == 0 or at + length - 1 > len(data):
        raise RawDecodeError("a string runs past the end of the record")
    return at + length - 1


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition that holds ``group``'s commits, as Kafka's
    coordinator places it: ``Utils.abs(group.hashCode()) % partitions`` (Java's hash over
    UTF-16 code units, 32-bit)."""
    units = group.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return 0 if signed == -(1 << 31) else abs(signed) % partitions


@dataclass(frozen=True, slots=True)
class Commit:
    group: str
    topic: str
    partition: int
    offset: int
    #: When the broker stored it, by the broker's clock (s).
    stored_at: float


def parse(key: bytes | None, value: bytes | None) -> Commit | None:
    """The offset commit a ``__consumer_offsets`` record holds; None for any other record
    (group metadata, KIP-848 group records, a deleted commit) and for bytes that do not
    parse as one (key versions 0-1, value versions 0-4)."""
    if key is None or value is None:
        return None
    try:
        (version,) = I16.unpack_from(key, 0)
        if version not in (0, 1):
            return None
        group, at = read_string(key, 2)
        topic, at = read_string(key, at)
        (partition,) = I32.unpack_from(key, at)
        (version,) = I16.unpack_from(value, 0)
        if not 0 <= version <= 4 or group is None or topic is None:
            return None
        (offset,) = I64.unpack_from(value, 2)
        at = 14 if version >= 3 else 10  # past the leader epoch from version 3
        at = _compact_string_end(value, at) if version == 4 else read_string(value, at)[1]
        (stored_ms,) = I64.unpack_from(value, at)
    except (struct.error, ValueError, IndexError):  # RawDecodeError and bad UTF-8 too
        return None
    return Commit(group, topic, partition, offset, stored_ms / 1000)


@dataclass
class CommitLog:
    """The commits of ``group`` from the moment ``open`` returns, and the bounds on the
    broker's clock minus the kit's (``skew``: None until measured)."""

    bootstrap: str
    group: str
    #: A topic that exists, for the probe group's commits.
    probe_topic: str
    commits: list[Commit] = field(default_factory=list)
    skew: tuple[float, float] | None = None
    _probes: list[Commit] = field(default_factory=list)
    _reader: AIOKafkaConsumer | None = None
    _task: asyncio.Task[None] | None = None

    @property
    def probe_group(self) -> str:
        return f"{self.group}-clock"

    async def open(self, timeout: float) -> bool:
        """Whether the log can be read and the clocks were bounded within ``timeout``."""
        probe = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.probe_group)
        try:
            async with asyncio.timeout(timeout):
                await probe.start()
                probe.assign([TopicPartition(self.probe_topic, 0)])  # what aiokafka commits
                # Asking the coordinator anything makes the broker create the topic.
                await probe.committed(TopicPartition(self.probe_topic, 0))
                await self._follow()
                await self._bound_clock(probe)
        except (TimeoutError, KafkaError, OSError):
            await self.close()
            return False
        finally:
            with contextlib.suppress(KafkaError):
                await probe.stop()
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError):
                await self._task
            self._task = None
        if self._reader is not None:
            with contextlib.suppress(KafkaError):
                await self._reader.stop()
            self._reader = None

    def stored_after(self, topic: str, partition: int, at: float) -> list[Commit]:
        """Commits of ``topic``/``partition`` stored after kit time ``at``, whatever the
        clocks' difference within the measured bounds."""
        if self.skew is None:
            return []
        latest_skew = self.skew[1]
        return [
            c
            for c in self.commits
            if c.topic == topic and c.partition == partition and c.stored_at - latest_skew > at
        ]

    async def _follow(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            while True:
                (described,) = await admin.describe_topics([OFFSETS_TOPIC])
                if described["error_code"] == 0 and described["partitions"]:
                    break
                await asyncio.sleep(0.1)
        finally:
            await admin.close()
        count = len(described["partitions"])
        held = {offsets_partition(g, count) for g in (self.group, self.probe_group)}
        tps = [TopicPartition(OFFSETS_TOPIC, p) for p in sorted(held)]
        self._reader = reader = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50
        )
        await reader.start()
        reader.assign(tps)
        await reader.seek_to_end(*tps)
        for tp in tps:
            await reader.position(tp)
        self._task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: AIOKafkaConsumer) -> None:
        while True:
            batch = await reader.getmany(timeout_ms=100)
            for records in batch.values():
                for record in records:
                    commit = parse(record.key, record.value)
                    if commit is None:
                        continue
                    if commit.group == self.group and len(self.commits) < MAX_KEPT:
                        self.commits.append(commit)
                    elif commit.group == self.probe_group and len(self._probes) < MAX_KEPT:
                        self._probes.append(commit)

    async def _bound_clock(self, probe: AIOKafkaConsumer) -> None:
        """Skew = broker clock - kit clock lies in [stored - after, stored + 1 ms - before]
        for each probe (the broker stamps a commit while handling it, in whole ms)."""
        low, high = float("-inf"), float("inf")
        tp = TopicPartition(self.probe_topic, 0)
        for n in range(PROBES):
            before = time.time()
            await probe.commit({tp: OffsetAndMetadata(n, "")})
            after = time.time()
            async with asyncio.timeout(SEEN_WITHIN):
                stored = await self._probe_stored(n)
            low, high = max(low, stored - after), min(high, stored + 0.001 - before)
        self.skew = (low, high)

    async def _probe_stored(self, offset: int) -> float:
        while True:
            for c in self._probes:
                if c.offset == offset:
                    return c.stored_at
            if self._task is not None and self._task.done():
                self._task.result()  # the reader's failure, raised here
                raise TimeoutError("the __consumer_offsets reader ended")
            await asyncio.sleep(0.01)
