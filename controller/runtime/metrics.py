"""Prometheus metrics: ``ballast_`` prefix, base units, bounded labels.

Labels are the configured group names (bounded by configuration), the rebalance reasons,
the input sources and the connection names. Per-member series exist only when
``metrics.per_member`` is on, and are capped at ``per_member_cap`` members per group.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_HANDOFF_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        # process_cpu_seconds_total, process_resident_memory_bytes, open fds (soak checks)
        ProcessCollector(registry=r)
        self.tasks = Gauge(
            "ballast_asyncio_tasks", "Asyncio tasks alive in the daemon (leak check).", registry=r
        )
        self.tasks.set_function(_task_count)
        self.members = Gauge(
            "ballast_group_members", "Live members per group.", ["group"], registry=r
        )
        self.partitions = Gauge(
            "ballast_group_partitions",
            "Partitions per group by state: assigned (granted), unassigned, revoking.",
            ["group", "state"],
            registry=r,
        )
        self.rebalances = Counter(
            "ballast_rebalances_total",
            "Rebalances by triggering reason.",
            ["group", "reason"],
            registry=r,
        )
        self.moved = Counter(
            "ballast_partitions_moved_total",
            "Partitions taken from a still-present owner, by reason (balance or lag).",
            ["group", "reason"],
            registry=r,
        )
        self.rebalance_latency = Histogram(
            "ballast_rebalance_latency_seconds",
            "From the first event a rebalance absorbed to its records being published "
            "(includes rebalance_delay).",
            ["group"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.compute_seconds = Histogram(
            "ballast_rebalance_compute_seconds",
            "Time to compute and publish one rebalance, excluding the coalescing delay.",
            ["group"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.handoff = Histogram(
            "ballast_handoff_duration_seconds",
            "From a partition's revoke being published to its grant to the new owner.",
            ["group"],
            buckets=_HANDOFF_BUCKETS,
            registry=r,
        )
        self.handoff_timeouts = Counter(
            "ballast_handoff_timeouts_total",
            "Revokes never acknowledged within handoff_timeout (owner declared dead).",
            ["group"],
            registry=r,
        )
        self.lag_total = Gauge(
            "ballast_group_lag_messages", "Total lag of a group.", ["group"], registry=r
        )
        self.lag_max_member = Gauge(
            "ballast_group_max_member_lag_messages",
            "Largest lag held by one member.",
            ["group"],
            registry=r,
        )
        self.lag_skew = Gauge(
            "ballast_group_lag_skew_ratio",
            "Largest member lag / mean member lag (1 is perfectly even).",
            ["group"],
            registry=r,
        )
        self.imbalance = Gauge(
            "ballast_group_partition_imbalance",
            "Max minus min partitions per member.",
            ["group"],
            registry=r,
        )
        self.generation = Gauge(
            "ballast_group_generation",
            "Generation of the latest published assignment.",
            ["group"],
            registry=r,
        )
        self.epoch = Gauge(
            "ballast_controller_epoch", "This controller's epoch per group.", ["group"], registry=r
        )
        self.admin_requests = Counter(
            "ballast_admin_requests_total",
            "Mutating HTTP requests by action and outcome (ok, denied, disabled, not_found).",
            ["action", "outcome"],
            registry=r,
        )
        self.leader = Gauge(
            "ballast_group_leader",
            "1 while this replica leads the group (groups come from the config: bounded).",
            ["group"],
            registry=r,
        )
        self.leadership_changes = Counter(
            "ballast_leadership_changes_total",
            "Groups this replica started or stopped leading.",
            ["change"],
            registry=r,
        )
        self.fenced_publications = Counter(
            "ballast_fenced_publications_total",
            "Publications withheld because the coordinator no longer confirmed leadership.",
            ["group"],
            registry=r,
        )
        self.task_failures = Counter(
            "ballast_task_failures_total",
            "Background tasks that failed and were restarted, by kind (a failed group task "
            "is rebuilt from the assignments topic; the daemon is not ready meanwhile).",
            ["task"],
            registry=r,
        )
        self.recovery_conflicts = Counter(
            "ballast_recovery_conflicts_total",
            "Partitions that two current records granted at once, found while rebuilding a "
            "group (kept by the newer record; the other record is rewritten).",
            ["group"],
            registry=r,
        )
        self.invalid = Counter(
            "ballast_invalid_messages_total",
            "Rejected input messages by source (presence, heartbeat, lag, assignment).",
            ["source"],
            registry=r,
        )
        self.connected = Gauge(
            "ballast_connection_up", "1 when the connection is up.", ["connection"], registry=r
        )
        self.ready = Gauge("ballast_ready", "1 once recovered and connected.", registry=r)
        self.publish_errors = Counter(
            "ballast_publish_errors_total",
            "Failed attempts to publish assignment records.",
            registry=r,
        )
        self.member_lag = Gauge(
            "ballast_member_lag_messages",
            "Lag held by a member (opt-in, capped per group).",
            ["group", "member"],
            registry=r,
        )
        self.member_partitions = Gauge(
            "ballast_member_partitions",
            "Partitions granted to a member (opt-in, capped per group).",
            ["group", "member"],
            registry=r,
        )


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # scraped from outside the loop's thread: no running loop
        return 0.0
