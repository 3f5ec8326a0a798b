"""End to end: the admission webhook, served by the chart's operator pod (the leader, behind the
webhook Service), answers ``kubectl apply``: SQL errors refused with line and column, what an edit
will do printed as warnings by a server-side dry run, a replace refused when the policy forbids it;
and with the operator stopped (the webhook withdrawn), the reconcile still refuses a bad spec in
status. The query is suspended: no driver runs, the operator pins and classifies all the same.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from cluster import E2ECluster
from test_queries import cluster_doc, query_doc

pytestmark = pytest.mark.e2e

SOURCES = [{"name": "pageviews", "topic": "pv", "format": "json",
            "schema": [{"name": "page", "type": "string"}, {"name": "user_id", "type": "string"}]}]


def views(ns: str, sql: str, **extra: Any) -> dict[str, Any]:
    sink = {"topic": f"{ns}-out", "format": "json"}
    return query_doc(ns, "views", {"sources": SOURCES, "sql": sql, "sink": sink, "suspend": True, **extra})


def test_the_webhook_refuses_bad_sql_and_warns_what_an_edit_will_do(cluster: E2ECluster, ns: str) -> None:
    if cluster.kind != "node":
        pytest.fail("the chart's webhook is checked on the real node (E2E_CLUSTER unset or node)")
    cluster.apply(cluster_doc(ns, cluster.bootstrap))
    typo = cluster.apply_result(views(ns, "SELECT pgae, user_id\nFROM pageviews"))
    assert typo.returncode != 0, typo.stdout
    assert "denied the request" in typo.stderr and "spec.sql: line 1, column 8" in typo.stderr, typo.stderr
    assert cluster.get("streamingquery", ns, "views") is None  # nothing stored

    good = views(ns, "SELECT page, user_id FROM pageviews")
    cluster.apply(good)
    pinned = cluster.wait_for("the plan pinned", lambda: (
        ((cluster.get("streamingquery", ns, "views") or {}).get("status") or {}).get("plan")), timeout=120)

    where = copy.deepcopy(good)
    where["spec"]["sql"] = "SELECT page, user_id FROM pageviews WHERE page <> '/'"
    dry = cluster.apply_result(where, dry_run=True)
    assert dry.returncode == 0, dry.stderr
    assert "Warning: data-selection change: in-place upgrade, same checkpoint" in dry.stderr, dry.stderr
    stored = cluster.get("streamingquery", ns, "views") or {}
    assert stored["metadata"]["generation"] == 1 and stored["status"]["plan"]["hash"] == pinned["hash"]

    grouped = copy.deepcopy(good)
    sink = {"topic": f"{ns}-out", "format": "json", "outputMode": "update", "key": ["page"]}
    grouped["spec"].update(sql="SELECT page, count(*) AS views FROM pageviews GROUP BY page", sink=sink,
                           upgrade={"allowReplace": False})
    refused = cluster.apply_result(grouped)
    assert refused.returncode != 0
    assert "denied the request" in refused.stderr and "allowReplace" in refused.stderr, refused.stderr

    # the webhook down (a clean stop withdraws it): the edit is stored, the reconcile refuses it
    assert cluster.stop_operator is not None and cluster.start_operator is not None
    cluster.stop_operator()
    try:
        bad = copy.deepcopy(good)
        bad["spec"]["sql"] = "SELECT page,\n  pgae FROM pageviews"
        cluster.apply(bad)
    finally:
        cluster.start_operator()
    error = cluster.wait_for("the compile error in status", lambda: (
        ((cluster.get("streamingquery", ns, "views") or {}).get("status") or {}).get("lastCompileError")),
        timeout=180)
    assert (error.get("line"), error.get("column")) == (2, 3), error
    assert cluster.query_condition(ns, "views", "Degraded") == "True"
    status = (cluster.get("streamingquery", ns, "views") or {})["status"]
    assert status["plan"]["hash"] == pinned["hash"]  # the running plan stays
