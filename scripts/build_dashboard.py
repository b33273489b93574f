"""Write config/grafana/ballast.json: the operator dashboard, one panel per query below.

Run after changing PANELS; tests/observability checks every query against a real
Prometheus scraping a running Ballast.
"""

from __future__ import annotations

import json
from pathlib import Path

G = '{group=~"$group"}'
#: (title, unit, [(legend, PromQL)])
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("Members", "short", [("{{group}}", f"ballast_group_members{G}")]),
    ("Partitions by state", "short", [("{{group}} {{state}}", f"ballast_group_partitions{G}")]),
    (
        "Rebalances by reason (per min)",
        "short",
        [("{{reason}}", f"sum by (reason) (rate(ballast_rebalances_total{G}[5m])) * 60")],
    ),
    (
        "Partitions moved by reason (5m)",
        "short",
        [("{{reason}}", f"sum by (reason) (increase(ballast_partitions_moved_total{G}[5m]))")],
    ),
    (
        "Rebalance latency",
        "s",
        [
            (
                "p50",
                f"histogram_quantile(0.5, sum by (le) (rate(ballast_rebalance_latency_seconds_bucket{G}[5m])))",
            ),
            (
                "p99",
                f"histogram_quantile(0.99, sum by (le) (rate(ballast_rebalance_latency_seconds_bucket{G}[5m])))",
            ),
        ],
    ),
    (
        "Cost of one step, p99 (engine, reconciler, encoding, publication)",
        "s",
        [
            (
                name,
                f"histogram_quantile(0.99, sum by (le) (rate(ballast_{metric}_bucket{G}[5m])))",
            )
            for name, metric in (
                ("assignment", "assignment_duration_seconds"),
                ("reconcile", "reconcile_duration_seconds"),
                ("encode", "encode_duration_seconds"),
                ("publish", "publish_duration_seconds"),
                ("due → published", "event_to_publish_seconds"),
            )
        ],
    ),
    (
        "Handoff duration",
        "s",
        [
            (
                "p50",
                f"histogram_quantile(0.5, sum by (le) (rate(ballast_handoff_duration_seconds_bucket{G}[5m])))",
            ),
            (
                "p99",
                f"histogram_quantile(0.99, sum by (le) (rate(ballast_handoff_duration_seconds_bucket{G}[5m])))",
            ),
        ],
    ),
    ("Total lag", "short", [("{{group}}", f"ballast_group_lag_messages{G}")]),
    (
        "Lag per member (opt-in series)",
        "short",
        [("{{member}}", f"ballast_member_lag_messages{G}")],
    ),
    (
        "Lag skew (largest / mean member lag)",
        "short",
        [("{{group}}", f"ballast_group_lag_skew_ratio{G}")],
    ),
    (
        "Partition-count imbalance (max - min)",
        "short",
        [("{{group}}", f"ballast_group_partition_imbalance{G}")],
    ),
    (
        "Invalid messages by source (per min)",
        "short",
        [("{{source}}", "sum by (source) (rate(ballast_invalid_messages_total[5m])) * 60")],
    ),
    ("Connections up", "short", [("{{connection}}", "ballast_connection_up")]),
]


def dashboard() -> dict[str, object]:
    panels = []
    for i, (title, unit, targets) in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": chr(65 + j),
                        "expr": expr,
                        "legendFormat": legend,
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    }
                    for j, (legend, expr) in enumerate(targets)
                ],
            }
        )
    return {
        "uid": "ballast-overview",
        "title": "Ballast",
        "tags": ["ballast", "kafka"],
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Data source",
                },
                {
                    "name": "group",
                    "type": "query",
                    "label": "Group",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {
                        "query": "label_values(ballast_group_members, group)",
                        "refId": "groups",
                    },
                    "definition": "label_values(ballast_group_members, group)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def main() -> None:
    out = Path(__file__).parents[1] / "config" / "grafana" / "ballast.json"
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")


if __name__ == "__main__":
    main()
