"""A standby reads what the leaders write as they write it, so that its takeover reads
seconds of records, not everything since it last led; a replica leading every shard has
no one to take over from and reads nothing more."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from controller.runtime import ownership
from controller.runtime.ownership import Ownership


class Reads:
    def __init__(self) -> None:
        self.count = 0

    async def catch_up(self) -> None:
        self.count += 1


@pytest.mark.parametrize(("owned", "reads"), [(frozenset({0}), True), (frozenset({0, 1}), False)])
async def test_a_standby_keeps_reading(
    monkeypatch: pytest.MonkeyPatch, owned: frozenset[int], reads: bool
) -> None:
    monkeypatch.setattr(ownership, "WARM_EVERY", 0.01)
    own = Ownership.__new__(Ownership)  # only what keep_warm reads
    own.cfg = SimpleNamespace(ha=SimpleNamespace(shards=2))  # type: ignore[assignment]
    own.election = SimpleNamespace(owned=owned)  # type: ignore[assignment]
    log, constraints = Reads(), Reads()
    own._log, own._constraints = log, constraints  # type: ignore[assignment]
    task = asyncio.create_task(own.keep_warm())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (log.count >= 5) is reads
    assert (constraints.count >= 5) is reads
    assert reads or log.count == constraints.count == 0
