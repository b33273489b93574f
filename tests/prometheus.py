"""A real Prometheus (Debian's package) for tests, and the dashboard's queries.

Each test that starts one stops it; the scrape interval is one second so rates have
points within a short run.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from controller.tools import embedded

ROOT = Path(__file__).parents[1]
RULES = ROOT / "config" / "prometheus"
DASHBOARD = ROOT / "config" / "grafana" / "ballast.json"
#: The dashboard row that reads the Spark job's metrics (scripts/build_dashboard.py).
PIPELINE_ROW = "Lag pipeline (Spark job)"


def panel_queries(
    rows: set[str] | None = None, skip: set[str] | None = None
) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of the dashboard's panels, in the given
    rows only, or in every row but ``skip``; ``$group`` matches every group."""
    board = json.loads(DASHBOARD.read_text())
    out, row = [], ""
    for panel in board["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        if (rows is not None and row not in rows) or (skip is not None and row in skip):
            continue
        out += [(panel["title"], t["expr"].replace("$group", ".*")) for t in panel["targets"]]
    return out


def query(port: int, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr}
    if at is not None:
        params["time"] = str(at)
    url = f"http://127.0.0.1:{port}/api/v1/query?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def panels_without_data(
    port: int, queries: list[tuple[str, str]], timeout: float = 30.0
) -> list[str]:
    """The queries still without a finite value once ``timeout`` has passed, asked again
    every second until none is: a rate needs two scrapes of its series, and a scrape
    that times out on a loaded machine (after one interval) is simply retried."""
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for title, expr in queries:
            values = [float(r["value"][1]) for r in await asyncio.to_thread(query, port, expr)]
            if not any(math.isfinite(v) for v in values):
                missing.append(f"{title}: {expr} -> {values}")
        if not missing or time.monotonic() > deadline:
            return missing
        await asyncio.sleep(1)


def query_range(port: int, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    params = {"query": expr, "start": str(start), "end": str(end), "step": "1"}
    url = f"http://127.0.0.1:{port}/api/v1/query_range?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        data: list[dict[str, Any]] = json.loads(r.read())["data"]["result"]
        return data


def start_prometheus(
    tmp: Path, target_port: int, rules: bool = True
) -> tuple[subprocess.Popen[bytes], int]:
    """Prometheus scraping ``127.0.0.1:target_port`` every second (job ``ballast``),
    with Ballast's alert rules loaded unless ``rules`` is False."""
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("prometheus is not installed: run scripts/install-tools")
    port = embedded.free_port()
    cfg = tmp / "prometheus.yml"
    rule_files = f"rule_files: ['{RULES / 'ballast-rules.yaml'}']\n" if rules else ""
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        + rule_files
        + "scrape_configs:\n"
        f"  - job_name: ballast\n    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    proc = subprocess.Popen(
        [
            exe,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "prometheus.log").open("w"),
    )
    embedded.wait_for_port(port, 30, proc)
    return proc, port
