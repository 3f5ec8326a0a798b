"""The operator's metrics per StreamingQuery (``sluice.operator.metrics``): labelled with the query's
namespace and name, one series per query and label value, removed when the query is deleted."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sluice.core.naming import QueryNames
from sluice.operator.env import Env, QueryRun
from sluice.operator.metrics import FAILOVER_KINDS, OUTCOMES, OperatorMetrics, finished_outcome, query_label


def series(m: OperatorMetrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample the registry exposes, by name."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def of_query(m: OperatorMetrics, namespace: str, name: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples labelled with one query."""
    label = query_label(name)
    return {metric: hits for metric, samples in series(m).items()
            if (hits := [(labels, value) for labels, value in samples
                         if labels.get("namespace") == namespace and labels.get("streamingquery") == label])}


def test_one_phase_series_per_query_follows_its_phase() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.phase("shop", "totals", "Starting")
    m.phase("shop", "totals", "Running")
    m.phase("shop", "totals", "Running")  # a reconcile that changed nothing
    m.phase("ads", "totals", "Degraded")  # the same name in another namespace is another query
    phases = series(m)["sluice_operator_query_phase"]
    assert sorted((labels["namespace"], labels["streamingquery"], labels["phase"], value)
                  for labels, value in phases) == [("ads", "totals", "Degraded", 1.0),
                                                   ("shop", "totals", "Running", 1.0)]
    # the operator-wide ones go on as before
    assert m.queries.labels(phase="Running")._value.get() == 1
    assert m.transitions.labels(from_phase="Starting", to_phase="Running")._value.get() == 1


def test_counters_exist_from_zero_for_every_value_alerts_look_at() -> None:
    """``increase()`` of a series that appears at 1 is 0: the first rollback or fail-over of a query
    would never alert. Its outcome and fail-over counters exist at 0 from its first phase on."""
    m = OperatorMetrics(CollectorRegistry())
    m.phase("shop", "totals", "Running")
    got = of_query(m, "shop", "totals")
    outcomes = got["sluice_operator_upgrade_outcomes_total"]
    failovers = got["sluice_operator_failovers_total"]
    assert sorted(labels["outcome"] for labels, _ in outcomes) == sorted(OUTCOMES)
    assert sorted(labels["kind"] for labels, _ in failovers) == sorted(FAILOVER_KINDS)
    assert all(value == 0 for _, value in [*outcomes, *failovers])
    assert set(OUTCOMES) == {"Succeeded", "RolledBack", "Failed", "Rejected", "Cancelled"}


def test_events_of_a_query_are_labelled_with_it() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.upgrade_decision("shop", "totals", "data-selection", "in-place")  # before any phase: made at first use
    m.upgrade_outcome("shop", "totals", "RolledBack")
    m.failover("shop", "totals", "FailedOver", 2.5)
    m.failover("shop", "totals", "HandedOff", None)
    got = of_query(m, "shop", "totals")
    query = {"namespace": "shop", "streamingquery": "totals"}
    assert got["sluice_operator_upgrade_decisions_total"] == [
        ({**query, "category": "data-selection", "decision": "in-place"}, 1.0)]
    outcomes = {labels["outcome"]: value for labels, value in got["sluice_operator_upgrade_outcomes_total"]}
    assert outcomes == {"Succeeded": 0, "RolledBack": 1, "Failed": 0, "Rejected": 0, "Cancelled": 0}
    kinds = {labels["kind"]: value for labels, value in got["sluice_operator_failovers_total"]}
    assert kinds == {"FailedOver": 1, "HandedOff": 1}
    # the gap histogram stays per kind (the driver pods' sluice_takeover_gap_seconds is per query)
    gaps = m.registry.get_sample_value("sluice_operator_failover_gap_seconds_count", {"kind": "FailedOver"})
    assert gaps == 1


def test_a_deleted_query_leaves_no_series() -> None:
    m = OperatorMetrics(CollectorRegistry())
    for name in ("totals", "other"):
        m.phase("shop", name, "Running")
        m.upgrade_decision("shop", name, "topology", "replace")
        m.upgrade_outcome("shop", name, "Succeeded")
        m.failover("shop", name, "FailedOver", 1.0)
    m.phase("shop", "totals", "Deleting")
    m.forget("shop", "totals")
    assert of_query(m, "shop", "totals") == {}
    assert set(of_query(m, "shop", "other")) == {
        "sluice_operator_query_phase", "sluice_operator_upgrade_decisions_total",
        "sluice_operator_upgrade_outcomes_total", "sluice_operator_failovers_total"}
    assert m.queries.labels(phase="Running")._value.get() == 1
    assert m.queries.labels(phase="Deleting")._value.get() == 0
    m.forget("shop", "totals")  # a second finalizer run: nothing left, nothing raised
    # a query created again under the same name starts over
    m.phase("shop", "totals", "Pending")
    again = of_query(m, "shop", "totals")["sluice_operator_query_phase"]
    assert [labels["phase"] for labels, _ in again] == ["Pending"]


def test_the_label_is_the_driver_pods_query_label() -> None:
    """The PodMonitor names a driver's query by its pod's sluice.dev/query label: the operator's
    series carry the same value, so both join on (namespace, streamingquery)."""
    assert query_label("totals") == "totals"
    long = "orders-per-customer-and-region-over-the-last-hour"
    assert query_label(long) == QueryNames.for_query(long).base != long
    assert len(query_label(long)) <= 40
    m = OperatorMetrics(CollectorRegistry())
    m.phase("shop", long, "Running")
    (labels, _), = series(m)["sluice_operator_query_phase"]
    assert labels["streamingquery"] == QueryNames.for_query(long).base


def test_finished_outcome() -> None:
    def status(outcome: str, to: str = "h2", time: str = "t1") -> dict[str, Any]:
        return {"lastUpgrade": {"outcome": outcome, "toHash": to, "time": time}}

    assert finished_outcome({}, {}) is None
    assert finished_outcome({}, status("InProgress")) is None
    assert finished_outcome(status("InProgress"), status("RolledBack")) == "RolledBack"
    assert finished_outcome(status("RolledBack"), status("RolledBack")) is None  # written again
    assert finished_outcome(status("Succeeded", "h1", "t0"), status("Succeeded")) == "Succeeded"  # the next
    assert finished_outcome({}, status("Rejected")) == "Rejected"  # refused when classified
    assert finished_outcome(status("Pending"), status("Pending")) is None


class RecordingKube:
    def patch_status(self, kind: str, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> dict[str, Any]:
        return {}


def test_status_writes_count_an_upgrade_outcome_once() -> None:
    m = OperatorMetrics(CollectorRegistry())
    env = Env(kube=RecordingKube(), metrics=m)  # type: ignore[arg-type]
    body = {"metadata": {"name": "totals", "namespace": "shop", "generation": 2}}
    upgrade = {"toHash": "b" * 64, "category": "data-selection", "decision": "in-place",
               "outcome": "InProgress", "time": "2026-01-01T00:00:00Z"}
    run = QueryRun(env, body, {"phase": "Upgrading", "lastUpgrade": upgrade})
    assert run.write({"lastUpgrade": {**upgrade, "outcome": "RolledBack", "rollback": "handBack"}})
    assert not run.write({"lastUpgrade": {**upgrade, "outcome": "RolledBack", "rollback": "handBack"}})
    assert run.write({"cluster": "default"})  # another write keeps the record: not counted again
    labels = {"namespace": "shop", "streamingquery": "totals", "outcome": "RolledBack"}
    value = m.registry.get_sample_value("sluice_operator_upgrade_outcomes_total", labels)
    assert value == 1
