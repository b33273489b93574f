"""The dashboard and alert rules against a real Prometheus scraping a running Ballast.

A controller on the embedded brokers serves a small fleet that joins, leaves and crashes,
and receives one invalid message. Debian's Prometheus scrapes it every second. Then:
every dashboard panel query returns data, the alert rules pass ``promtool check rules`` and
``promtool test rules``, every metric an alert reads exists, and the main panels are
rendered to a PNG from the same run (``BALLAST_DASHBOARD_PNG`` names where; the script
``scripts/render_dashboard`` keeps ``docs/dashboard.png``).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import aiomqtt
import matplotlib
import pytest
import yaml

from controller.runtime.daemon import Controller
from controller.runtime.http import serve
from controller.tools import embedded
from controller.tools.simfleet import Fleet
from tests.brokers import make_config
from tests.prometheus import (
    PIPELINE_ROW,
    RULES,
    panel_queries,
    panels_without_data,
    query,
    query_range,
    start_prometheus,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt

pytestmark = pytest.mark.integration


def test_promtool_checks_and_unit_tests_the_alert_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run scripts/install-tools")
    for args in (
        ["check", "rules", "ballast-rules.yaml"],
        ["test", "rules", "ballast-rules.test.yaml"],
    ):
        result = subprocess.run(
            [promtool, *args], cwd=RULES, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


def _moved(ctl: Controller, group: str) -> dict[str, float]:
    """``ballast_partitions_moved_total`` of ``group`` by reason."""
    return {
        s.labels["reason"]: s.value
        for family in ctl.metrics.registry.collect()
        if family.name == "ballast_partitions_moved"
        for s in family.samples
        if s.name.endswith("_total") and s.labels.get("group") == group
    }


def _grew(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


async def test_every_panel_and_alert_metric_has_data_from_a_running_ballast(
    kafka: embedded.BrokerProcess,
    mqtt: embedded.BrokerProcess,
    names: tuple[str, str],
    topic: str,
    tmp_path: Path,
) -> None:
    group = names[0]
    cfg = make_config(
        kafka,
        mqtt,
        group,
        lag={"source": "poll", "poll_interval": 0.5},
        metrics={"per_member": True, "per_member_cap": 10},
        rebalance={"delay": 0.2, "leave_grace": 0.5, "handoff_timeout": 5.0},
    )
    ctl = Controller(cfg)
    runner = await serve(ctl, "127.0.0.1", 0)
    prom, prom_port = start_prometheus(tmp_path, runner.port)
    fleet = Fleet(kafka.address, mqtt.port, group, keepalive=1)
    started = time.time()
    try:
        await ctl.start()
        await fleet.start()
        # Scraping must have begun before anything happens, or rates see no change.
        await fleet.wait_for(lambda: bool(query(prom_port, 'up{job="ballast"} == 1')), timeout=30)
        await asyncio.sleep(2)
        for name in ("a", "b"):
            await fleet.join(name, [topic])
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6]
        )
        await asyncio.sleep(2)
        # The value of each event metric after each scripted event, not only its presence.
        before = _moved(ctl, group)
        await fleet.join("c", [topic])  # handoffs: a and b revoke, c is granted
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [4, 4, 4]
        )
        await asyncio.sleep(2)
        assert _grew(before, _moved(ctl, group)) == {"join": 4}
        before = _moved(ctl, group)
        await fleet.leave("a")
        await fleet.wait_for(
            lambda: sorted(len(m.partitions) for m in fleet.members.values()) == [6, 6]
        )
        await asyncio.sleep(2)
        assert _grew(before, _moved(ctl, group)) == {"leave": 4}
        before = _moved(ctl, group)
        await fleet.crash("b")
        await fleet.wait_for(lambda: len(fleet.members["c"].partitions) == 12, timeout=30)
        assert _grew(before, _moved(ctl, group)) == {"crash": 6}
        sample = ctl.metrics.registry.get_sample_value
        assert sample("ballast_rebalances_total", {"group": group, "reason": "crash"}) == 1
        assert sample("ballast_group_members", {"group": group}) == 1
        assert sample("ballast_group_partitions", {"group": group, "state": "assigned"}) == 12
        assert sample("ballast_group_partitions", {"group": group, "state": "unassigned"}) == 0
        invalid = sample("ballast_invalid_records_total", {"source": "presence"}) or 0.0
        async with aiomqtt.Client("127.0.0.1", mqtt.port) as client:
            await client.publish(f"ballast/{group}/members/zz", b"not json", qos=1)
        await asyncio.sleep(4)  # a few scrapes after the last event
        assert sample("ballast_invalid_records_total", {"source": "presence"}) == invalid + 1
        assert sample("ballast_connection_up", {"connection": "kafka"}) == 1
        assert sample("ballast_connection_up", {"connection": "mqtt"}) == 1
        assert sample("ballast_ready", {}) == 1
        # The pipeline row reads the Spark job's metrics: tests/pipeline/test_pipeline_e2e.py.
        missing = await panels_without_data(prom_port, panel_queries(skip={PIPELINE_ROW}))
        assert not missing, "dashboard queries without (finite) data:\n" + "\n".join(missing)

        rules = yaml.safe_load((RULES / "ballast-rules.yaml").read_text())
        for rule in rules["groups"][0]["rules"]:
            for metric in set(re.findall(r"ballast_[a-z_]+", rule["expr"])):
                assert query(prom_port, metric), f"{rule['alert']}: no series for {metric}"
        end = time.time()
        render_png(
            prom_port,
            started,
            end,
            Path(os.environ.get("BALLAST_DASHBOARD_PNG", tmp_path / "dashboard.png")),
        )
    finally:
        await fleet.stop()
        await ctl.stop()
        await runner.cleanup()
        prom.terminate()
        prom.wait(20)


def render_png(port: int, start: float, end: float, out: Path) -> None:
    """The main panels as Grafana would plot them, from Prometheus range queries."""
    wanted = [
        "Members",
        "Partitions by state",
        "Rebalances by reason (per min)",
        "Partitions moved by reason (5m)",
        "Handoff duration",
        "Total lag",
    ]
    queries = panel_queries()
    main = [next(q for q in queries if q[0] == title) for title in wanted]  # first target each
    fig, axes = plt.subplots(3, 2, figsize=(12, 9))
    for ax, (title, expr) in zip(axes.flat, main, strict=False):
        for series in query_range(port, expr, start, end):
            points = [
                (float(t) - start, float(v)) for t, v in series["values"] if math.isfinite(float(v))
            ]
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            label = ",".join(
                f"{k}={v}"
                for k, v in series["metric"].items()
                if k not in ("__name__", "job", "instance")
            )
            ax.plot(xs, ys, label=label or title)
        ax.set_title(title)
        ax.set_xlabel("seconds into the run")
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("Ballast dashboard (queries against a real Prometheus scraping a real run)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    assert out.stat().st_size > 10_000
