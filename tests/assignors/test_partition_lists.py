"""Partition lists come from a shared cache: each call still gets its own list, topics
that grow get their new partitions, and the cache stays within its budget."""

from __future__ import annotations

from assignors import TopicPartition
from assignors.partition_lists import _Runs, topic_partitions


def test_each_call_gets_a_fresh_list_equal_to_the_constructor() -> None:
    first = topic_partitions("lists-a", 5)
    assert first == [TopicPartition("lists-a", p) for p in range(5)]
    assert all(type(tp) is TopicPartition for tp in first)
    first.clear()
    assert topic_partitions("lists-a", 5) == [TopicPartition("lists-a", p) for p in range(5)]
    assert topic_partitions("lists-a", 0) == []


def test_a_topic_that_grows_or_shrinks_gets_exactly_its_partitions() -> None:
    runs = _Runs(budget=100)
    assert runs.get("t", 3) == [TopicPartition("t", p) for p in range(3)]
    assert runs.get("t", 6) == [TopicPartition("t", p) for p in range(6)]
    assert runs.get("t", 2) == [TopicPartition("t", p) for p in range(2)]


def test_the_budget_drops_the_least_recently_used_topics() -> None:
    runs = _Runs(budget=10)
    a = runs.get("a", 4)
    runs.get("b", 4)
    assert runs.get("a", 4)[0] is a[0]  # kept, and now the most recent
    runs.get("c", 4)  # 12 > 10: "b" goes
    assert runs.get("a", 4)[0] is a[0]
    assert runs._size <= 10
    assert set(runs._runs) == {"a", "c"}
    big = runs.get("huge", 11)  # larger than the budget: built, never kept
    assert big == [TopicPartition("huge", p) for p in range(11)]
    assert "huge" not in runs._runs
    assert runs.get("empty", 0) == []  # no entry: names of empty topics cannot pile up
    assert "empty" not in runs._runs
