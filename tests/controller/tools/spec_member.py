"""A Ballast member written from docs/protocol.md alone, as a team in another language
would write one: kafka-python for Kafka, paho for MQTT, JSON by hand, nothing imported
from Ballast. It proves the specification is enough to build a client that passes
``ballast conformance``; with ``--break RULE`` it breaks one rule on purpose, so the
kit's own tests show that each rule is really checked.

    python -m tests.controller.tools.spec_member --bootstrap B --mqtt-port P --group G \\
        --member M --topic T --assignments-topic A --out FILE [--break RULE]
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
import uuid
from typing import Any

import paho.mqtt.client as mqtt
from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import murmur2
from kafka.structs import OffsetAndMetadata
from paho.mqtt.enums import CallbackAPIVersion

BREAKS = (
    "epoch",  # order records by generation alone: no fence floor, no epochs
    "instance",  # consume any grant under its member id, whoever it was issued to
    "late-stop",  # acknowledge a revoke, and go on reading the partitions a while
    "late-stop-20ms",  # the same for 20 ms only
    "commit-after-ack",  # commit only what it gives up, 20 ms after acknowledging that
    "lazy-commit",  # commit only when it leaves, never before acknowledging a revoke
    "poison",  # trust every record: the first malformed one kills it
    "all-partitions",  # read every partition of the assignments topic
    "tombstone",  # ignore tombstones
    "no-will",  # no MQTT Will
)
MAX_COUNTER = 2**62 - 1


def _valid(body: Any, group: str, member: str) -> bool:
    """The Assignment record's rules (docs/protocol.md, its JSON Schema)."""
    if not isinstance(body, dict) or body.get("version", 1) != 1:
        return False
    if body.get("group") != group or body.get("member") != member:
        return False
    for name in ("generation", "controller_epoch"):
        value = body.get(name)
        if type(value) is not int or not 0 <= value <= MAX_COUNTER:
            return False
    parts = body.get("partitions")
    if not isinstance(parts, list):
        return False
    for pair in parts:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            return False
        if type(pair[1]) is not int or not 0 <= pair[1] < 2**31:
            return False
    return body.get("instance") is None or isinstance(body.get("instance"), str)


class Member:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.broken = a.broken
        self.instance = uuid.uuid4().hex
        self.key = f"{a.group}/{a.member}".encode()
        self.floor = -1  # highest fence epoch seen in the member's partition
        self.order: tuple[int, int, int] | None = None  # (epoch, generation, tombstone)
        self.held: set[TopicPartition] = set()
        self.generation = -1
        self.positions: dict[TopicPartition, int] = {}
        self.releasing: set[TopicPartition] = set()  # --break late-stop: still read
        self.release_at = 0.0
        self.out = open(a.out, "a", buffering=1)  # noqa: SIM115 (open for the process)
        self.stop = threading.Event()
        self.log = KafkaConsumer(
            bootstrap_servers=a.bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        self.data = KafkaConsumer(
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        self.topic = f"ballast/{a.group}/members/{a.member}"
        self.mqtt = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self.instance)
        if self.broken != "no-will":
            self.mqtt.will_set(self.topic, b"", qos=1, retain=True)

    # --------------------------------------------------------------- presence

    def announce(self, state: str = "active") -> None:
        body = {
            "version": 1,
            "group": self.a.group,
            "member": self.a.member,
            "topics": [self.a.topic],
            "instance": self.instance,
            "state": state,
            "generation": self.generation,
            "partitions": sorted([tp.topic, tp.partition] for tp in self.held),
            "sent_at": time.time(),
        }
        self.mqtt.publish(self.topic, json.dumps(body), qos=1, retain=True).wait_for_publish(5)

    # --------------------------------------------------------------- the log

    def open_log(self) -> None:
        while not (parts := self.log.partitions_for_topic(self.a.assignments_topic)):
            time.sleep(0.2)
            self.log.topics()
        own = (murmur2(self.key) & 0x7FFFFFFF) % len(parts)
        mine = sorted(parts) if self.broken == "all-partitions" else [own]
        tps = [TopicPartition(self.a.assignments_topic, p) for p in mine]
        self.log.assign(tps)
        self.log.seek_to_beginning(*tps)
        ends = self.log.end_offsets(tps)
        while any(self.log.position(tp) < ends[tp] for tp in tps):  # catch up first
            self.read_log()

    def read_log(self) -> None:
        for records in self.log.poll(timeout_ms=50).values():
            for r in records:
                self.consider(r)

    def consider(self, r: Any) -> None:
        if r.key not in (self.key, self.a.group.encode()):
            return  # another member's record, or a marker of another group: not read
        if self.broken == "poison":
            body = None if r.value is None else json.loads(r.value)
        else:
            try:
                body = None if r.value is None else json.loads(r.value)
            except (ValueError, RecursionError):  # RecursionError: nesting past the parser's
                return
        if r.key == self.a.group.encode():  # a fence marker
            if isinstance(body, dict) and body.get("group") == self.a.group:
                epoch = body.get("controller_epoch")
                if type(epoch) is int and 0 <= epoch <= MAX_COUNTER:
                    self.floor = max(self.floor, epoch)
            return
        if body is None:
            if self.broken == "tombstone":
                return
            headers = dict(r.headers or [])
            current = self.order or (0, 0, 0)
            epoch = int(headers.get("ballast-epoch", b"") or max(self.floor, current[0]))
            gen = int(headers.get("ballast-generation", b"") or current[1])
            order, target, ack = (epoch, gen, 1), set(), None
        elif self.broken != "poison" and not _valid(body, self.a.group, self.a.member):
            return
        else:
            order = (body["controller_epoch"], body["generation"], 0)
            mine = body.get("instance") in (None, self.instance) or self.broken == "instance"
            target = {TopicPartition(t, p) for t, p in body["partitions"]} if mine else set()
            ack = body["generation"] if mine else None
        if self.broken == "epoch":
            if self.order is not None and order[1:] <= self.order[1:]:
                return
        else:
            if order[0] < max(self.floor, self.order[0] if self.order else -1):
                return  # fenced
            if self.order is not None and order <= self.order:
                return  # stale
        self.order = order
        self.apply(target, ack)

    # --------------------------------------------------------------- applying

    def commit(self, tps: set[TopicPartition]) -> None:
        offsets = {
            tp: OffsetAndMetadata(self.positions[tp], "", -1) for tp in tps if tp in self.positions
        }
        if offsets:
            self.data.commit(offsets)

    def apply(self, target: set[TopicPartition], ack: int | None) -> None:
        revoked = self.held - target
        if ack is not None:
            self.generation = ack
        if self.broken not in ("lazy-commit", "commit-after-ack"):
            self.commit(revoked)
        self.held = target
        if self.broken == "commit-after-ack" and revoked:
            self.announce()
            time.sleep(0.02)
            self.commit(revoked)
        late = {"late-stop": 1.5, "late-stop-20ms": 0.02}.get(self.broken or "")
        if late is not None and revoked:
            self.announce()
            self.release_at, self.releasing = time.monotonic() + late, revoked
            self.data.assign(sorted(self.held | revoked))
            return
        self.data.assign(sorted(self.held))
        for tp in self.held:
            if tp in self.positions:
                self.data.seek(tp, self.positions[tp])
        self.announce()

    def consume(self) -> None:
        if self.releasing and time.monotonic() > self.release_at:
            self.releasing = set()
            self.data.assign(sorted(self.held))
        if not self.held and not self.releasing:
            time.sleep(0.05)
            return
        batch = self.data.poll(timeout_ms=100)
        for tp, records in batch.items():
            for r in records:
                self.out.write(f"{r.topic} {r.partition} {r.offset} {time.time():.6f}\n")
            self.positions[tp] = records[-1].offset + 1
        if batch:
            self.out.flush()
            if self.broken not in ("lazy-commit", "commit-after-ack"):
                self.commit(set(batch))

    def run(self) -> None:
        self.mqtt.connect("127.0.0.1", self.a.mqtt_port, keepalive=2)
        self.mqtt.loop_start()
        self.open_log()
        self.announce()
        while not self.stop.is_set():
            self.read_log()
            self.consume()
        self.commit(self.held)
        self.held = set()
        self.announce("leaving")
        self.mqtt.publish(self.topic, b"", qos=1, retain=True).wait_for_publish(5)
        self.mqtt.disconnect()
        self.mqtt.loop_stop()


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("bootstrap", "group", "member", "topic", "assignments-topic", "out"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--mqtt-port", type=int, required=True)
    p.add_argument("--break", dest="broken", choices=BREAKS)
    member = Member(p.parse_args())
    signal.signal(signal.SIGTERM, lambda *_: member.stop.set())
    member.run()


if __name__ == "__main__":
    main()
