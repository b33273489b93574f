"""Prometheus metrics: ``ballast_`` prefix, base units, bounded labels.

Labels are the configured group names (bounded by configuration), the rebalance reasons,
the input sources and the connection names. Per-member series exist only when
``metrics.per_member`` is on, and are capped at ``per_member_cap`` members per group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controller.core.rebalance import REASONS
from controller.core.views import GroupReading


def _geometric(low: float, high: float, factor: float) -> tuple[float, ...]:
    out = [low]
    while out[-1] < high:
        out.append(float(f"{out[-1] * factor:.4g}"))
    return tuple(out)


#: 0.5 ms to 60 s, each bound 25 % above the last: a quantile read from these (with
#: ``histogram_quantile``'s interpolation) is within 25 % of the true value.
DURATION_BUCKETS = _geometric(0.0005, 60.0, 1.249)
#: ``ballast_partitions_moved_total``'s reasons: a rebalance's, and moves onto a rack.
MOVE_REASONS = (*REASONS, "rack")
_HANDOFF_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class GroupGauges(Collector):
    """Group gauges computed at scrape time from ``source`` (the led groups), so that no
    tick walks all members to keep them current, and a departed member's series goes."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[GroupReading]] = lambda: ()

    def collect(self) -> Iterator[Metric]:
        members = GaugeMetricFamily(
            "ballast_group_members", "Live members per group.", labels=["group"]
        )
        partitions = GaugeMetricFamily(
            "ballast_group_partitions",
            "Partitions per group by state: assigned (granted), unassigned, revoking.",
            labels=["group", "state"],
        )
        imbalance = GaugeMetricFamily(
            "ballast_group_partition_imbalance",
            "Max minus min partitions per member.",
            labels=["group"],
        )
        lag_total = GaugeMetricFamily(
            "ballast_group_lag_messages", "Total lag of a group.", labels=["group"]
        )
        lag_max = GaugeMetricFamily(
            "ballast_group_max_member_lag_messages",
            "Largest lag held by one member.",
            labels=["group"],
        )
        skew = GaugeMetricFamily(
            "ballast_group_lag_skew_ratio",
            "Largest member lag / mean member lag (1 is perfectly even; the mean is over "
            "members subscribed to something).",
            labels=["group"],
        )
        cross_rack = GaugeMetricFamily(
            "ballast_cross_rack_partitions",
            "Partitions assigned to a member whose rack holds none of their replicas, as "
            "Kafka counts them (a partition with no known replica rack counts for a member "
            "with a rack; 0 when no member declares one).",
            labels=["group"],
        )
        violations = GaugeMetricFamily(
            "ballast_constraint_violations",
            "Pins not held by their member and members above their cap in the target "
            "assignment (must be 0; partitions the caps leave unassigned are counted in "
            'ballast_group_partitions{state="unassigned"}).',
            labels=["group"],
        )
        behind = GaugeMetricFamily(
            "ballast_signing_members_behind",
            "Members whose record a previous signing key (or none) signed and that have "
            "not yet acknowledged one signed with the current key: the previous key "
            "(signing.previous_public_keys) is still needed while this is above 0.",
            labels=["group"],
        )
        desired = GaugeMetricFamily(
            "ballast_desired_members",
            "Members the group needs to keep up with headroom and drain its backlog in "
            "time (groups[].autoscale; absent when off): what an autoscaler scales on.",
            labels=["group"],
        )
        member_lag = GaugeMetricFamily(
            "ballast_member_lag_messages",
            "Lag held by a member (opt-in, capped per group).",
            labels=["group", "member"],
        )
        member_partitions = GaugeMetricFamily(
            "ballast_member_partitions",
            "Partitions granted to a member (opt-in, capped per group).",
            labels=["group", "member"],
        )
        for r in self.source():
            members.add_metric([r.group], r.members)
            partitions.add_metric([r.group, "assigned"], r.assigned)
            partitions.add_metric([r.group, "revoking"], r.revoking)
            partitions.add_metric([r.group, "unassigned"], r.unassigned)
            imbalance.add_metric([r.group], r.imbalance)
            lag_total.add_metric([r.group], r.lag_total)
            lag_max.add_metric([r.group], r.lag_max_member)
            skew.add_metric([r.group], r.lag_skew)
            cross_rack.add_metric([r.group], r.cross_rack)
            violations.add_metric([r.group], r.violations)
            behind.add_metric([r.group], r.signing_behind)
            if r.desired_members is not None:
                desired.add_metric([r.group], r.desired_members)
            for member, lag, count in r.per_member:
                member_lag.add_metric([r.group, member], lag)
                member_partitions.add_metric([r.group, member], count)
        yield from (members, partitions, imbalance, lag_total, lag_max, skew, cross_rack)
        yield from (violations, behind, desired)
        yield from (member_lag, member_partitions)

    def describe(self) -> Iterator[Metric]:
        return iter(())


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        # process_cpu_seconds_total, process_resident_memory_bytes, open fds (soak checks)
        ProcessCollector(registry=r)
        self.tasks = Gauge(
            "ballast_asyncio_tasks", "Asyncio tasks alive in the daemon (leak check).", registry=r
        )
        self.tasks.set_function(_task_count)
        self.rebalances = Counter(
            "ballast_rebalances_total",
            "Rebalances by triggering reason.",
            ["group", "reason"],
            registry=r,
        )
        self.moved = Counter(
            "ballast_partitions_moved_total",
            "Partitions whose reader changed, by why: lag, rack (onto a replica's rack), or "
            "the rebalance's reason (join, leave, crash, drain, undrain, constraints, ...).",
            ["group", "reason"],
            registry=r,
        )
        self.group_gauges = GroupGauges()
        r.register(self.group_gauges)
        self.rebalance_latency = Histogram(
            "ballast_rebalance_latency_seconds",
            "From the first event a rebalance absorbed to its records acknowledged by the "
            "broker (includes the rebalance delay it waited).",
            ["group"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.event_to_publish = Histogram(
            "ballast_event_to_publish_seconds",
            "From a rebalance being due (its first event plus the delay it waited) to its "
            "records acknowledged by the broker.",
            ["group"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.unsafe_topic_settings = Gauge(
            "ballast_unsafe_topic_settings",
            "Settings of Ballast's existing topics that put its state at risk, found at "
            "start (each logged as unsafe_topic_setting, with the fix).",
            registry=r,
        )
        self.rebalance_delay = Gauge(
            "ballast_rebalance_delay_seconds",
            "Configured coalescing delay before a membership rebalance (rebalance.delay).",
            registry=r,
        )
        self.assign_seconds = Histogram(
            "ballast_assignment_duration_seconds",
            "Time the incremental assignor took for one rebalance.",
            ["group"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.reconcile_seconds = Histogram(
            "ballast_reconcile_duration_seconds",
            "Time the handoff reconciler took to plan and commit one publication.",
            ["group"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.encode_seconds = Histogram(
            "ballast_encode_duration_seconds",
            "Time to encode one publication's records.",
            ["group"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.publish_seconds = Histogram(
            "ballast_publish_duration_seconds",
            "From handing a publication's records to the producer to the broker "
            "acknowledging all of them (retries included).",
            ["group"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.lag_record_age = Histogram(
            "ballast_lag_record_age_seconds",
            "Age of a lag record from the lag topic when it becomes a weight: now minus "
            "its observed_at, the newest sample's time (poller -> Spark job -> controller).",
            ["group"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.lag_poll = Histogram(
            "ballast_lag_poll_duration_seconds",
            "One poll of a group's offsets (committed, end, start of every subscribed "
            "partition), with its samples written when lag.samples_topic is set.",
            ["group"],
            buckets=DURATION_BUCKETS,
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
        self.stray_claims = Counter(
            "ballast_stray_claims_total",
            "Presence of a member reading partitions no record of this controller grants "
            "it (an older controller's grant not adopted, or a forgery it applied): its "
            "record is written again and the partitions go to nobody else meanwhile.",
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
            "Mutating HTTP requests by action and outcome (ok, denied, disabled, not_found, "
            "invalid, unavailable).",
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
        self.task_failures.labels("group")  # a led group's loop: rebuilt when it fails
        self.recovery_conflicts = Counter(
            "ballast_recovery_conflicts_total",
            "Partitions that two current records granted at once, found while rebuilding a "
            "group (kept by the newer record; the other record is rewritten).",
            ["group"],
            registry=r,
        )
        self.invalid = Counter(
            "ballast_invalid_records_total",
            "Rejected input messages by source (presence, heartbeat, lag, assignment).",
            ["source"],
            registry=r,
        )
        self.connected = Gauge(
            "ballast_connection_up",
            "1 while the connection answers (kafka: the last probe was answered; mqtt: "
            "connected; heartbeats: the reader runs).",
            ["connection"],
            registry=r,
        )
        self.ready = Gauge(
            "ballast_ready", "1 while recovered and every required connection answers.", registry=r
        )
        self.http_connections = Gauge(
            "ballast_http_connections",
            "Connections the HTTP listener holds (api, metrics); at http.max_connections "
            "the one idle longest is closed for a new one.",
            ["listener"],
            registry=r,
        )
        self.http_connections_closed = Counter(
            "ballast_http_connections_closed_total",
            "Connections the HTTP server closed itself, by listener and reason (idle: no "
            "complete request within http.idle_timeout; evicted: the oldest idle one, for a "
            "new connection at the cap; refused: at the cap with every connection busy).",
            ["listener", "reason"],
            registry=r,
        )
        self.keda_streams = Gauge(
            "ballast_keda_streams",
            "StreamIsActive streams the KEDA scaler serves now (keda.max_streams at most).",
            registry=r,
        )
        self.publish_errors = Counter(
            "ballast_publish_errors_total",
            "Failed attempts to publish assignment records.",
            registry=r,
        )

    def start_group(self, group: str) -> None:
        """Export a newly led group's event series at zero, so that ``rate()`` and
        ``increase()`` see its first event (a series born at 1 shows no increase)."""
        for histogram in (
            self.rebalance_latency,
            self.event_to_publish,
            self.assign_seconds,
            self.reconcile_seconds,
            self.encode_seconds,
            self.publish_seconds,
            self.handoff,
        ):
            histogram.labels(group)
        for counter in (self.handoff_timeouts, self.fenced_publications):
            counter.labels(group)
        for reason in MOVE_REASONS:
            self.moved.labels(group, reason)

    def http_closing(self, listener: str) -> Callable[[str], None]:
        """What a listener's guard calls for each connection it closes."""
        closed = self.http_connections_closed
        return lambda reason: closed.labels(listener, reason).inc()


def _task_count() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # scraped from outside the loop's thread: no running loop
        return 0.0
