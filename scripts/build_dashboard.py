"""Write config/grafana/ballast.json: the operator dashboard, as code with Grafana's own
typed SDK (grafana-foundation-sdk, pinned in the `dashboards` extra so the output is
reproducible). One panel per entry in ROWS below.

Run after changing ROWS (`.venv/bin/python scripts/build_dashboard.py`);
tests/helm/test_dashboard.py fails when the checked-in JSON drifts from this script, and
tests/controller/runtime/test_observability.py checks every query against a real
Prometheus scraping a running Ballast.
"""

from __future__ import annotations

import json
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
)

OUT = Path(__file__).parents[1] / "config" / "grafana" / "ballast.json"
G = '{group=~"$group"}'
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")

Panel = tuple[str, str, list[tuple[str, str]]]  # title, unit, [(legend, PromQL)]


def p(q: float, histogram: str, labels: str = G) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{labels}[5m])))"


def p50_p99(histogram: str, labels: str = G) -> list[tuple[str, str]]:
    return [("p50", p(0.5, histogram, labels)), ("p99", p(0.99, histogram, labels))]


#: The row whose panels read the Spark lag job's metrics (``pipeline.metrics_port`` on
#: its driver), not the controller's: tests check it against a running job.
PIPELINE_ROW = "Lag pipeline (Spark job)"


#: The dashboard, row by row: what an SRE asks first (is every partition owned, is lag
#: even), then why things moved, what a rebalance costs, and whether the inputs are sound.
ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Fleet",
        [
            ("Members", "short", [("{{group}}", f"ballast_group_members{G}")]),
            (
                "Partitions by state",
                "short",
                [("{{group}} {{state}}", f"ballast_group_partitions{G}")],
            ),
            ("Total lag", "short", [("{{group}}", f"ballast_group_lag_messages{G}")]),
            (
                "Lag skew (largest / mean member lag)",
                "short",
                [("{{group}}", f"ballast_group_lag_skew_ratio{G}")],
            ),
            (
                "Lag per member (opt-in series)",
                "short",
                [("{{member}}", f"ballast_member_lag_messages{G}")],
            ),
            (
                "Partition-count imbalance (max - min)",
                "short",
                [("{{group}}", f"ballast_group_partition_imbalance{G}")],
            ),
            (
                "Cross-rack partitions (no replica in the member's rack)",
                "short",
                [("{{group}}", f"ballast_cross_rack_partitions{G}")],
            ),
        ],
    ),
    (
        "Movement",
        [
            (
                "Rebalances by reason (per min)",
                "short",
                [("{{reason}}", f"sum by (reason) (rate(ballast_rebalances_total{G}[5m])) * 60")],
            ),
            (
                "Partitions moved by reason (5m)",
                "short",
                [
                    (
                        "{{reason}}",
                        f"sum by (reason) (increase(ballast_partitions_moved_total{G}[5m]))",
                    )
                ],
            ),
            ("Rebalance latency", "s", p50_p99("ballast_rebalance_latency_seconds")),
            ("Handoff duration", "s", p50_p99("ballast_handoff_duration_seconds")),
        ],
    ),
    (
        "Cost of a rebalance",
        [
            (
                "Compute vs publish, p99 (engine, reconciler, encoding, publication)",
                "s",
                [
                    (name, p(0.99, f"ballast_{metric}"))
                    for name, metric in (
                        ("assignment", "assignment_duration_seconds"),
                        ("reconcile", "reconcile_duration_seconds"),
                        ("encode", "encode_duration_seconds"),
                        ("publish", "publish_duration_seconds"),
                    )
                ],
            ),
            (
                "Due → published (after the configured delay)",
                "s",
                p50_p99("ballast_event_to_publish_seconds"),
            ),
        ],
    ),
    (
        "Inputs and connections",
        [
            (
                "Invalid messages by source (per min)",
                "short",
                [("{{source}}", "sum by (source) (rate(ballast_invalid_records_total[5m])) * 60")],
            ),
            ("Connections up", "short", [("{{connection}}", "ballast_connection_up")]),
        ],
    ),
    (
        PIPELINE_ROW,
        [
            (
                "Throughput: samples in, lag records out (per s)",
                "short",
                [
                    ("samples", "sum(rate(ballast_pipeline_samples_total[5m]))"),
                    (
                        "{{kind}} records",
                        "sum by (kind) (rate(ballast_pipeline_lag_records_total[5m]))",
                    ),
                ],
            ),
            (
                "Micro-batch duration",
                "s",
                p50_p99("ballast_pipeline_batch_duration_seconds", labels=""),
            ),
            (
                "Partitions with state",
                "short",
                [("partitions", "sum(ballast_pipeline_tracked_partitions)")],
            ),
            (
                "Samples not used (per min)",
                "short",
                [
                    (why, f"sum(rate(ballast_pipeline_{why}_samples_total[5m])) * 60")
                    for why in ("invalid", "late", "duplicate")
                ],
            ),
        ],
    ),
]


def panel(title: str, unit: str, targets: list[tuple[str, str]]) -> timeseries.Panel:
    built = (
        timeseries.Panel()
        .title(title)
        .unit(unit)
        .datasource(DATASOURCE)
        .height(8)
        .span(12)
        .fill_opacity(10)
    )
    for i, (legend, expr) in enumerate(targets):
        built = built.with_target(
            prometheus.Dataquery()
            .expr(expr)
            .legend_format(legend)
            .ref_id(chr(65 + i))
            .datasource(DATASOURCE)
        )
    return built


def build() -> dashboard.Dashboard:
    board = (
        dashboard.Dashboard("Ballast")
        .uid("ballast-overview")
        .tags(["ballast", "kafka"])
        .refresh("30s")
        .time("now-1h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            dashboard.QueryVariable("group")
            .label("Group")
            .datasource(DATASOURCE)
            .query("label_values(ballast_group_members, group)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    )
    ids = iter(range(1, 1000))
    for row, panels in ROWS:
        board = board.with_row(dashboard.Row(row).id(next(ids)))
        for title, unit, targets in panels:
            board = board.with_panel(panel(title, unit, targets).id(next(ids)))
    return board


def render() -> str:
    return (
        json.dumps(
            json.loads(JSONEncoder(sort_keys=True, indent=2).encode(build().build())), indent=2
        )
        + "\n"
    )


def main() -> None:
    OUT.write_text(render())


if __name__ == "__main__":
    main()
