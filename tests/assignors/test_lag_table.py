"""The engine's lag table answers as the dict it replaced: same values, same old values
on update, same listing, through block growth, compaction and lags past 64 bits."""

from __future__ import annotations

import random

import pytest

from assignors.ids import PART_BITS
from assignors.lag_table import LagTable


def _pid(rng: random.Random, topics: int, partitions: int) -> int:
    return rng.randrange(topics) << PART_BITS | rng.randrange(partitions)


@pytest.mark.parametrize("seed", range(60))
def test_the_table_answers_as_a_dict(seed: int) -> None:
    rng = random.Random(seed)
    table, plain = LagTable(), dict[int, int]()
    for _ in range(rng.randint(1, 15)):
        if rng.random() < 0.7:
            width = rng.choice((3, 50, 2_000))
            pids = list({_pid(rng, 7, width) for _ in range(rng.randint(1, 40))})
            values = [
                rng.choice((rng.randint(0, 10**6), 0, 2**63 - 1, 2**63, rng.randint(0, 2**80)))
                for _ in pids
            ]
            assert table.swap(pids, values) == [plain.get(p, 0) for p in pids]
            plain.update(zip(pids, values, strict=True))
        else:
            gone = [_pid(rng, 9, 60) for _ in range(5)]
            table.discard(gone)
            for p in gone:
                plain.pop(p, None)
        asked = [_pid(rng, 10, 3_000) for _ in range(30)] + list(plain)[:10]
        assert table.many(asked) == [plain.get(p, 0) for p in asked]
        assert [table.get(p, 7) for p in asked] == [plain.get(p, 7) for p in asked]
        assert len(table) == len(plain)
        assert table.items() == (sorted(plain), [plain[p] for p in sorted(plain)])


def test_growing_topics_keep_their_readings_and_the_array_stays_compact() -> None:
    table = LagTable.of([0, 1 << PART_BITS], [5, 6])
    for n in range(1, 200):
        table.swap([n], [n])  # topic 0 outgrows its block again and again
    assert table.many([0, 1 << PART_BITS, 199]) == [5, 6, 199]
    assert len(table._flat) <= 4 * 201  # abandoned blocks were compacted away
