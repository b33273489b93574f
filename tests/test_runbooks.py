"""Every alert links a runbook section that exists (docs/runbooks.md), and every section
is an alert's: a renamed alert or heading fails here."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[1]


def test_every_alert_has_a_runbook_and_every_runbook_an_alert() -> None:
    rules = yaml.safe_load((ROOT / "config/prometheus/ballast-rules.yaml").read_text())
    links = {r["alert"]: r["annotations"].get("runbook_url") for r in rules["groups"][0]["rules"]}
    headings = re.findall(r"^## (\w+)$", (ROOT / "docs/runbooks.md").read_text(), re.M)
    assert links == {alert: f"docs/runbooks.md#{alert.lower()}" for alert in links}
    assert sorted(headings) == sorted(links)
