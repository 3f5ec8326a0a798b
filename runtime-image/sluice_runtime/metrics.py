"""Prometheus metrics of a runtime, derived from the queries' progress reports.

Everything is computed from the queries' progress reports: per-partition lag is the source's
``latestOffset`` minus its ``endOffset`` in the last report, and, every few seconds in between,
the brokers' latest offsets minus that ``endOffset`` (:mod:`sluice_runtime.brokerlag`: the lag
grows while a batch hangs or the JVM does, and after a query had caught up). A report of a
batch that ran (:func:`sluice_runtime.progress.ran_a_batch`) updates the per-batch metrics once
(counters, last batch id and commit time, duration, state, late rows); every report, idle
triggers included, updates the rates, the lag and the watermark delay. Every series of a query
carries its Spark query name (``query``); a driver that goes back to standby drops them all (its
queries stopped: their last values would be stale). docs/chart.md lists the metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from sluice_runtime import malformed
from sluice_runtime.progress import (
    commit_time,
    offsets_without_rows,
    ran_a_batch,
    state_disk_bytes,
    watermark_delay,
)

#: buckets of the takeover gap (seconds from the old driver's last commit to the new one's first)
GAP_BUCKETS = (0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 60.0)


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: str
    lag: int


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    """Parse a Kafka source offset JSON (str or dict): topic -> partition -> offset."""
    import json

    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, dict[str, int]] = {}
    for topic, parts in value.items():
        if isinstance(parts, dict):
            out[str(topic)] = {str(p): int(o) for p, o in parts.items() if isinstance(o, (int, float))}
    return out


def kafka_lag(progress: Mapping[str, Any]) -> list[PartitionLag]:
    """Per-partition lag of every Kafka source of one progress report."""
    lags: list[PartitionLag] = []
    for source in progress.get("sources") or []:
        end = _offsets(source.get("endOffset"))
        latest = _offsets(source.get("latestOffset"))
        for topic, parts in latest.items():
            for partition, latest_offset in parts.items():
                done = end.get(topic, {}).get(partition)
                if done is None:
                    continue
                lags.append(PartitionLag(topic, partition, max(0, latest_offset - done)))
    return lags


def end_offsets(progress: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset one progress report's Kafka sources ended at."""
    out: dict[tuple[str, int], int] = {}
    for source in progress.get("sources") or []:
        for topic, parts in _offsets(source.get("endOffset")).items():
            out.update({(topic, int(partition)): offset for partition, offset in parts.items()})
    return out


def total_lag(progress: Mapping[str, Any]) -> int | None:
    """Records one progress report's query is behind its sources: :func:`kafka_lag` summed over
    every source and partition (a source that reports no ``latestOffset`` adds nothing); None when
    no source of the report has one (nothing is known)."""
    if not any(_offsets(source.get("latestOffset")) for source in progress.get("sources") or []):
        return None
    return sum(lag.lag for lag in kafka_lag(progress))


@dataclass
class RuntimeMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _seen_batches: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _standby: bool = False  # no query series (a monitor of the ended term may still report once)
    #: topic -> source name of the plan's sources that skip lost offsets (``onDataLoss: skip``, or
    #: absent in an older plan): their ``sluice_source_skipped_offsets`` (:meth:`watch_skipping`)
    _skipping: dict[str, str] = field(default_factory=dict)
    #: query -> (topic, partition) -> the offset its last report ended at (:mod:`brokerlag`)
    _ends: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        disable_created_metrics()  # no `_created` series beside every counter and histogram child
        r = self.registry
        q = ["query"]
        self.input_rows = Counter("sluice_input_rows", "Rows read from the sources.", q, registry=r)
        self.processed_batches = Counter("sluice_batches", "Micro-batches completed.", q, registry=r)
        self.input_rate = Gauge(
            "sluice_input_rows_per_second", "Input rate of the last trigger (0 while idle).", q, registry=r
        )
        self.processed_rate = Gauge(
            "sluice_processed_rows_per_second", "Processing rate of the last trigger (0 while idle).", q,
            registry=r,
        )
        self.batch_duration = Gauge(
            "sluice_batch_duration_seconds", "Duration of the last micro-batch.", q, registry=r
        )
        self.last_batch = Gauge(
            "sluice_last_committed_batch_id", "Id of the last completed batch.", q, registry=r
        )
        self.last_commit = Gauge(
            "sluice_last_commit_timestamp_seconds",
            "When the last completed batch committed (unix seconds: its trigger's start plus its duration).",
            q, registry=r,
        )
        self.state_rows = Gauge("sluice_state_rows", "Rows in state stores.", q, registry=r)
        self.state_memory = Gauge("sluice_state_memory_bytes", "Memory used by state stores.", q, registry=r)
        self.state_disk = Gauge(
            "sluice_state_disk_bytes", "Bytes of the state stores' files on local disk (RocksDB SST files).",
            q, registry=r,
        )
        self.late_rows = Counter(
            "sluice_rows_dropped_by_watermark",
            "Input rows the stateful operators dropped as later than the watermark.", q, registry=r,
        )
        self.watermark_delay = Gauge(
            "sluice_watermark_delay_seconds",
            "Processing time of the last report minus the query's event-time watermark.", q, registry=r,
        )
        self.lag = Gauge(
            "sluice_kafka_lag_records",
            "Records behind the latest offset.",
            ["query", "topic", "partition"],
            registry=r,
        )
        self.active = Gauge("sluice_query_active", "1 while the query runs.", q, registry=r)
        self.malformed = Counter(
            "sluice_malformed_records",
            "Malformed source records (all policies).",
            ["query", "source"],
            registry=r,
        )
        self.skipped_offsets = Counter(
            "sluice_source_skipped_offsets",
            "Offsets of a source with onDataLoss skip that its batches read past without a row: records "
            "gone from the topic (retention, deleted records) and, on a transactional topic, its "
            "transaction markers.",
            ["query", "source", "topic"],
            registry=r,
        )
        self.ready = Gauge("sluice_ready", "1 when /readyz answers 200.", registry=r)
        self.api_away = Gauge(
            "sluice_lease_api_away_seconds",
            "How long every renewal of the Lease this driver holds has failed for want of an API server (0 "
            "when the last one did not; an exactly-once holder writes on meanwhile).", registry=r)
        self.role = Gauge("sluice_driver_role", "1 for this driver's current role (active, standby).",
                          ["role"], registry=r)
        self.plan = Gauge("sluice_plan_info", "1 for the plan hash this driver runs.", ["plan_hash"],
                          registry=r)
        self.failovers = Counter("sluice_failovers", "Takeovers of this driver after the active one died "
                                 "or went silent.", registry=r)
        self.handoffs = Counter("sluice_handoffs", "Takeovers of this driver after the active one handed "
                                "over.", registry=r)
        self.takeover_gap = Histogram(
            "sluice_takeover_gap_seconds",
            "Last commit of the previous active driver to the first commit of this one.",
            ["kind"], buckets=GAP_BUCKETS, registry=r,
        )

    def _per_query(self) -> list[Any]:
        """The metrics with a ``query`` label."""
        return [self.input_rows, self.processed_batches, self.input_rate, self.processed_rate,
                self.batch_duration, self.last_batch, self.last_commit, self.state_rows, self.state_memory,
                self.state_disk, self.late_rows, self.watermark_delay, self.lag, self.active, self.malformed,
                self.skipped_offsets]

    def set_role(self, role: str) -> None:
        """A standby drops every query's series and takes no progress until it is active again:
        its queries stopped (the term ended), so their last values would read as current, and be
        summed with the new active driver's."""
        for name in ("active", "standby"):
            self.role.labels(name).set(1 if name == role else 0)
        with self._lock:
            self._standby = role != "active"
            if self._standby:
                for metric in self._per_query():
                    metric.clear()
                self._seen_batches.clear()
                self._ends.clear()

    def partition_ends(self) -> dict[str, dict[tuple[str, int], int]]:
        """Query -> (topic, partition) -> where its last report ended (nothing while standby)."""
        with self._lock:
            return {} if self._standby else {q: dict(ends) for q, ends in self._ends.items()}

    def set_lag(self, query: str, lags: Iterable[PartitionLag]) -> None:
        """The lag of a query's partitions as measured at the brokers (:mod:`brokerlag`)."""
        with self._lock:
            if self._standby or query not in self._ends:
                return  # the term ended meanwhile: no series of a stopped query
            for lag in lags:
                self.lag.labels(query, lag.topic, lag.partition).set(lag.lag)

    def watch_skipping(self, sources: Mapping[str, str]) -> None:
        """Count skipped offsets of these sources (topic -> source name) from now on."""
        with self._lock:
            self._skipping = dict(sources)

    def observe_progress(self, query: str, progress: Mapping[str, Any] | None, active: bool) -> None:
        """Update from one progress report of a query: its rates, lag and watermark delay from any
        report; the per-batch metrics once per batch that ran (an idle trigger reports the *next*
        batch id, which must not count as that batch)."""
        with self._lock:
            if self._standby:
                return
            self.active.labels(query).set(1 if active else 0)
            if not progress:
                return
            self.input_rate.labels(query).set(float(progress.get("inputRowsPerSecond") or 0.0))
            self.processed_rate.labels(query).set(float(progress.get("processedRowsPerSecond") or 0.0))
            for lag in kafka_lag(progress):
                self.lag.labels(query, lag.topic, lag.partition).set(lag.lag)
            ends = end_offsets(progress)
            if ends:
                self._ends[query] = ends
            delay = watermark_delay(progress)
            if delay is not None:
                self.watermark_delay.labels(query).set(delay)
            batch = int(progress.get("batchId", -1))
            if not ran_a_batch(progress) or self._seen_batches.get(query, -1) >= batch:
                return
            self._seen_batches[query] = batch
            self.last_batch.labels(query).set(batch)
            committed = commit_time(progress)
            if committed is not None:
                self.last_commit.labels(query).set(committed)
            self.processed_batches.labels(query).inc()
            self.input_rows.labels(query).inc(int(progress.get("numInputRows") or 0))
            durations = progress.get("durationMs") or {}
            self.batch_duration.labels(query).set(float(durations.get("triggerExecution") or 0) / 1000.0)
            ops = progress.get("stateOperators") or []
            self.state_rows.labels(query).set(sum(int(o.get("numRowsTotal") or 0) for o in ops))
            self.state_memory.labels(query).set(sum(int(o.get("memoryUsedBytes") or 0) for o in ops))
            disk = state_disk_bytes(progress)
            if disk is not None:
                self.state_disk.labels(query).set(disk)
            if ops:  # a stateful query: its counter exists from 0 on, so rate() sees the first drop
                late = sum(int(o.get("numRowsDroppedByWatermark") or 0) for o in ops)
                self.late_rows.labels(query).inc(late)
            for source, count in malformed.observed_counts(dict(progress)).items():
                if count:
                    self.malformed.labels(query, source).inc(count)
            skipped = offsets_without_rows(progress)
            for topic, name in self._skipping.items():  # from 0 on, so rate() sees the first skip
                self.skipped_offsets.labels(query, name, topic).inc(skipped.get(topic, 0))

    def observe_recent(self, query: str, progresses: Iterable[Mapping[str, Any]], active: bool) -> None:
        """Update from a query's recent progress reports (oldest first); counts each batch once."""
        items = sorted(progresses, key=lambda p: int(p.get("batchId", -1)))
        if not items:
            self.observe_progress(query, None, active)
        for progress in items:
            self.observe_progress(query, progress, active)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
