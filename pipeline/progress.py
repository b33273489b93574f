"""Per-micro-batch progress of the lag job as metrics and log lines.

Spark reports each batch to a listener on the driver; the job's ``observe`` metrics
(samples, invalid samples, records written...) arrive with it, so nothing is counted
twice and nothing needs an accumulator.
"""

from __future__ import annotations

from typing import Any
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener


class PipelineMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.samples = Counter(
            "ballast_pipeline_samples_total", "Offset samples read", registry=registry
        )
        self.invalid = Counter(
            "ballast_pipeline_invalid_samples_total",
            "Samples rejected by validation (see the pipeline_invalid_samples log line)",
            registry=registry,
        )
        self.late = Counter(
            "ballast_pipeline_late_samples_total",
            "Samples behind the watermark, dropped",
            registry=registry,
        )
        self.duplicates = Counter(
            "ballast_pipeline_duplicate_samples_total",
            "Samples whose event time was already recorded for the partition",
            registry=registry,
        )
        self.written = Counter(
            "ballast_pipeline_lag_records_total",
            "Records written to the lag topic",
            ["kind"],
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "ballast_pipeline_batch_duration_seconds",
            "Wall time of one micro-batch",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.partitions = Gauge(
            "ballast_pipeline_tracked_partitions",
            "Partitions held by the state buckets the last batch of samples touched "
            "(all of them when every partition is sampled in each batch)",
            registry=registry,
        )


def _get(row: Any, name: str) -> Any:
    return None if row is None else row[name]


class ProgressReporter(StreamingQueryListener):
    def __init__(self, metrics: PipelineMetrics) -> None:
        self.metrics = metrics
        self.log = structlog.get_logger("ballast.pipeline")
        self._server: WSGIServer | None = None

    @classmethod
    def install(cls, spark: SparkSession, metrics_port: int) -> ProgressReporter:
        """Listen to ``spark``'s queries; serve ``/metrics`` on ``metrics_port`` (0: no)."""
        registry = CollectorRegistry()
        reporter = cls(PipelineMetrics(registry))
        if metrics_port:
            reporter._server, _ = start_http_server(metrics_port, registry=registry)
        spark.streams.addListener(reporter)
        return reporter

    def close(self, spark: SparkSession) -> None:
        """Stop listening and serving (the server would otherwise outlive the job)."""
        spark.streams.removeListener(self)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def onQueryStarted(self, event: Any) -> None:
        self.log.info("pipeline_query_started", id=str(event.id), name=event.name)

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        obs = p.observedMetrics
        samples, records = obs.get("samples"), obs.get("lag_records")
        m = self.metrics
        rows = _get(samples, "rows") or 0
        invalid = (_get(samples, "invalid") or 0) + (_get(records, "invalid") or 0)
        firsts = [f for f in (_get(samples, "first_invalid"), _get(records, "first_invalid")) if f]
        late = (_get(records, "late") or 0) + sum(
            s.numRowsDroppedByWatermark for s in p.stateOperators
        )
        m.samples.inc(rows)
        m.invalid.inc(invalid)
        m.late.inc(late)
        m.duplicates.inc(_get(records, "duplicates") or 0)
        m.written.labels("record").inc(_get(records, "records") or 0)
        m.written.labels("tombstone").inc(_get(records, "tombstones") or 0)
        m.batch_seconds.observe(p.batchDuration / 1000)
        if rows:  # a batch of timeouts alone touches only some buckets
            m.partitions.set(_get(records, "tracked") or 0)
        if invalid:
            self.log.warning(
                "pipeline_invalid_samples",
                batch=p.batchId,
                count=invalid,
                first=min(firsts, default=None),
            )
        if rows:
            self.log.info(
                "pipeline_batch",
                batch=p.batchId,
                samples=rows,
                late=late,
                records=_get(records, "records"),
                tombstones=_get(records, "tombstones"),
                duration_s=p.batchDuration / 1000,
            )

    def onQueryIdle(self, event: Any) -> None:
        """Nothing new: no batch, nothing to report."""

    def onQueryTerminated(self, event: Any) -> None:
        self.log.info("pipeline_query_terminated", id=str(event.id), error=event.exception)
