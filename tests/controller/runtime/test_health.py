"""``Health`` is the one place readiness, ``ballast_connection_up`` and ``/v1/health``
read; the controller's supervisor records every failure of a background task there."""

from __future__ import annotations

import pytest

from controller.config import Config
from controller.runtime import daemon
from controller.runtime.daemon import Controller
from controller.runtime.health import Health
from controller.runtime.metrics import Metrics


def _gauge(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value("ballast_connection_up", {"connection": name})


def test_links_set_the_gauge_and_say_when_they_change() -> None:
    metrics = Metrics()
    changes: list[int] = []
    health = Health(metrics, on_change=lambda: changes.append(1))
    health.required = {"kafka", "mqtt"}
    assert health.unreachable() == ["kafka", "mqtt"]  # never observed: not up
    assert health.link("kafka", True) is True
    assert health.link("kafka", True) is False  # no change, no callback
    assert _gauge(metrics, "kafka") == 1
    assert health.link("kafka", False, "no broker answered") is True
    assert _gauge(metrics, "kafka") == 0
    health.link("mqtt", True)
    assert health.unreachable() == ["kafka"]
    view = health.view()["connections"]
    assert isinstance(view, dict)
    assert view["kafka"]["up"] is False
    assert view["kafka"]["last_error"] == "no broker answered"
    health.link("kafka", True)
    assert health.view()["connections"]["kafka"]["last_error"] == "no broker answered"  # type: ignore[index]
    assert health.unreachable() == []
    assert len(changes) == 4


async def test_a_failing_task_is_restarted_with_backoff_and_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(daemon, "TASK_FIRST_BACKOFF", 0.01)
    ctl = Controller(Config.model_validate({"groups": [{"name": "g"}]}))
    attempts = 0

    async def flaky() -> None:
        nonlocal attempts
        attempts += 1
        if attempts <= 2:
            raise ConnectionError(f"attempt {attempts}")

    await ctl._guard(flaky, "flaky")
    assert attempts == 3
    record = ctl.health.tasks["flaky"]
    assert (record.failures, record.last_error) == (2, "ConnectionError('attempt 2')")
    assert record.restarting_at is None  # running again (here: done)
    count = ctl.metrics.registry.get_sample_value("ballast_task_failures_total", {"task": "flaky"})
    assert count == 2
    view = ctl.health.view()["tasks"]
    assert view["flaky"]["state"] == "running"  # type: ignore[index]
