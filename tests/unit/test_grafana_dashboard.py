"""The Grafana dashboard the chart ships (``charts/sluice/files/grafana-dashboard.json``): it parses,
its layout holds, and every panel's PromQL reads metrics that the operator or the runtime export,
with labels they have once scraped. (The chart's ConfigMap of it: tests/integration/test_chart.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.metrics import grouping_labels_in, metrics_in, scraped, selectors_in
from tests.support.paths import REPO

DASHBOARD = REPO / "charts" / "sluice" / "files" / "grafana-dashboard.json"
DOC: dict[str, Any] = json.loads(DASHBOARD.read_text())
PANELS = [p for p in DOC["panels"] if p["type"] != "row"]
#: labels PromQL or Grafana make up (histogram buckets; none other)
BUILT_IN = {"le"}


def targets() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in PANELS for t in p["targets"]]


@pytest.fixture(scope="module")
def metrics() -> dict[str, set[str]]:
    return scraped()


def test_it_is_a_dashboard_for_the_sidecar() -> None:
    assert DOC["uid"] == "sluice-queries" and DOC["title"] == "Sluice"
    assert "id" not in DOC  # Grafana assigns it; a fixed one clashes on import
    ids = [p["id"] for p in DOC["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in DOC["templating"]["list"]}
    source = variables["datasource"]
    assert source["type"] == "datasource" and source["query"] == "prometheus"
    for panel in PANELS:  # the data source is the user's choice, never a fixed uid
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["datasource"] == panel["datasource"] for t in panel["targets"])
        assert panel.get("description"), f"{panel['title']}: say what it shows"


def test_the_layout_fits_the_grid_without_overlaps() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in DOC["panels"]:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                 for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_query_reads_exported_metrics_with_their_labels(metrics: dict[str, set[str]]) -> None:
    variables = [(v["name"], v["definition"]) for v in DOC["templating"]["list"] if v["type"] == "query"]
    queries = [*targets(), *variables]
    for title, expr in queries:
        used = metrics_in(expr)
        assert used, f"{title}: reads no Sluice metric: {expr}"
        unknown = sorted(used - set(metrics))
        assert unknown == [], f"{title}: {unknown} are exported by no code"
        for name, matched in selectors_in(expr):
            assert name in metrics, f"{title}: {name} is not a Sluice metric"
            missing = set(matched) - metrics[name]
            assert not missing, f"{title}: {name} has no label {sorted(missing)}"
        available = set().union(*(metrics[m] for m in used)) | BUILT_IN
        grouped = grouping_labels_in(expr) | set(_label_values_label(expr))
        assert grouped <= available, f"{title}: groups by {sorted(grouped - available)}, which {used} lack"


def _label_values_label(expr: str) -> list[str]:
    """The label of a ``label_values(metric, label)`` variable query."""
    if expr.startswith("label_values("):
        return [expr.rstrip(")").rsplit(",", 1)[1].strip()]
    return []


def test_the_panels_cover_what_an_operator_of_queries_watches() -> None:
    read = set().union(*(metrics_in(expr) for _, expr in targets()))
    wanted = {
        "sluice_operator_query_phase",  # phase per query
        "sluice_kafka_lag_records",  # lag
        "sluice_input_rows_per_second", "sluice_processed_rows_per_second",  # rates
        "sluice_batch_duration_seconds",
        "sluice_watermark_delay_seconds",
        "sluice_rows_dropped_by_watermark_total",  # late drops
        "sluice_state_rows", "sluice_state_memory_bytes", "sluice_state_disk_bytes",  # state size
        "sluice_operator_failovers_total",  # fail-overs
        "sluice_operator_upgrade_outcomes_total",  # upgrades, rollbacks
        "sluice_operator_upgrade_decisions_total",
        "sluice_last_commit_timestamp_seconds",
    }
    assert wanted <= read, f"no panel reads {sorted(wanted - read)}"


def test_every_query_panel_follows_the_namespace_and_query_variables() -> None:
    for title, expr in targets():
        if title == "Queries per phase":  # the operator-wide count: no query label
            continue
        assert 'namespace=~"$namespace"' in expr and 'streamingquery=~"$streamingquery"' in expr, title
