"""Prometheus metrics of the operator.

Two kinds (docs/chart.md, "Metrics"):

* the operator's own work, without object labels: reconcile time and errors per kind, queries per
  phase, phase transitions;
* each StreamingQuery's, labelled ``namespace`` and ``streamingquery`` (the value of the query's
  ``sluice.dev/query`` label, which its driver pods carry too: the name, cut to 40 characters with
  a hash suffix when longer). A query's series are made when the operator first tracks it, with
  one series per query and value of each closed label (phase: the current one only; outcome;
  fail-over kind; an upgrade's category and decision as they occur), and removed when the query
  is deleted (:meth:`OperatorMetrics.forget`). The counters start at 0 so that ``increase()`` sees
  a query's first event.

Only the leader reconciles, so only it has query series; a replica that loses the Lease exits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

from sluice.core.naming import QueryNames
from sluice.core.rollout import FINAL_OUTCOMES
from sluice.core.status import PHASES

#: the labels of a query's series
QUERY_LABELS = ("namespace", "streamingquery")
#: the kinds of a change of active driver (the event reasons)
FAILOVER_KINDS = ("FailedOver", "HandedOff")
#: the final outcomes of an upgrade, in a fixed order
OUTCOMES = tuple(sorted(str(o) for o in FINAL_OUTCOMES))


def query_label(name: str) -> str:
    """The ``streamingquery`` label of a query: its ``sluice.dev/query`` label value."""
    return QueryNames.for_query(name).base


def finished_outcome(previous: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The final outcome an upgrade reached with a status write from ``previous`` to ``new``
    (stored form: ``lastUpgrade.outcome``); None when no upgrade finished with it (none recorded,
    still pending or in progress, or the same record written again)."""
    before, after = previous.get("lastUpgrade") or {}, new.get("lastUpgrade") or {}
    outcome = after.get("outcome")
    if outcome not in OUTCOMES:
        return None
    same_upgrade = all(before.get(k) == after.get(k) for k in ("time", "toHash"))
    if same_upgrade and before.get("outcome") == outcome:
        return None
    return str(outcome)


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        disable_created_metrics()  # no `_created` series beside every counter and histogram child
        self.registry = registry
        q = list(QUERY_LABELS)
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
        self.query_phase = Gauge(
            "sluice_operator_query_phase", "1 for the current phase of a StreamingQuery (its only series).",
            [*q, "phase"], registry=registry,
        )
        self.upgrades = Counter(
            "sluice_operator_upgrade_decisions_total", "Classified spec edits of a StreamingQuery.",
            [*q, "category", "decision"], registry=registry,
        )
        self.outcomes = Counter(
            "sluice_operator_upgrade_outcomes_total",
            "Upgrades of a StreamingQuery that reached a final outcome (Succeeded, RolledBack, Failed, "
            "Rejected, Cancelled).",
            [*q, "outcome"], registry=registry,
        )
        self.failovers = Counter(
            "sluice_operator_failovers_total",
            "Changes of active driver seen on a StreamingQuery's Lease (kind: FailedOver or HandedOff).",
            [*q, "kind"], registry=registry,
        )
        self.failover_gap = Histogram(
            "sluice_operator_failover_gap_seconds",
            "Output gap of a change of active driver, as the new driver measured it.",
            ["kind"], registry=registry, buckets=(0.5, 1, 2, 3, 5, 10, 15, 30, 60, 120),
        )
        self._lock = threading.Lock()
        self._phase_of: dict[tuple[str, str], str] = {}
        #: every labelled child of a query, to remove them when it is deleted
        self._series: dict[tuple[str, str], set[tuple[Any, tuple[str, ...]]]] = {}
        for phase in PHASES:
            self.queries.labels(phase=phase).set(0)

    @contextmanager
    def timed(self, kind: str, action: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.reconcile_seconds.labels(kind=kind, action=action).observe(time.perf_counter() - start)

    def _child(self, metric: Any, key: tuple[str, str], *rest: str) -> Any:
        values = (*key, *rest)
        self._series.setdefault(key, set()).add((metric, values))
        return metric.labels(*values)

    def _track(self, namespace: str, name: str) -> tuple[str, str]:
        """The label values of a query, its counters made at 0 the first time (lock held)."""
        key = (namespace, query_label(name))
        if key not in self._series:
            for outcome in OUTCOMES:
                self._child(self.outcomes, key, outcome)
            for kind in FAILOVER_KINDS:
                self._child(self.failovers, key, kind)
        return key

    def phase(self, namespace: str, name: str, phase: str | None) -> None:
        """Track the phase of one query (``None``: the query is gone, and so are its series)."""
        with self._lock:
            key = (namespace, query_label(name))
            old = self._phase_of.pop(key, None)
            if old is not None:
                self.queries.labels(phase=old).dec()
            if phase is None:
                self._forget(key)
                return
            self._track(namespace, name)
            self._phase_of[key] = phase
            self.queries.labels(phase=phase).inc()
            if old != phase:
                if old is not None:
                    self.query_phase.remove(*key, old)
                    self._series[key].discard((self.query_phase, (*key, old)))
                self._child(self.query_phase, key, phase).set(1)
                self.transitions.labels(from_phase=old or "None", to_phase=phase).inc()

    def upgrade_decision(self, namespace: str, name: str, category: str, decision: str) -> None:
        with self._lock:
            self._child(self.upgrades, self._track(namespace, name), category, decision).inc()

    def upgrade_outcome(self, namespace: str, name: str, outcome: str) -> None:
        with self._lock:
            self._child(self.outcomes, self._track(namespace, name), outcome).inc()

    def failover(self, namespace: str, name: str, kind: str, gap_seconds: float | None) -> None:
        with self._lock:
            self._child(self.failovers, self._track(namespace, name), kind).inc()
        if gap_seconds is not None:
            self.failover_gap.labels(kind=kind).observe(gap_seconds)

    def forget(self, namespace: str, name: str) -> None:
        """Remove every series of a deleted query."""
        self.phase(namespace, name, None)

    def _forget(self, key: tuple[str, str]) -> None:
        for metric, values in self._series.pop(key, set()):
            try:
                metric.remove(*values)
            except KeyError:  # already gone
                pass


_METRICS: OperatorMetrics | None = None


def metrics() -> OperatorMetrics:
    global _METRICS
    if _METRICS is None:
        _METRICS = OperatorMetrics()
    return _METRICS


def serve(port: int, addr: str = "0.0.0.0") -> None:
    start_http_server(port, addr=addr)
