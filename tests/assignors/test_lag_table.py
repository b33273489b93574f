"""The engine's lag table answers as the dict it replaced: same values, same old values
on update, same listing, through block growth, compaction and lags past 64 bits."""

from __future__ import annotations

import random

import numpy as np
import pytest

from assignors import IncrementalAssignor, LagUpdated, MemberJoined, TopicPartition
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
            olds = [plain.get(p, 0) for p in pids]
            exact = max(values + olds) < 2**63 and rng.random() < 0.5
            if exact:
                swapped = table.swap_exact(np.array(pids, dtype=np.int64), values)
                assert swapped is not None
                assert (swapped[0].tolist(), swapped[1].tolist()) == (olds, values)
            elif rng.random() < 0.5:
                # Past 64 bits the array path declines and changes nothing.
                before = table.items()
                declined = table.swap_exact(np.array(pids, dtype=np.int64), values)
                assert declined is None or max(values + olds) < 2**63
                if declined is None:
                    assert table.items() == before
                    assert table.swap(pids, values) == olds
            else:
                assert table.swap(pids, values) == olds
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
    assert len(table._array.flat) <= 4 * 201  # abandoned blocks were compacted away


def test_the_engine_sums_lag_exactly_past_64_bits() -> None:
    """A lag update sums changes per member in int64 arrays; past 64 bits (a lag, or a
    member's sum of changes) it falls back to Python ints and the totals stay exact."""
    eng = IncrementalAssignor({"t": 8})
    eng.apply([MemberJoined("a", frozenset({"t"})), MemberJoined("b", frozenset({"t"}))])
    for lags in (
        {p: 2**62 for p in range(8)},  # each fits, a member's sum does not
        {p: 2**70 + p for p in range(8)},  # lags past 64 bits
        {p: 3 * p for p in range(8)},  # back to small
    ):
        eng.apply([LagUpdated({TopicPartition("t", p): v for p, v in lags.items()})])
        held = {m: sum(lags[tp.partition] for tp in eng.partitions_of(m)) for m in "ab"}
        assert eng.member_lag() == held


def test_a_recovery_reads_the_lag_of_every_claim_in_one_gather(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine built from ``current`` with lag looks the claims' lag up in bulk: the
    number of table reads does not grow with the members (one read per member cost 10
    000 NumPy calls at 10 000 members), and each member's lag is what it holds."""
    reads = 0
    many = LagTable.many

    def counted(self: LagTable, pids: list[int]) -> list[int]:
        nonlocal reads
        reads += 1
        return many(self, pids)

    monkeypatch.setattr(LagTable, "many", counted)
    counts = []
    for members in (20, 200):
        ppt = {"a": 4 * members, "b": 2 * members}
        subs = {f"m{i:03d}": ["a", "b"] for i in range(members)}
        rng = random.Random(members)
        lag = {TopicPartition(t, p): rng.randint(0, 999) for t, n in ppt.items() for p in range(n)}
        fresh, _ = IncrementalAssignor.from_snapshot(ppt, subs, lag=lag)
        current = fresh.assignment()
        reads = 0
        eng, change = IncrementalAssignor.from_snapshot(ppt, subs, current, lag)
        counts.append(reads)
        assert change.moved == 0
        assert eng.member_lag() == {m: sum(lag[tp] for tp in tps) for m, tps in current.items()}
    assert counts[0] == counts[1]
