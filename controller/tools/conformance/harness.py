"""What the conformance kit does to a client process and sees of it: it plays the
controller (writes the records of the assignments topic itself, byte for byte, so that
every scenario is exactly the moment it names), produces numbered records to the data
topic, and watches three things no client can fake: the presence the client announces,
the offsets its group committed on the broker, and the records it says it processed.

The client's side of the contract (docs/protocol.md, "Conformance kit"): the command is
run once per scenario with ``{bootstrap}``, ``{mqtt_port}``, ``{group}``, ``{member}``,
``{topic}``, ``{assignments_topic}``, ``{heartbeat_topic}`` and ``{out}`` replaced in its
arguments (and set as ``BALLAST_CONFORMANCE_*`` in its environment). It appends a line
``<topic> <partition> <offset> ...`` to ``{out}`` for each record it processes, before
committing it to the group ``{group}``, starts a partition without a commit from its
earliest offset, and leaves cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import aiomqtt
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from controller.tools.conformance.commit_log import CommitLog
from controller.tools.embedded import die_with_parent
from controller.wire.assignments import EPOCH_HEADER, GENERATION_HEADER, assignments_partition
from controller.wire.records import (
    Assignment,
    DecodeError,
    Fence,
    Presence,
    assignment_key,
    decode,
    fence_key,
    presence_topic,
)

PresenceVia = Literal["mqtt", "kafka"]
#: How often a wait looks again (s).
TICK = 0.05
#: How long a correct client may take to do what a step asks (s): a process start, a
#: grant, an acknowledgement.
STEP_TIMEOUT = 30.0
#: How long a step waits for something that must *not* happen before calling it absent.
QUIET = 2.0

#: Names substituted in the command, and the environment variables that carry them.
PLACEHOLDERS = (
    "bootstrap",
    "mqtt_port",
    "group",
    "member",
    "topic",
    "assignments_topic",
    "heartbeat_topic",
    "out",
)


def substituted(command: Sequence[str], values: dict[str, str]) -> list[str]:
    """The command with each ``{name}`` replaced; other braces are left as they are (a
    shell snippet or JSON in an argument)."""
    out = []
    for arg in command:
        text = arg
        for name in PLACEHOLDERS:
            text = text.replace("{" + name + "}", values[name])
        out.append(text)
    return out


@dataclass(frozen=True, slots=True)
class Seen:
    """One presence as the kit received it: None is a cleared presence (an empty
    retained message or a tombstone); ``problem`` a body that did not decode."""

    at: float
    presence: Presence | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Setup:
    bootstrap: str
    mqtt_port: int | None
    presence: PresenceVia
    assignments_topic: str
    heartbeat_topic: str
    #: Partitions of the assignments topic (the kit creates it when missing).
    assignments_partitions: int
    #: Partitions of the heartbeat topic (presence over Kafka only; else 0).
    heartbeat_partitions: int
    workdir: Path


@dataclass
class Harness:
    """One scenario: a fresh group, data topic and client process."""

    setup: Setup
    command: Sequence[str]
    name: str
    member: str = "m1"
    partitions: int = 4
    #: What was produced to the data topic: partition -> offsets.
    produced: dict[int, list[int]] = field(default_factory=dict)
    #: When each record's send began (wall clock): (partition, offset) -> seconds. A
    #: record whose send began after an acknowledgement was sent cannot have been read
    #: before it.
    produced_at: dict[tuple[int, int], float] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    _process: asyncio.subprocess.Process | None = None
    _producer: AIOKafkaProducer | None = None
    _watch: asyncio.Task[None] | None = None
    _offsets: AIOKafkaConsumer | None = None
    #: When the broker stored the group's commits (None: it could not be read).
    commit_log: CommitLog | None = None
    #: Set on every presence seen: a wait looks again at once, not a tick later (a
    #: revoke's acknowledgement is judged within a millisecond or two of its arrival).
    _news: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def group(self) -> str:
        return self.name

    @property
    def topic(self) -> str:
        return f"{self.name}-data"

    @property
    def out(self) -> Path:
        return self.setup.workdir / f"{self.name}.processed"

    @property
    def log(self) -> Path:
        return self.setup.workdir / f"{self.name}.log"

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        s = self.setup
        self._producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, acks="all")
        await self._producer.start()
        self._offsets = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap, group_id=self.group, enable_auto_commit=False
        )
        await self._offsets.start()
        log = CommitLog(s.bootstrap, self.group, probe_topic=s.assignments_topic)
        self.commit_log = log if await log.open(STEP_TIMEOUT) else None
        ready = asyncio.Event()
        watch = self._watch_mqtt if s.presence == "mqtt" else self._watch_heartbeats
        self._watch = asyncio.create_task(watch(ready))
        async with asyncio.timeout(STEP_TIMEOUT):
            while not ready.is_set():
                if self._watch.done():
                    self._watch.result()  # the watcher's failure, raised here
                    raise TimeoutError("the presence watcher ended")
                await asyncio.sleep(TICK)

    async def close(self) -> None:
        await self.kill()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        if self.commit_log is not None:
            await self.commit_log.close()
        for client in (self._producer, self._offsets):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()

    async def start_client(self) -> None:
        s = self.setup
        values = {
            "bootstrap": s.bootstrap,
            "mqtt_port": str(s.mqtt_port or 0),
            "group": self.group,
            "member": self.member,
            "topic": self.topic,
            "assignments_topic": s.assignments_topic,
            "heartbeat_topic": s.heartbeat_topic,
            "out": str(self.out),
        }
        env = dict(os.environ)
        env.update({f"BALLAST_CONFORMANCE_{k.upper()}": v for k, v in values.items()})
        with self.log.open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                *substituted(self.command, values),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,  # signals reach the whole command (a shell's child too)
                preexec_fn=die_with_parent,  # and a kit killed outright takes it along
            )

    def signal(self, sig: int) -> None:
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, sig)

    async def exited(self, timeout: float) -> int | None:
        """The exit code, or None if still running after ``timeout``."""
        if self._process is None:
            return None
        try:
            async with asyncio.timeout(timeout):
                code: int = await self._process.wait()
                return code
        except TimeoutError:
            return None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self._process is not None:
            await self._process.wait()

    def log_tail(self, lines: int = 6) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(line[:200] for line in text[-lines:])

    # ------------------------------------------------------------------ what it sees

    def last(self) -> Seen | None:
        return self.seen[-1] if self.seen else None

    def acknowledged(self, generation: int) -> bool:
        """Any presence so far acknowledges ``generation``."""
        return any(
            s.presence is not None and s.presence.generation == generation for s in self.seen
        )

    def processed(self) -> set[tuple[str, int, int]]:
        """Every record the client says it processed (repeats folded)."""
        done = set()
        try:
            text = self.out.read_text(errors="replace")
        except FileNotFoundError:
            return set()
        for line in text.splitlines():
            fields = line.split(" ", 3)
            if len(fields) >= 3 and fields[1].isdigit() and fields[2].isdigit():
                done.add((fields[0], int(fields[1]), int(fields[2])))
        return done

    def processed_of(self, partition: int) -> set[int]:
        return {o for t, p, o in self.processed() if t == self.topic and p == partition}

    async def committed(self, partition: int) -> int | None:
        assert self._offsets is not None
        offset: int | None = await self._offsets.committed(TopicPartition(self.topic, partition))
        return offset

    async def until(
        self, check: Callable[[], bool], timeout: float = STEP_TIMEOUT, *, dead_ends: bool = True
    ) -> bool:
        """Whether ``check`` came true within ``timeout``; with ``dead_ends``, a client
        process that exited ends the wait (what it has not done, it will not)."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline or (dead_ends and not self.running):
                await asyncio.sleep(QUIET if dead_ends and not self.running else 0)
                return check()  # the last presence a dying process sent may be in flight
            self._news.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK):
                    await self._news.wait()
        return True

    # ------------------------------------------------------------------ what it writes

    async def produce(self, per_partition: int, partitions: Sequence[int] | None = None) -> None:
        assert self._producer is not None
        for p in range(self.partitions) if partitions is None else partitions:
            for i in range(per_partition):
                value = f"{self.name}-{p}-{len(self.produced.get(p, ()))}-{i}".encode()
                began = time.time()
                meta = await self._producer.send_and_wait(self.topic, value, partition=p)
                self.produced.setdefault(p, []).append(meta.offset)
                self.produced_at[p, meta.offset] = began

    async def produce_each(self, partitions: Sequence[int]) -> None:
        """One record to each of ``partitions``, sent together (a trickle's step)."""
        assert self._producer is not None
        began = time.time()
        sent = []
        for p in partitions:
            value = f"{self.name}-{p}-{len(self.produced.get(p, ()))}-t".encode()
            sent.append(await self._producer.send(self.topic, value, partition=p))
        for p, meta in zip(partitions, await asyncio.gather(*sent), strict=True):
            self.produced.setdefault(p, []).append(meta.offset)
            self.produced_at[p, meta.offset] = began

    def produced_of(self, partitions: Sequence[int]) -> set[tuple[str, int, int]]:
        return {(self.topic, p, o) for p in partitions for o in self.produced.get(p, ())}

    async def grant(
        self,
        partitions: Sequence[int],
        *,
        generation: int,
        epoch: int,
        instance: str | None,
        to_partition: int | None = None,
    ) -> None:
        """The member's record, as the controller writes it (headers included)."""
        record = Assignment(
            group=self.group,
            member=self.member,
            generation=generation,
            controller_epoch=epoch,
            partitions=[(self.topic, p) for p in sorted(partitions)],
            issued_at=time.time(),
            topics=[self.topic],
            instance=instance,
        )
        await self.write(record.encode(), generation=generation, epoch=epoch, to=to_partition)

    async def tombstone(self, *, generation: int, epoch: int) -> None:
        await self.write(None, generation=generation, epoch=epoch)

    async def write(
        self,
        value: bytes | None,
        *,
        generation: int | None = None,
        epoch: int | None = None,
        to: int | None = None,
        key: bytes | None = None,
    ) -> None:
        """Any bytes under the member's key (or ``key``), in its own partition unless
        ``to`` says which."""
        assert self._producer is not None
        key = key if key is not None else assignment_key(self.group, self.member)
        own = assignments_partition(
            assignment_key(self.group, self.member), self.setup.assignments_partitions
        )
        headers = []
        if generation is not None:
            headers.append((GENERATION_HEADER, str(generation).encode()))
        if epoch is not None:
            headers.append((EPOCH_HEADER, str(epoch).encode()))
        await self._producer.send_and_wait(
            self.setup.assignments_topic,
            value,
            key=key,
            partition=own if to is None else to,
            headers=headers,
        )

    async def fence(self, epoch: int) -> None:
        """A new leader's marker, on every partition of the assignments topic."""
        assert self._producer is not None
        body = Fence(group=self.group, controller_epoch=epoch, issued_at=time.time()).encode()
        for p in range(self.setup.assignments_partitions):
            await self._producer.send_and_wait(
                self.setup.assignments_topic, body, key=fence_key(self.group), partition=p
            )

    # ------------------------------------------------------------------ presence

    def _saw(self, payload: bytes | None, source: str) -> None:
        try:
            self._note(payload, source)
        finally:
            self._news.set()

    def _note(self, payload: bytes | None, source: str) -> None:
        if not payload:
            self.seen.append(Seen(time.monotonic(), None))
            return
        try:
            presence = decode(Presence, payload, source)
        except DecodeError as exc:
            self.seen.append(Seen(time.monotonic(), None, problem=str(exc)))
            return
        if presence.group != self.group or presence.member != self.member:
            problem = f"{source}: body names {presence.group}/{presence.member}"
            self.seen.append(Seen(time.monotonic(), None, problem=problem))
            return
        self.seen.append(Seen(time.monotonic(), presence))

    async def _watch_mqtt(self, ready: asyncio.Event) -> None:
        topic = presence_topic("ballast", self.group, self.member)
        async with aiomqtt.Client(
            "127.0.0.1", self.setup.mqtt_port or 1883, identifier=f"conformance-{self.name}"
        ) as client:
            await client.subscribe(topic, qos=1)
            ready.set()
            async for message in client.messages:
                if message.topic.value != topic:
                    continue  # amqtt hands a new subscriber other topics' retained messages
                payload = message.payload
                self._saw(payload if isinstance(payload, bytes) else None, topic)

    async def _watch_heartbeats(self, ready: asyncio.Event) -> None:
        s = self.setup
        reader = AIOKafkaConsumer(bootstrap_servers=s.bootstrap, enable_auto_commit=False)
        await reader.start()
        try:
            own = TopicPartition(
                s.heartbeat_topic,
                assignments_partition(
                    assignment_key(self.group, self.member), s.heartbeat_partitions
                ),
            )
            reader.assign([own])
            await reader.seek_to_end(own)
            await reader.position(own)
            ready.set()
            key = assignment_key(self.group, self.member)
            while True:
                batch = await reader.getmany(own, timeout_ms=100)
                for record in batch.get(own, []):
                    if record.key == key:
                        self._saw(record.value, f"{s.heartbeat_topic}[{own.partition}]")
        finally:
            await reader.stop()
