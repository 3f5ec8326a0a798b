"""Pod templates in what the builders make: the driver Deployment's pods, a backfill's, and the
executor pod template the driver hands to Spark; the cluster's through the pinned engine, the query's
over it; nothing changes without one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice.crd.querycluster import QueryClusterSpec
from sluice.operator import builders
from sluice.operator.builders.driver import ENGINE_ENV, tolerations

from tests.support.operator_fixtures import cluster_spec, context, query_spec

H = "ab" * 32

NODE_POOL = {"spec": {"nodeSelector": {"pool": "streaming"},
                      "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "streaming",
                                       "effect": "NoSchedule"}]}}


def pod_of(ctx: Any) -> dict[str, Any]:
    return builders.driver_deployment(ctx, H, "totals-plan-abababababab")["spec"]["template"]


def executor_pod_of(ctx: Any) -> dict[str, Any]:
    env = {e["name"]: e.get("value") for e in pod_of(ctx)["spec"]["containers"][0]["env"]}
    template: dict[str, Any] = json.loads(env["SLUICE_EXECUTOR_POD_TEMPLATE"])
    return template


def without_engine(obj: dict[str, Any]) -> str:
    """The object as JSON, key order kept, without the engine digest (which a cluster template changes)."""
    template = obj["spec"]["template"]
    template["metadata"]["labels"].pop("sluice.dev/engine")
    container = template["spec"]["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != ENGINE_ENV]
    return json.dumps(obj)


EMPTY = [{}, {"driver": {}, "executor": {}}, {"driver": {"metadata": {}, "spec": {}}},
         {"driver": {"metadata": {"labels": {}, "annotations": {}},
                     "spec": {"nodeSelector": {}, "tolerations": []}},
          "executor": {"apiVersion": "v1", "kind": "Pod", "spec": {"imagePullSecrets": []}}}]


@pytest.mark.parametrize("empty", EMPTY)
@pytest.mark.parametrize("executors", [0, 2])
def test_an_empty_template_changes_nothing_byte_for_byte(empty: dict[str, Any], executors: int) -> None:
    plain = context(cluster=cluster_spec(executors=executors))
    expected = json.dumps(builders.workload_objects(plain, H, "cm"))
    on_cluster = context(cluster=cluster_spec(executors=executors, podTemplate=empty))
    on_query = context(spec=query_spec(podTemplate=empty), cluster=cluster_spec(executors=executors))
    assert json.dumps(builders.workload_objects(on_query, H, "cm")) == expected
    # the same engine digest too
    assert json.dumps(builders.workload_objects(on_cluster, H, "cm")) == expected
    assert on_cluster.engine_digest == plain.engine_digest


def test_the_engine_carries_the_clusters_template_and_no_template_is_no_field() -> None:
    plain = QueryClusterSpec.model_validate(cluster_spec()).engine("img")
    assert "podTemplate" not in plain.canonical()
    templates = {"driver": NODE_POOL, "executor": {"spec": {"tolerations": []}}}
    spec = QueryClusterSpec.model_validate(cluster_spec(podTemplate=templates))
    engine = spec.engine("img")
    assert engine.canonical()["podTemplate"] == {"driver": NODE_POOL}  # empty parts left out
    assert engine.compute_digest() != plain.compute_digest()
    # stored in the status and read back: the same digest
    again = type(engine).model_validate(engine.record())
    assert again.compute_digest() == engine.compute_digest()
    # and back on a cluster: what the builders read
    on_engine = QueryClusterSpec.model_validate(cluster_spec()).with_engine(engine)
    assert on_engine.pod_template == engine.pod_template


def test_a_node_pool_of_the_cluster_reaches_the_driver_pods() -> None:
    pod = pod_of(context(cluster=cluster_spec(podTemplate={"driver": NODE_POOL})))
    assert pod["spec"]["nodeSelector"] == {"pool": "streaming"}
    # after the operator's own
    assert pod["spec"]["tolerations"] == [*tolerations(), *NODE_POOL["spec"]["tolerations"]]
    # what the operator owns is as it was
    plain = pod_of(context())
    for pod_spec in (pod["spec"], plain["spec"]):  # the engine's digest aside
        container = pod_spec["containers"][0]
        container["env"] = [e for e in container["env"] if e["name"] != ENGINE_ENV]
    for field in ("containers", "volumes", "securityContext", "serviceAccountName", "affinity",
                  "terminationGracePeriodSeconds", "automountServiceAccountToken", "enableServiceLinks"):
        assert pod["spec"][field] == plain["spec"][field], field


def test_the_pinned_engine_decides_which_cluster_template_the_drivers_get() -> None:
    """A cluster's template reaches a query's pods with the engine its rollout admits, never before."""
    ctx = context(cluster=cluster_spec(podTemplate={"driver": NODE_POOL}))
    pinned = QueryClusterSpec.model_validate(cluster_spec()).engine("sluice-runtime:pinned")
    assert "nodeSelector" not in pod_of(ctx.on_engine(pinned))["spec"]
    assert pod_of(ctx.on_engine(ctx.cluster.engine("sluice-runtime:next")))["spec"]["nodeSelector"] == {
        "pool": "streaming"}


def test_the_querys_template_is_laid_over_the_clusters() -> None:
    cluster = {"driver": {"metadata": {"labels": {"team": "platform", "tier": "gold"}},
                          "spec": {**NODE_POOL["spec"], "priorityClassName": "streaming",
                                   "imagePullSecrets": [{"name": "registry"}]}}}
    query = {"driver": {"metadata": {"labels": {"team": "payments"}},
                        "spec": {"nodeSelector": {"disk": "ssd"},
                                 "tolerations": [{"key": "payments", "operator": "Exists"}]}}}
    pod = pod_of(context(spec=query_spec(podTemplate=query), cluster=cluster_spec(podTemplate=cluster)))
    labels = pod["metadata"]["labels"]
    assert labels["team"] == "payments" and labels["tier"] == "gold"  # labels merged key by key
    assert labels["sluice.dev/query"] == "totals" and labels["app.kubernetes.io/component"] == "driver"
    assert pod["spec"]["nodeSelector"] == {"pool": "streaming", "disk": "ssd"}  # merged key by key
    # the cluster's list replaced by the query's, added after the operator's own
    assert pod["spec"]["tolerations"] == [*tolerations(), {"key": "payments", "operator": "Exists"}]
    assert pod["spec"]["priorityClassName"] == "streaming"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]


def test_the_drivers_own_affinity_is_kept_and_the_templates_added() -> None:
    spot = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 80, "preference": {
        "matchExpressions": [{"key": "node.kubernetes.io/lifecycle", "operator": "In",
                              "values": ["spot"]}]}}]}
    template = {"driver": {"spec": {"affinity": {"nodeAffinity": spot}}}}
    for mode, kind in (("ReadWriteOnce", "podAffinity"), ("ReadWriteMany", "podAntiAffinity")):
        plain = pod_of(context(cluster=cluster_spec(storage={"accessMode": mode})))["spec"]["affinity"]
        pod = pod_of(context(spec=query_spec(podTemplate=template),
                             cluster=cluster_spec(storage={"accessMode": mode})))
        assert pod["spec"]["affinity"] == {kind: plain[kind], "nodeAffinity": spot}


def test_a_backfills_pods_are_drivers_and_get_the_driver_template() -> None:
    ctx = context(spec=query_spec(podTemplate={"driver": NODE_POOL}), role="backfill")
    assert pod_of(ctx)["spec"]["nodeSelector"] == {"pool": "streaming"}


def test_executor_pods_get_the_executor_template_and_keep_the_restricted_context() -> None:
    executor = {"metadata": {"labels": {"team": "data"}, "annotations": {"owner": "data"}},
                "spec": {"nodeSelector": {"pool": "spot"}, "priorityClassName": "batch",
                         "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
                         "imagePullSecrets": [{"name": "registry"}]}}
    ctx = context(cluster=cluster_spec(executors=2, podTemplate={"driver": NODE_POOL, "executor": executor}))
    template = executor_pod_of(ctx)
    plain = executor_pod_of(context(cluster=cluster_spec(executors=2)))
    assert template["kind"] == "Pod" and template["apiVersion"] == "v1"
    assert template["metadata"] == executor["metadata"]
    for field, value in executor["spec"].items():
        assert template["spec"][field] == value
    assert template["spec"]["securityContext"] == plain["spec"]["securityContext"]
    assert template["spec"]["containers"] == plain["spec"]["containers"]
    # the driver template stays on the drivers, and the executor template off them
    assert "nodeSelector" not in plain["spec"] and template["spec"]["nodeSelector"] == {"pool": "spot"}
    assert pod_of(ctx)["spec"]["nodeSelector"] == {"pool": "streaming"}
    assert "priorityClassName" not in pod_of(ctx)["spec"]


def test_the_runtime_accepts_the_executor_template() -> None:
    from sluice_runtime import cli

    templates = {"executor": {"spec": {"nodeSelector": {"a": "b"}}}}
    ctx = context(cluster=cluster_spec(executors=1, podTemplate=templates))
    container = pod_of(ctx)["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update({"POD_IP": "10.0.0.1", "POD_NAME": "p", "SLUICE_LEASE_NAMESPACE": "shop",
                "SLUICE_POD_NAME": "p"})
    config = cli.resolve_config(cli.build_parser().parse_args(container["command"][1:]), env)
    assert json.loads(config.executor_pod_template or "{}")["spec"]["nodeSelector"] == {"a": "b"}


def test_a_template_changes_the_deployment_and_so_rolls_the_drivers() -> None:
    plain = builders.driver_deployment(context(), H, "cm")
    ctx = context(spec=query_spec(podTemplate={"driver": NODE_POOL}))
    templated = builders.driver_deployment(ctx, H, "cm")
    assert templated["spec"]["template"] != plain["spec"]["template"]
    assert {k: v for k, v in templated["spec"].items() if k != "template"} == {
        k: v for k, v in plain["spec"].items() if k != "template"}
    assert without_engine(templated) != without_engine(plain)
