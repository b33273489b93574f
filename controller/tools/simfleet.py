"""A simulated fleet for tests, benchmarks and the demo: real MQTT presence (with Wills),
real reading of the assignments topic. Members do no consuming; applying a record means
announcing its generation and partitions, as a real client does after ``assign()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import aiomqtt
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTP

from controller.adapters.metadata import topic_metadata
from controller.adapters.presence import drop_link, member_client
from controller.tasks import cancel_and_wait
from controller.wire.assignments import READ_ISOLATION, log_entry
from controller.wire.fencing import AssignmentView, Verdict
from controller.wire.records import Assignment, LoggedFence, Presence, presence_topic


@dataclass
class SimMember:
    name: str
    topics: list[str]
    client: aiomqtt.Client
    #: Its ``client.rack``, announced in presence (None: no rack).
    rack: str | None = None
    #: This incarnation (``Presence.instance``): a restart is a new one.
    instance: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    generation: int = -1
    #: What it holds, as the records list it: ``(topic, partition)`` pairs (equal to
    #: ``TopicPartition``s; one process applying a thousand members' records spent more
    #: on building named tuples than on anything else).
    partitions: frozenset[tuple[str, int]] = frozenset()
    #: An ack is being published; another is owed once it is (``Fleet._ack_soon``).
    acking: bool = False
    ack_again: bool = False
    #: ``draining`` while it leaves through a handoff (``Fleet.hand_off``).
    state: str = "active"
    #: Set when a record leaves a draining member holding nothing.
    emptied: asyncio.Event = field(default_factory=asyncio.Event)


class Fleet:
    def __init__(
        self,
        bootstrap: str,
        mqtt_port: int,
        group: str,
        *,
        assignments_topic: str = "ballast.assignments",
        prefix: str = "ballast",
        keepalive: int = 5,
        mqtt_host: str = "127.0.0.1",
        hosts: Callable[[str], bool] | None = None,
    ) -> None:
        """``hosts``: the member ids this fleet may ever host, when it is one of several
        processes sharing a fleet; the others' records are skipped undecoded, as a real
        member reads only its own key and the fence markers."""
        self.bootstrap = bootstrap
        self._hosts = hosts
        self.mqtt_host = mqtt_host
        self.mqtt_port = mqtt_port
        self.group = group
        self.topic = assignments_topic
        self.prefix = prefix
        self.keepalive = keepalive
        self.members: dict[str, SimMember] = {}
        self._view = AssignmentView()
        self.on_apply: Callable[[SimMember], None] | None = None
        #: Told every time a member's holding changes (a record applied, a tombstone, a
        #: predecessor's grant that empties it), after the change.
        self.on_held: Callable[[SimMember], None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._latest: dict[str, Assignment | None] = {}
        self._acks: set[asyncio.Task[None]] = set()

    def presence_topic(self, member: str) -> str:
        return presence_topic(self.prefix, self.group, member)

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            isolation_level=READ_ISOLATION,
        )
        await self._consumer.start()
        deadline = time.monotonic() + 30
        while not (
            count := (await topic_metadata(self._consumer, [self.topic])).counts.get(self.topic)
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {self.topic} never appeared")
            await asyncio.sleep(0.1)
        tps = [KafkaTP(self.topic, p) for p in range(count)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._reader = asyncio.create_task(self._read())

    async def stop(self) -> None:
        """Every member stops as a restarting client does: presence cleared, no leave."""
        await cancel_and_wait(self._reader, *self._acks)  # first: no ack may follow the clearing
        for m in list(self.members.values()):
            with contextlib.suppress(Exception):
                await m.client.publish(self.presence_topic(m.name), b"", qos=1, retain=True)
                await m.client.__aexit__(None, None, None)
        self.members.clear()
        if self._consumer:
            await self._consumer.stop()

    async def join(self, name: str, topics: list[str], rack: str | None = None) -> SimMember:
        client = member_client(
            self.mqtt_host,
            self.mqtt_port,
            f"sim-{self.group}-{name}",
            self.presence_topic(name),
            self.keepalive,
        )
        await client.__aenter__()
        member = SimMember(name, topics, client, rack)
        # Like the real client: see everything published so far (our own tombstone
        # included) before picking up our last record.
        await self._caught_up()
        self.members[name] = member
        await self.catch_up(member)
        return member

    async def announce(self, member: SimMember, state: str | None = None) -> None:
        """Built without validation, as the controller builds its records: the fields are
        the simulator's own, and one process doing a thousand members' checks would set
        the pace of the load runs (the controller validates what it receives)."""
        body = Presence.model_construct(
            group=self.group,
            member=member.name,
            topics=member.topics,
            instance=member.instance,
            state=state or member.state,
            rack=member.rack,
            generation=member.generation,
            partitions=sorted(member.partitions),
            sent_at=time.time(),
        )
        await member.client.publish(
            self.presence_topic(member.name), body.encode(), qos=1, retain=True
        )

    async def catch_up(self, member: SimMember) -> None:
        """Apply the member's latest record, as a client does on (re)start, and announce."""
        latest = self._latest.get(member.name)
        if latest is not None and latest.generation > member.generation:
            self._apply(member, latest)  # a restart holds nothing until issued to it
        await self.announce(member)

    async def leave(self, name: str) -> None:
        """Clean leave: stop consuming, say so, clear presence, disconnect."""
        member = self.members.pop(name)
        member.partitions = frozenset()
        await self.announce(member, state="leaving")
        await member.client.publish(self.presence_topic(name), b"", qos=1, retain=True)
        await member.client.__aexit__(None, None, None)

    async def hand_off(self, name: str, timeout: float = 20.0) -> None:
        """Leave without a gap (``ManagedConsumer.hand_off``): say ``draining`` and read
        on until a record takes everything (or ``timeout``), then leave cleanly."""
        member = self.members[name]
        if member.partitions:
            member.state = "draining"
            await self.announce(member)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await member.emptied.wait()
        await self.leave(name)

    async def stop_member(self, name: str) -> None:
        """A process stopping for a restart (``close(leave=False)``): it reads nothing
        more, clears its presence (its partitions wait ``leave_grace`` for it), and
        disconnects; joining again under ``name`` is the new process."""
        member = self.members.pop(name)
        member.partitions = frozenset()
        await member.client.publish(self.presence_topic(name), b"", qos=1, retain=True)
        await member.client.__aexit__(None, None, None)

    async def crash(self, name: str) -> None:
        """Drop the connection without DISCONNECT: the broker publishes the Will."""
        member = self.members.pop(name)
        drop_link(member.client)
        with contextlib.suppress(Exception):
            await member.client.__aexit__(None, None, None)

    async def _caught_up(self) -> None:
        assert self._consumer is not None
        tps = sorted(self._consumer.assignment(), key=lambda tp: tp.partition)
        ends = await self._consumer.end_offsets(tps)
        targets = {tp: max(ends[tp], self._consumer.highwater(tp) or 0) for tp in tps}
        for tp, end in targets.items():
            while await self._consumer.position(tp) < end:
                await asyncio.sleep(0.01)

    def owners(self) -> dict[tuple[str, int], list[str]]:
        out: dict[tuple[str, int], list[str]] = {}
        for m in self.members.values():
            for tp in m.partitions:
                out.setdefault(tp, []).append(m.name)
        return out

    async def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 20.0, every: float = 0.02
    ) -> None:
        """``every``: how often to ask; a costly predicate asked less often leaves the
        fleet's loop free for what it measures."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not reached")
            await asyncio.sleep(every)

    async def _read(self) -> None:
        assert self._consumer is not None
        async for msg in self._consumer:
            if self._not_ours(msg.key):
                continue
            entry = log_entry(msg)
            if entry is None or entry.group != self.group:
                continue
            # Fenced and stale records are ignored, as every reader does (``fencing``).
            if self._view.add(entry) is not Verdict.CURRENT or isinstance(entry, LoggedFence):
                continue
            member, rec = entry.member, entry.record
            self._latest[member] = rec
            target = self.members.get(member)
            if target is None:
                continue
            if rec is None:
                # The controller declared it gone (e.g. its MQTT link dropped and the Will
                # fired) or drained it: hold nothing and say so, as ManagedConsumer does on
                # a tombstone (a presence still claiming the partitions would be refused
                # by the next controller).
                target.partitions = frozenset()
                self._held(target)
                self._ack_soon(target)
                continue
            if rec.generation > target.generation and self._apply(target, rec):
                self._ack_soon(target)
                # Let the ack go out now: a batch of the topic's records is otherwise
                # read to its end first (aiokafka hands buffered ones out without a
                # pause), and one process acting for hundreds of members would make
                # each wait for all the others' records, where a member of its own
                # acknowledges at once.
                await asyncio.sleep(0)

    def _not_ours(self, key: bytes | None) -> bool:
        """A member record (its key has a ``/``) of a member this fleet never hosts."""
        if self._hosts is None or not key or b"/" not in key:
            return False
        return not self._hosts(key.split(b"/", 1)[1].decode(errors="replace"))

    def _ack_soon(self, member: SimMember) -> None:
        """Acks go out concurrently (each member has its own connection, which keeps its
        own messages in order): one slow PUBACK must not hold up the records behind it,
        or the fleet, not the controller, sets the pace. A member with an ack in flight
        sends one more afterwards, with its state as it is then (acks coalesce)."""
        if member.acking:
            member.ack_again = True
            return
        member.acking = True
        ack = asyncio.create_task(self._ack(member))
        self._acks.add(ack)
        ack.add_done_callback(self._acks.discard)

    async def _ack(self, member: SimMember) -> None:
        try:
            while self.members.get(member.name) is member:  # else: its goodbye was last
                member.ack_again = False
                try:
                    await self.announce(member)
                except aiomqtt.MqttError:
                    # This member's link died (its Will fired): like a crashed process,
                    # it acks nothing more. The fleet reads on for the others.
                    self.members.pop(member.name, None)
                    return
                if not member.ack_again:
                    return
        finally:
            member.acking = False

    def _apply(self, member: SimMember, rec: Assignment) -> bool:
        """Hold what ``rec`` grants; a predecessor's grant means hold nothing, ack nothing
        (False), as ManagedConsumer does."""
        if not rec.issued_to(member.instance):
            member.partitions = frozenset()
            self._held(member)
            return False
        member.generation = rec.generation
        member.partitions = frozenset(rec.partitions)
        self._held(member)
        if self.on_apply:
            self.on_apply(member)
        return True

    def _held(self, member: SimMember) -> None:
        if member.state == "draining" and not member.partitions:
            member.emptied.set()
        if self.on_held:
            self.on_held(member)
