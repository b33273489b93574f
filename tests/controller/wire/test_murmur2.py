"""The wire's own murmur2 places keys where every Kafka client does."""

from __future__ import annotations

from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from controller.wire.assignments import assignments_partition, murmur2

#: Apache Kafka's UtilsTest.testMurmur2 (the Java client's signed results).
JAVA = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_java_clients_results() -> None:
    for key, signed in JAVA.items():
        assert murmur2(key) == signed & 0xFFFFFFFF, key


@given(st.binary(max_size=64))
def test_agrees_with_aiokafka(key: bytes) -> None:
    assert murmur2(key) == aiokafka_murmur2(key) & 0xFFFFFFFF


@given(st.binary(min_size=1, max_size=40), st.integers(1, 1000))
def test_the_partition_is_the_default_partitioners(key: bytes, partitions: int) -> None:
    assert assignments_partition(key, partitions) == (
        (aiokafka_murmur2(key) & 0x7FFFFFFF) % partitions
    )
