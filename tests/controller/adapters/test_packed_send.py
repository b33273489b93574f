"""Packed sends land where a plain keyed ``send`` lands, in order, all acknowledged."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer

from controller.adapters import packed_send
from controller.adapters.packed_send import PackedSender, Placements
from controller.tools import embedded
from tests.brokers import read_records


async def test_packed_records_land_where_a_keyed_send_puts_them(
    kafka: embedded.BrokerProcess, names: tuple[str, str]
) -> None:
    packed, plain = f"{names[1]}-packed", f"{names[1]}-plain"
    await embedded.create_topics(kafka.address, {packed: 5, plain: 5})
    # Enough records for several full batches per partition (16 KiB each by default),
    # two per key so per-key order shows.
    records = [(f"key-{i % 3000}".encode(), f"{i:08d}".encode() * 8) for i in range(6000)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka.address, linger_ms=5)
    await producer.start()
    try:
        out = PackedSender(producer)
        for key, value in records[:3000]:
            await out.add(packed, key, value)
        await out.flush()
        assert out.records == 3000
        # The second half placed by slot: each key's place remembered from its first use.
        remembered = PackedSender(producer, Placements())
        for i, (key, value) in enumerate(records[3000:]):
            await remembered.add(packed, key, value, ("keys", i % 3000))
        await remembered.flush()
        for key, value in records:
            await producer.send(plain, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()
    got_packed = await read_records(kafka.address, packed, len(records))
    got_plain = await read_records(kafka.address, plain, len(records))
    where = {key: part for part, key, _ in got_plain}
    assert len(set(where.values())) > 1  # the keys spread: the comparison means something
    assert all(where[key] == part for part, key, _ in got_packed)
    by_key: dict[bytes, list[bytes]] = {}
    for _, key, value in got_packed:
        by_key.setdefault(key, []).append(value)
    sent: dict[bytes, list[bytes]] = {}
    for key, value in records:
        sent.setdefault(key, []).append(value)
    assert by_key == sent


def test_placements_remember_each_slot_until_the_partitions_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = packed_send._PARTITIONER
    asked: list[bytes | None] = []

    def counted(key: bytes | None, every: list[int], available: list[int]) -> int:
        asked.append(key)
        placed: int = real(key, every, available)
        return placed

    monkeypatch.setattr(packed_send, "_PARTITIONER", counted)
    places = Placements()
    four, six = [0, 1, 2, 3], [0, 1, 2, 3, 4, 5]
    keys = [(f"fleet/orders/{p}".encode(), ("orders", p)) for p in (7, 0, 3, 250)]
    first = [places.place(four, key, slot) for key, slot in keys]
    again = [places.place(list(four), key, slot) for key, slot in keys]
    assert first == again == [real(key, four, four) for key, _ in keys]
    assert len(asked) == len(keys)  # the second round was remembered
    grown = [places.place(six, key, slot) for key, slot in keys]
    assert grown == [real(key, six, six) for key, _ in keys]
    assert len(asked) == 2 * len(keys)  # a topic that grew places every key again
    assert len({*first, *grown}) > 1  # the keys spread: the comparisons mean something
    # A slot number past what is kept is placed anew, not remembered in a huge array.
    far = ("orders", packed_send._MAX_SLOTS)
    assert places.place(six, b"fleet/orders/far", far) == real(b"fleet/orders/far", six, six)
    assert len(places._slots["orders"]) <= 251
