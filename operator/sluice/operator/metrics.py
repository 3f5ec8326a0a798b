"""Prometheus metrics of the operator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from sluice.core.status import PHASES


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.reconcile_seconds = Histogram(
            "sluice_operator_reconcile_duration_seconds", "Time of one reconcile.",
            ["kind", "action"], registry=registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.reconcile_errors = Counter(
            "sluice_operator_reconcile_errors_total", "Reconciles that ended in an error.",
            ["kind", "reason"], registry=registry,
        )
        self.queries = Gauge(
            "sluice_operator_queries", "StreamingQueries per phase.", ["phase"], registry=registry,
        )
        self.transitions = Counter(
            "sluice_operator_phase_transitions_total", "Phase transitions of StreamingQueries.",
            ["from_phase", "to_phase"], registry=registry,
        )
        self.upgrades = Counter(
            "sluice_operator_upgrade_decisions_total", "Classified spec edits.",
            ["category", "decision"], registry=registry,
        )
        self.failovers = Counter(
            "sluice_operator_failovers_total",
            "Changes of active driver seen on the queries' Leases (kind: FailedOver or HandedOff).",
            ["kind"], registry=registry,
        )
        self.failover_gap = Histogram(
            "sluice_operator_failover_gap_seconds",
            "Output gap of a change of active driver, as the new driver measured it.",
            ["kind"], registry=registry, buckets=(0.5, 1, 2, 3, 5, 10, 15, 30, 60, 120),
        )
        self._phase_of: dict[str, str] = {}
        for phase in PHASES:
            self.queries.labels(phase=phase).set(0)

    @contextmanager
    def timed(self, kind: str, action: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.reconcile_seconds.labels(kind=kind, action=action).observe(time.perf_counter() - start)

    def phase(self, key: str, phase: str | None) -> None:
        """Track the phase of one query (``None``: the query is gone)."""
        old = self._phase_of.pop(key, None)
        if old is not None:
            self.queries.labels(phase=old).dec()
        if phase is not None:
            self._phase_of[key] = phase
            self.queries.labels(phase=phase).inc()
            if old != phase:
                self.transitions.labels(from_phase=old or "None", to_phase=phase).inc()


_METRICS: OperatorMetrics | None = None


def metrics() -> OperatorMetrics:
    global _METRICS
    if _METRICS is None:
        _METRICS = OperatorMetrics()
    return _METRICS


def serve(port: int, addr: str = "0.0.0.0") -> None:
    start_http_server(port, addr=addr)
