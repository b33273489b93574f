"""Offset samples written many at a time are exactly what the record writes one at a time:
the same bytes for what it accepts, the same reasons for what it refuses."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from assignors import MAX_PARTITION
from controller.wire import records
from controller.wire.records import MAX_OFFSET, OffsetSample, encode_samples, partition_key

_plain = st.integers(0, 60)
#: The edges the checks have (negative, the largest allowed and past it), wrong types.
SPOILT: list[Any] = [
    -1,
    MAX_PARTITION,
    MAX_PARTITION + 1,
    MAX_OFFSET,
    MAX_OFFSET + 1,
    -(2**63),
    True,
    False,
    1.0,
    math.nan,
    None,
    "",
    "bad topic",
]
_spoilt = st.sampled_from(SPOILT)


@st.composite
def _row(draw: st.DrawFn) -> tuple[Any, ...]:
    """A reading a poll gives (a commit or log start past the log's end about half the
    time), or one with one field spoilt."""
    row: list[Any] = [
        draw(st.sampled_from(["orders", "orders.v2"])),
        draw(_plain),
        draw(st.none() | _plain),
        draw(_plain),
        draw(st.none() | _plain),
    ]
    if draw(st.booleans()):
        row[draw(st.integers(0, 4))] = draw(_spoilt)
    return tuple(row)


_rows = st.lists(_row(), max_size=30)
_times = st.one_of(
    st.just(1_764_140_000.125),
    st.floats(min_value=1e-3, max_value=4e9),
    st.sampled_from([0.0, -1.0, math.inf, math.nan, 1e300]),
)


def _one_at_a_time(
    group: str, sampled_at: float, rows: list[Any]
) -> tuple[list[tuple[str, int, bytes, bytes]], list[str]]:
    written: list[tuple[str, int, bytes, bytes]] = []
    refused: list[str] = []
    for topic, partition, committed, log_end, log_start in rows:
        try:
            sample = OffsetSample(
                group=group,
                topic=topic,
                partition=partition,
                committed=committed,
                log_end=log_end,
                log_start=log_start,
                sampled_at=sampled_at,
            )
        except ValidationError as exc:
            refused.append(f"{topic}/{partition}: {exc.errors()[0]['msg']}")
            continue
        written.append((topic, partition, partition_key(group, topic, partition), sample.encode()))
    return written, refused


@settings(max_examples=400, deadline=None)
@given(group=st.sampled_from(["fleet", "bad group"]), sampled_at=_times, rows=_rows)
def test_many_at_once_is_the_record_one_at_a_time(
    group: str, sampled_at: float, rows: list[Any]
) -> None:
    refused: list[str] = []
    written = list(encode_samples(group, sampled_at, rows, refused))
    assert (written, refused) == _one_at_a_time(group, sampled_at, rows)


@pytest.mark.parametrize("field", range(5))
def test_every_field_spoilt_every_way_is_refused_or_written_as_the_record_does(
    field: int,
) -> None:
    rows: list[Any] = []
    for value in SPOILT:
        row: list[Any] = ["orders", 3, 2, 5, 1]
        row[field] = value
        rows.append(tuple(row))
    refused: list[str] = []
    written = list(encode_samples("fleet", 1_764_140_000.5, rows, refused))
    assert (written, refused) == _one_at_a_time("fleet", 1_764_140_000.5, rows)
    assert refused
    assert written or field == 0  # a number in range is valid; no spoilt value is a topic


def test_the_record_is_asked_once_a_topic_for_plain_readings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[object] = []
    real = records._sample

    def counted(group: str, sampled_at: float, row: records.SampleRow) -> OffsetSample:
        asked.append(row)
        return real(group, sampled_at, row)

    monkeypatch.setattr(records, "_sample", counted)
    rows: list[records.SampleRow] = [
        (topic, p, p * 2, p * 3, None if p % 2 else p) for topic in ("a", "b") for p in range(500)
    ]
    refused: list[str] = []
    written = list(encode_samples("fleet", 1_764_140_000.5, rows, refused))
    assert len(written) == 1_000
    assert not refused
    assert len(asked) == 2  # one template per topic; no reading went through the model
    assert (written, refused) == _one_at_a_time("fleet", 1_764_140_000.5, list(rows))
