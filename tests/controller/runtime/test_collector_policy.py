"""When the daemon freezes a group's state: once per mass change, when it settles."""

from __future__ import annotations

import pytest

from controller.runtime import collector_policy
from controller.runtime.collector_policy import Waves


@pytest.fixture
def freezes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    done: list[int] = []
    monkeypatch.setattr(collector_policy, "built", lambda: done.append(1))
    return done


def test_a_mass_change_freezes_once_when_it_settles(freezes: list[int]) -> None:
    """A scale-out's handoffs re-grant most receivers in each of many publications:
    freezing after each stalled the loop for a full collection every time."""
    waves = Waves()
    waves.stepped(1000, 1000, settled=False)  # the step's revokes and new members
    for _ in range(20):  # grants as the revokes are acknowledged
        waves.stepped(600, 1000, settled=False)
        waves.stepped(0, 1000, settled=False)
    assert freezes == []
    waves.stepped(0, 1000, settled=True)  # the last acknowledgement: no publication
    assert freezes == [1]
    waves.stepped(0, 1000, settled=True)
    assert freezes == [1]


def test_small_publications_never_freeze(freezes: list[int]) -> None:
    """Lag moves of a few partitions, however many, are not a mass change."""
    waves = Waves()
    for settled in [False, True] * 500:
        waves.stepped(4, 1000, settled=settled)
    waves.stepped(99, 10, settled=True)  # below the floor, whatever the group's size
    assert freezes == []
    waves.stepped(100, 10, settled=True)
    assert freezes == [1]
