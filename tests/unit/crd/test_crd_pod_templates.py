"""``spec.podTemplate`` of both kinds in the CRD: the schema keeps a realistic template whole (and a
protected field too, so that it reaches the webhook instead of being pruned), and the webhook and the
reconcile refuse a protected field naming its path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from sluice.core.admission import SpecModels, Verdict, review_cluster, review_query
from sluice.core.manifest import validation_problems
from sluice.crd import QueryCluster, QueryClusterSpec, StreamingQuery, StreamingQuerySpec
from sluice.crd.generate import crd_for

from tests.support import paths
from tests.support.operator_fixtures import cluster_spec, query_spec

MODELS = SpecModels(query=StreamingQuerySpec, cluster=QueryClusterSpec)

#: what a platform team writes: a dedicated pool, spot executors, a private registry, spreading
REALISTIC: dict[str, Any] = yaml.safe_load("""
driver:
  apiVersion: v1
  kind: Pod
  metadata:
    labels: {team: payments, example.com/cost-center: cc-42}
    annotations: {cluster-autoscaler.kubernetes.io/safe-to-evict: "false"}
  spec:
    nodeSelector: {node-pool: streaming}
    tolerations:
      - {key: dedicated, operator: Equal, value: streaming, effect: NoSchedule}
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 60}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
            - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      podAntiAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 10
            podAffinityTerm:
              topologyKey: topology.kubernetes.io/zone
              labelSelector:
                matchExpressions: [{key: app, operator: In, values: [kafka]}]
    topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: ScheduleAnyway
        labelSelector: {matchLabels: {sluice.dev/query: totals}}
        matchLabelKeys: [pod-template-hash]
        minDomains: 2
        nodeAffinityPolicy: Honor
        nodeTaintsPolicy: Ignore
    priorityClassName: streaming-critical
    imagePullSecrets: [{name: registry-credentials}]
    schedulerName: default-scheduler
    runtimeClassName: runc
executor:
  metadata:
    labels: {team: payments}
  spec:
    tolerations:
      - {key: kubernetes.azure.com/scalesetpriority, operator: Equal, value: spot, effect: NoSchedule}
    affinity:
      nodeAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference:
              matchExpressions: [{key: kubernetes.azure.com/scalesetpriority, operator: In, values: [spot]}]
    priorityClassName: batch-low
    imagePullSecrets: [{name: registry-credentials}]
""")

PROTECTED = {"driver": {"spec": {"containers": [{"name": "driver",
                                                 "securityContext": {"privileged": True}}]}}}
PROTECTED_PATH = "spec.podTemplate.driver.spec.containers[0].securityContext"


def pruned(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` as the API server stores it under ``schema`` (structural pruning: unknown fields go,
    except below ``x-kubernetes-preserve-unknown-fields``)."""
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and isinstance(extra, dict):
            return {k: pruned(v, extra) for k, v in value.items()}
        if props is None:
            return value if schema.get("x-kubernetes-preserve-unknown-fields") else {}
        keep = schema.get("x-kubernetes-preserve-unknown-fields")
        return {k: pruned(v, props[k]) if k in props else v for k, v in value.items() if k in props or keep}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [pruned(v, schema["items"]) for v in value]
    return value


def spec_schema(kind: Any) -> dict[str, Any]:
    root = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema: dict[str, Any] = root["properties"]["spec"]
    return schema


@pytest.mark.parametrize("kind", [StreamingQuery, QueryCluster], ids=lambda k: k.kind)
def test_the_schema_keeps_a_realistic_template_whole(kind: Any) -> None:
    schema = spec_schema(kind)["properties"]["podTemplate"]
    assert pruned(REALISTIC, schema) == REALISTIC
    typed = schema["properties"]["driver"]["properties"]["spec"]["properties"]
    assert typed["nodeSelector"]["additionalProperties"] == {"type": "string"}
    assert set(typed["tolerations"]["items"]["properties"]) == {"key", "operator", "value", "effect",
                                                                "tolerationSeconds"}
    assert typed["imagePullSecrets"]["items"]["required"] == ["name"]
    assert typed["priorityClassName"]["type"] == "string"


@pytest.mark.parametrize("kind", [StreamingQuery, QueryCluster], ids=lambda k: k.kind)
def test_a_protected_field_is_not_pruned_so_the_operator_sees_it(kind: Any) -> None:
    schema = spec_schema(kind)["properties"]["podTemplate"]
    volumes = {"executor": {"metadata": {"name": "x"}, "spec": {"volumes": [{"name": "v"}]}}}
    for template in (PROTECTED, volumes):
        assert pruned(template, schema) == template


def test_both_models_accept_it_and_give_it_back_as_written() -> None:
    query = StreamingQuerySpec.model_validate(query_spec(podTemplate=REALISTIC))
    cluster = QueryClusterSpec.model_validate(cluster_spec(podTemplate=REALISTIC))
    assert query.pod_template is not None and query.pod_template.wire() == REALISTIC
    assert cluster.pod_template is not None and cluster.pod_template.wire() == REALISTIC


@pytest.mark.parametrize("model,spec", [(StreamingQuerySpec, query_spec), (QueryClusterSpec, cluster_spec)])
def test_the_models_name_the_protected_field(model: Any, spec: Any) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(spec(podTemplate=PROTECTED))
    assert [f"{p.field}: {p.message}" for p in validation_problems(info.value, "spec")] == [
        f"{PROTECTED_PATH}: owned by the operator"]


def test_every_problem_is_named_at_once() -> None:
    bad = {"driver": {"metadata": {"labels": {"app.kubernetes.io/name": "x"}},
                      "spec": {"serviceAccountName": "root", "securityContext": {"runAsUser": 0}}},
           "executor": {"spec": {"volumes": [], "hostNetwork": True}}}
    with pytest.raises(ValidationError) as info:
        StreamingQuerySpec.model_validate(query_spec(podTemplate=bad))
    assert [p.field for p in validation_problems(info.value, "spec")] == [
        "spec.podTemplate.driver.metadata.labels.app.kubernetes.io/name",
        "spec.podTemplate.driver.spec.serviceAccountName",
        "spec.podTemplate.driver.spec.securityContext",
        "spec.podTemplate.executor.spec.volumes",
        "spec.podTemplate.executor.spec.hostNetwork",
    ]


@pytest.mark.parametrize(("template", "path"), [
    ({"driver": {"spec": {"tolerations": [{"key": "a", "effect": "Sometimes"}]}}},
     "spec.podTemplate.driver.spec.tolerations[0].effect"),
    ({"executor": {"spec": {"nodeSelector": {"pool": 3}}}},
     "spec.podTemplate.executor.spec.nodeSelector.pool"),
    ({"driver": {"spec": {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                                          "whenUnsatisfiable": "DoNotSchedule"}]}}},
     "spec.podTemplate.driver.spec.topologySpreadConstraints[0].maxSkew"),
    ({"driver": {"kind": "Deployment"}}, "spec.podTemplate.driver.kind"),
    ({"common": {}}, "spec.podTemplate.common"),
])
def test_types_are_checked_with_their_path(template: dict[str, Any], path: str) -> None:
    with pytest.raises(ValidationError) as info:
        QueryClusterSpec.model_validate(cluster_spec(podTemplate=template))
    assert [p.field for p in validation_problems(info.value, "spec")] == [path]


# -- the webhook's path ------------------------------------------------------------------------------


def query_obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": "totals", "namespace": "shop", "uid": "u-1", "generation": 1},
            "spec": query_spec(**spec)}


def cluster_obj(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
            "metadata": {"name": "default", "namespace": "shop", "generation": 1},
            "spec": cluster_spec(**spec)}


def test_the_webhook_admits_a_realistic_template_on_both_kinds() -> None:
    assert review_query("CREATE", query_obj(podTemplate=REALISTIC), None, {}, models=MODELS) == Verdict(True)
    assert review_cluster("CREATE", cluster_obj(podTemplate=REALISTIC), None, models=MODELS) == Verdict(True)


def test_the_webhook_refuses_a_protected_field_naming_it() -> None:
    verdict = review_query("CREATE", query_obj(podTemplate=PROTECTED), None, {}, models=MODELS)
    assert verdict == Verdict(False, f"{PROTECTED_PATH}: owned by the operator", code=422)
    old = cluster_obj()
    new = cluster_obj(podTemplate={"executor": {"spec": {"terminationGracePeriodSeconds": 1}}})
    verdict = review_cluster("UPDATE", new, old, models=MODELS)
    assert not verdict.allowed and verdict.code == 422
    assert verdict.message == ("spec.podTemplate.executor.spec.terminationGracePeriodSeconds: owned by the "
                               "operator: derived from the QueryCluster's spec.drainSeconds")


def test_a_cluster_template_change_is_announced_as_reaching_the_queries() -> None:
    old = cluster_obj()
    new = copy.deepcopy(old)
    new["spec"]["podTemplate"] = REALISTIC
    verdict = review_cluster("UPDATE", new, old, models=MODELS)
    assert verdict.allowed and len(verdict.warnings) == 1
    assert verdict.warnings[0].startswith("this change (podTemplate) reaches the queries of this cluster")


def test_the_example_manifest_is_valid() -> None:
    docs = list(yaml.safe_load_all((paths.REPO / "examples" / "pod-templates.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    cluster = QueryCluster.model_validate(kinds["QueryCluster"])
    query = StreamingQuery.model_validate(kinds["StreamingQuery"])
    assert cluster.spec.pod_template is not None and query.spec.pod_template is not None
    assert review_query("CREATE", kinds["StreamingQuery"], None, {}, models=MODELS) == Verdict(True)
    assert review_cluster("CREATE", kinds["QueryCluster"], None, models=MODELS) == Verdict(True)
