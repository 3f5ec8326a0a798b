"""End to end: pod templates place the drivers where a platform team wants them.

The node gets a label and a ``NoSchedule`` taint for the test (both removed afterwards; the taint
evicts nothing that runs). A query whose QueryCluster's driver template selects the label and
tolerates the taint runs there, with the query's own template's label on its pods; a query whose
template selects a pool no node has stays Pending and says nothing is wrong with its spec.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import E2ECluster
from test_queries import cluster_doc, create_topics, query_doc, wait_ready

pytestmark = pytest.mark.e2e

POOL_LABEL = "sluice.dev/e2e-pool"
TAINT_KEY = "sluice.dev/e2e-dedicated"


@pytest.fixture
def dedicated_node(cluster: E2ECluster) -> Iterator[str]:
    """The (first) node, labelled as pool ``streaming`` and tainted for it, for one test."""
    node = cluster.kubectl("get", "nodes", "-o", "name").split()[0].removeprefix("node/")
    cluster.kubectl("label", "node", node, f"{POOL_LABEL}=streaming", "--overwrite")
    cluster.kubectl("taint", "node", node, f"{TAINT_KEY}=streaming:NoSchedule", "--overwrite")
    try:
        yield node
    finally:
        cluster.kubectl("taint", "node", node, f"{TAINT_KEY}:NoSchedule-", check=False)
        cluster.kubectl("label", "node", node, f"{POOL_LABEL}-", check=False)


def spec(src: str, out: str, template: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "sources": [{"name": "clicks", "topic": src, "schema": [
            {"name": "id", "type": "int"}, {"name": "amount", "type": "double"}]}],
        "sql": "SELECT id, amount FROM clicks WHERE amount > 10",
        "sink": {"topic": out, "outputMode": "append"},
        "trigger": {"processingTime": "1 second"},
        **({"podTemplate": template} if template else {}),
    }


def test_drivers_land_on_the_selected_pool_with_the_toleration(
    cluster: E2ECluster, ns: str, dedicated_node: str
) -> None:
    src, out = f"{ns}-clicks", f"{ns}-out"
    create_topics(cluster.bootstrap, src, out)
    pool = {"driver": {"spec": {
        "nodeSelector": {POOL_LABEL: "streaming"},
        "tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": "streaming",
                         "effect": "NoSchedule"}],
    }}}
    cluster.apply(
        cluster_doc(ns, cluster.bootstrap, podTemplate=pool),
        query_doc(ns, "placed", spec(src, out, {"driver": {"metadata": {"labels": {"team": "payments"}}}})),
    )
    wait_ready(cluster, ns, "placed")
    pod = cluster.driver_pod(ns, "placed")
    assert pod is not None, cluster.diagnostics(ns)
    pod_spec = pod["spec"]
    assert pod_spec["nodeName"] == dedicated_node
    assert pod_spec["nodeSelector"] == {POOL_LABEL: "streaming"}
    assert {"key": TAINT_KEY, "operator": "Equal", "value": "streaming", "effect": "NoSchedule"} in (
        pod_spec["tolerations"])
    assert pod["metadata"]["labels"]["team"] == "payments"
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "driver"  # the operator's own stay

    # a pool no node has: the driver waits unscheduled; the spec itself is fine
    cluster.apply(query_doc(ns, "nowhere", spec(src, f"{out}-2", {"driver": {"spec": {
        "nodeSelector": {POOL_LABEL: "gpu"}}}})))

    def unschedulable() -> dict[str, Any] | None:
        found = cluster.driver_pods(ns, "nowhere")
        for p in found:
            conditions = p.get("status", {}).get("conditions") or []
            if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                   for c in conditions):
                return p
        return None

    waiting = cluster.wait_for("the driver of a pool no node has to be unschedulable", unschedulable, 120)
    assert waiting["status"]["phase"] == "Pending"
    query = json.loads(cluster.kubectl("get", "sq", "nowhere", "-n", ns, "-o", "json"))
    degraded = [c for c in query["status"].get("conditions") or [] if c["type"] == "Degraded"]
    assert not degraded or degraded[0]["reason"] != "InvalidSpec", degraded
    assert cluster.query_condition(ns, "nowhere", "Ready") != "True"


def test_a_template_that_overrides_an_operator_field_is_refused_at_apply(
    cluster: E2ECluster, ns: str
) -> None:
    src, out = f"{ns}-clicks", f"{ns}-out"
    cluster.apply(cluster_doc(ns, cluster.bootstrap))
    refused = cluster.apply_result(query_doc(ns, "rooted", spec(src, out, {"driver": {"spec": {
        "securityContext": {"runAsUser": 0}}}})))
    assert refused.returncode != 0
    message = "spec.podTemplate.driver.spec.securityContext: owned by the operator"
    assert message in refused.stderr, refused.stderr
    assert cluster.get("StreamingQuery", ns, "rooted") is None
