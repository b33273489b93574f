"""The dashboard is code (scripts/build_dashboard.py, Grafana's typed SDK); the JSON the
chart ships is its output, checked in. This fails when the two drift apart."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[2]


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_dashboard", ROOT / "scripts" / "build_dashboard.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_dashboard_is_what_the_sdk_script_writes() -> None:
    builder = _builder()
    assert (ROOT / "config" / "grafana" / "ballast.json").read_text() == builder.render(), (
        "config/grafana/ballast.json is stale: run .venv/bin/python scripts/build_dashboard.py"
    )


def test_dashboard_shape() -> None:
    board = json.loads((ROOT / "config" / "grafana" / "ballast.json").read_text())
    panels = board["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))  # Grafana keys panel state by id
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == [
        "Fleet",
        "Movement",
        "Cost of a rebalance",
        "Inputs and connections",
        "Lag pipeline (Spark job)",
    ]
    for p in panels:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"], p["title"]
        assert all(t["expr"] and t["refId"] for t in p["targets"])
    names = {v["name"] for v in board["templating"]["list"]}
    assert names == {"datasource", "group"}
