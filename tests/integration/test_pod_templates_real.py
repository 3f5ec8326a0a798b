"""Pod templates against the real API server (and the real controller-manager): the CRDs keep a
template whole, the reconcile writes it into the driver Deployment, whose ReplicaSet makes pods that
carry it; a protected field is kept by the API server and refused by the reconcile, naming it; a
template of the QueryCluster reaches a running query through its rollout.

Same harness as ``test_reconcile_real.py`` (``tests/support/world.py``): the product's REST client, the
real compiler and classifier, sink topics on the real broker; no kubelet, so pods stay Pending.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice.operator.builders.driver import tolerations
from sluice.operator.cluster import reconcile_cluster
from sluice.operator.env import Stop
from sluice.operator.kube import KubeError
from sluice.operator.reconcile import reconcile_query

from tests.support.world import World, eventually

pytestmark = pytest.mark.integration

POOL = {"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}
CLUSTER_TEMPLATE: dict[str, Any] = {
    "driver": {
        "metadata": {"labels": {"team": "platform", "tier": "gold"}, "annotations": {"owner": "platform"}},
        "spec": {"nodeSelector": {"node-pool": "streaming"}, "tolerations": [POOL],
                 "imagePullSecrets": [{"name": "registry-credentials"}]},
    },
    "executor": {
        "spec": {"tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
                 "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                     {"weight": 100, "preference": {"matchExpressions": [
                         {"key": "node.kubernetes.io/lifecycle", "operator": "In", "values": ["spot"]}]}}]}}},
    },
}
QUERY_TEMPLATE: dict[str, Any] = {
    "driver": {
        "metadata": {"labels": {"team": "payments"}},
        "spec": {"nodeSelector": {"disk": "ssd"},
                 "topologySpreadConstraints": [{
                     "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                     "whenUnsatisfiable": "ScheduleAnyway",
                     "labelSelector": {"matchLabels": {"sluice.dev/query": "totals"}}}]},
    },
}


def pod_spec_of(w: World) -> dict[str, Any]:
    spec: dict[str, Any] = w.deployment()["spec"]["template"]["spec"]
    return spec


def test_templates_reach_the_driver_deployment_and_its_pods(world: World) -> None:
    w = world
    # executors mount the state claim from any node: a ReadWriteMany claim (ReadWriteOnce is refused)
    w.edit_cluster(podTemplate=CLUSTER_TEMPLATE, executors=1, storage={"accessMode": "ReadWriteMany"})
    w.add_query(podTemplate=QUERY_TEMPLATE)
    # the API server kept both templates whole (the schema prunes nothing of them)
    cluster = w.k.get("QueryCluster", w.ns, "default")
    assert cluster is not None and cluster["spec"]["podTemplate"] == CLUSTER_TEMPLATE
    assert w.current()["spec"]["podTemplate"] == QUERY_TEMPLATE
    assert reconcile_query(w.env, w.current()) == "Starting"

    template = w.deployment()["spec"]["template"]
    labels, spec = template["metadata"]["labels"], template["spec"]
    assert labels["team"] == "payments" and labels["tier"] == "gold"
    assert labels["sluice.dev/query"] == "totals" and labels["app.kubernetes.io/component"] == "driver"
    assert template["metadata"]["annotations"]["owner"] == "platform"
    assert spec["nodeSelector"] == {"node-pool": "streaming", "disk": "ssd"}
    assert spec["tolerations"] == [*tolerations(), POOL]  # after the operator's own (a lost node)
    assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert spec["topologySpreadConstraints"] == QUERY_TEMPLATE["driver"]["spec"]["topologySpreadConstraints"]
    assert spec["affinity"]["podAntiAffinity"]  # the operator's: the drivers spread over nodes
    assert spec["serviceAccountName"] == "totals-spark"
    # the engine pinned in the status carries the cluster's template
    assert w.status()["engine"]["podTemplate"] == CLUSTER_TEMPLATE
    # the executors' template, handed to Spark by the driver
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    executor = json.loads(env["SLUICE_EXECUTOR_POD_TEMPLATE"])
    assert executor["spec"]["tolerations"] == CLUSTER_TEMPLATE["executor"]["spec"]["tolerations"]
    assert executor["spec"]["affinity"] == CLUSTER_TEMPLATE["executor"]["spec"]["affinity"]
    assert executor["spec"]["securityContext"]["runAsNonRoot"] is True

    # the ReplicaSet controller's pods carry it (Pending: no kubelet, and no such node pool anyway)
    def pod() -> dict[str, Any] | None:
        pods = w.of_kind("Pod")
        return pods[0] if pods else None

    made = eventually(pod, timeout=60, what="the driver pod exists")
    assert made["spec"]["nodeSelector"] == {"node-pool": "streaming", "disk": "ssd"}
    assert POOL in made["spec"]["tolerations"]  # beside the not-ready/unreachable ones the API server adds
    assert made["metadata"]["labels"]["team"] == "payments"


def test_a_protected_field_is_kept_by_the_api_server_and_refused_by_the_reconcile(world: World) -> None:
    w = world
    bad = {"driver": {"spec": {"containers": [{"name": "driver", "securityContext": {"privileged": True}}]}}}
    w.add_query(podTemplate=bad)
    assert w.current()["spec"]["podTemplate"] == bad  # not pruned: the operator sees what was asked
    with pytest.raises(Stop) as info:
        reconcile_query(w.env, w.current())
    message = "spec.podTemplate.driver.spec.containers[0].securityContext: owned by the operator"
    assert str(info.value) == message
    status = w.status()
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (status["phase"], degraded["reason"], degraded["message"]) == ("Degraded", "InvalidSpec", message)
    assert w.kinds() == set() and w.topic_partitions() == {}
    assert w.reasons() == ["InvalidSpec"]


def test_a_protected_field_of_the_cluster_makes_it_invalid(world: World) -> None:
    w = world
    body = w.edit_cluster(podTemplate={"executor": {"spec": {"serviceAccountName": "cluster-admin"}}})
    with pytest.raises(Stop):
        reconcile_cluster(w.env, body)
    qc = w.k.get("QueryCluster", w.ns, "default")
    assert qc is not None and qc["status"]["phase"] == "Degraded"
    degraded = next(c for c in qc["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ClusterInvalid"
    assert degraded["message"] == "spec.podTemplate.executor.spec.serviceAccountName: owned by the operator"


def test_strict_field_validation_names_a_misspelt_typed_field(world: World) -> None:
    """``kubectl apply`` validates fields strictly: a typo in a typed part of a template is refused by
    the API server itself, before any webhook."""
    w = world
    obj = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
           "metadata": {"name": "typo", "namespace": w.ns},
           "spec": w.query_spec(podTemplate={"driver": {"spec": {"tolerations": [
               {"key": "dedicated", "operator": "Exists", "tolerationSecond": 5}]}}})}
    with pytest.raises(KubeError) as info:
        w.k.request("POST", w.k.path("StreamingQuery", w.ns), obj, query={"fieldValidation": "Strict"})
    assert info.value.status == 400
    assert 'unknown field "spec.podTemplate.driver.spec.tolerations[0].tolerationSecond"' in str(info.value)


def test_a_cluster_template_reaches_a_running_query_through_its_rollout(world: World) -> None:
    from sluice.operator.waves import roll_fleet

    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    assert "nodeSelector" not in pod_spec_of(w)
    w.edit_cluster(podTemplate={"driver": {"spec": {"nodeSelector": {"node-pool": "streaming"},
                                                    "tolerations": [POOL]}}})
    reconcile_query(w.env, w.current())
    assert "nodeSelector" not in pod_spec_of(w)  # pinned: the cluster's rollout has not admitted it
    cluster = w.k.get("QueryCluster", w.ns, "default")
    assert cluster is not None
    roll_fleet(w.env, cluster)
    reconcile_query(w.env, w.current())
    spec = pod_spec_of(w)
    assert spec["nodeSelector"] == {"node-pool": "streaming"}
    assert spec["tolerations"] == [*tolerations(), POOL]
    assert w.status()["rollout"]["targetEngine"]["podTemplate"]["driver"]["spec"]["tolerations"] == [POOL]


def test_a_query_template_edit_updates_the_drivers_at_once(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    plan = w.status()["plan"]
    reconcile_query(w.env, w.edit(podTemplate={"driver": {"spec": {"tolerations": [POOL]}}}))
    assert pod_spec_of(w)["tolerations"] == [*tolerations(), POOL]
    assert w.status()["plan"] == plan  # the same plan, the same version
