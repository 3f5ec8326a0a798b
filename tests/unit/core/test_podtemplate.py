"""Pod templates (``sluice.core.podtemplate``, pure): what is refused and where, how a query's template
is laid over its cluster's, and how the result is laid over the pod the operator builds."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from sluice.core.podtemplate import (
    OWNED,
    OWNED_ANNOTATIONS,
    OWNED_LABELS,
    OWNED_SPEC_FIELDS,
    SPEC_FIELDS,
    apply,
    compact,
    merge,
    problems,
)

#: keys under the operator's prefix (some it sets, some not: the prefix is the operator's)
SLUICE_KEYS = {"sluice.dev/query", "sluice.dev/role", "sluice.dev/plan-hash", "sluice.dev/restart-nonce",
               "sluice.dev/x"}


def paths(templates: Any) -> dict[str, str]:
    return {p.path(): p.message for p in problems(templates)}


# -- protection ------------------------------------------------------------------------------------

#: every container field Kubernetes has: each is the operator's
CONTAINER_FIELDS = ("image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
                    "resizePolicy", "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe",
                    "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
                    "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin", "stdinOnce",
                    "tty")


@pytest.mark.parametrize("role", ["driver", "executor"])
@pytest.mark.parametrize("field", sorted(OWNED_SPEC_FIELDS))
def test_every_pod_field_the_operator_owns_is_refused_with_its_path(role: str, field: str) -> None:
    found = paths({role: {"spec": {field: {"x": 1}}}})
    assert list(found) == [f"spec.podTemplate.{role}.spec.{field}"]
    assert found[f"spec.podTemplate.{role}.spec.{field}"].startswith(OWNED)


@pytest.mark.parametrize("role", ["driver", "executor"])
@pytest.mark.parametrize("field", CONTAINER_FIELDS)
def test_every_container_field_is_refused_with_its_path(role: str, field: str) -> None:
    found = paths({role: {"spec": {"containers": [{"name": role, field: {"x": 1}}]}}})
    assert list(found) == [f"spec.podTemplate.{role}.spec.containers[0].{field}"]
    assert found[f"spec.podTemplate.{role}.spec.containers[0].{field}"].startswith(OWNED)


def test_the_paths_and_words_of_the_issue() -> None:
    container = {"name": "driver", "securityContext": {"privileged": True}}
    found = paths({"driver": {"spec": {"containers": [container], "terminationGracePeriodSeconds": 5}}})
    assert found == {
        "spec.podTemplate.driver.spec.containers[0].securityContext": "owned by the operator",
        "spec.podTemplate.driver.spec.terminationGracePeriodSeconds":
            "owned by the operator: derived from the QueryCluster's spec.drainSeconds",
    }


def test_resources_and_image_say_where_they_are_set() -> None:
    found = paths({"executor": {"spec": {"containers": [{"image": "x", "resources": {}}]}}})
    where = "spec.podTemplate.executor.spec.containers[0]"
    assert "spec.resources of the StreamingQuery" in found[f"{where}.resources"]
    assert "spec.image" in found[f"{where}.image"]


def test_a_container_list_of_its_own_is_the_operators_and_no_sidecar_is_added() -> None:
    assert paths({"driver": {"spec": {"containers": [{"name": "driver"}]}}}) == {
        "spec.podTemplate.driver.spec.containers": OWNED}
    assert paths({"driver": {"spec": {"containers": []}}}) == {
        "spec.podTemplate.driver.spec.containers": OWNED}
    found = paths({"driver": {"spec": {"containers": [{"name": "sidecar", "image": "envoy"}]}}})
    assert set(found) == {"spec.podTemplate.driver.spec.containers[0].name",
                          "spec.podTemplate.driver.spec.containers[0].image"}
    assert "extra containers are not supported" in found["spec.podTemplate.driver.spec.containers[0].name"]
    assert "'driver'" in found["spec.podTemplate.driver.spec.containers[0].name"]


@pytest.mark.parametrize("key", sorted(OWNED_LABELS | SLUICE_KEYS))
def test_the_operators_labels_are_refused(key: str) -> None:
    assert paths({"executor": {"metadata": {"labels": {key: "v", "team": "data"}}}}) == {
        f"spec.podTemplate.executor.metadata.labels.{key}": OWNED}


@pytest.mark.parametrize("key", sorted(OWNED_ANNOTATIONS | SLUICE_KEYS))
def test_the_operators_annotations_are_refused(key: str) -> None:
    assert paths({"driver": {"metadata": {"annotations": {key: "1", "owner": "team-a"}}}}) == {
        f"spec.podTemplate.driver.metadata.annotations.{key}": OWNED}


@pytest.mark.parametrize("field", ["name", "namespace", "generateName", "ownerReferences", "finalizers"])
def test_metadata_beyond_labels_and_annotations_is_the_operators(field: str) -> None:
    found = paths({"driver": {"metadata": {field: "x"}}})
    assert list(found) == [f"spec.podTemplate.driver.metadata.{field}"]
    assert found[f"spec.podTemplate.driver.metadata.{field}"].startswith(OWNED)


@pytest.mark.parametrize("field", ["hostNetwork", "hostPID", "initContainers", "dnsPolicy", "nodeName",
                                   "ephemeralContainers", "shareProcessNamespace", "hostAliases"])
def test_fields_neither_owned_nor_supported_are_refused_naming_what_is(field: str) -> None:
    found = paths({"driver": {"spec": {field: True}}})
    message = found[f"spec.podTemplate.driver.spec.{field}"]
    assert message.startswith("not supported in a pod template")
    assert all(name in message for name in SPEC_FIELDS)


def test_a_template_of_its_own_fields_and_affinity_kinds_only() -> None:
    found = paths({"driver": {"status": {}, "spec": {"affinity": {"nodeAffinty": {}}}}})
    assert set(found) == {"spec.podTemplate.driver.status",
                          "spec.podTemplate.driver.spec.affinity.nodeAffinty"}
    assert "nodeAffinity" in found["spec.podTemplate.driver.spec.affinity.nodeAffinty"]


@pytest.mark.parametrize(("labels", "bad"), [
    ({"Bad Key": "v"}, "Bad Key"),
    ({"example.com/": "v"}, "example.com/"),
    ({"team": "not valid!"}, "team"),
    ({"team": "x" * 64}, "team"),
])
def test_label_keys_and_values_are_checked(labels: dict[str, str], bad: str) -> None:
    found = paths({"driver": {"metadata": {"labels": labels}}})
    assert list(found) == [f"spec.podTemplate.driver.metadata.labels.{bad}"]
    assert found[f"spec.podTemplate.driver.metadata.labels.{bad}"].startswith("not a valid label")


def test_a_realistic_template_has_no_problem() -> None:
    assert problems(REALISTIC) == []
    assert problems(None) == [] and problems({}) == [] and problems({"driver": None}) == []


# -- merge: the query's over the cluster's ---------------------------------------------------------

REALISTIC: dict[str, Any] = {
    "driver": {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"labels": {"team": "data", "cost-center": "c1"},
                     "annotations": {"owner": "data@example.com"}},
        "spec": {
            "nodeSelector": {"pool": "streaming"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "streaming",
                             "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone",
                                                             "operator": "In", "values": ["a", "b"]}]}]}}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                           "whenUnsatisfiable": "ScheduleAnyway"}],
            "priorityClassName": "streaming-high",
            "imagePullSecrets": [{"name": "registry"}],
        },
    },
    "executor": {"spec": {"nodeSelector": {"pool": "spot"}, "priorityClassName": "batch-low",
                          "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}},
}


def test_maps_are_merged_key_by_key_and_the_query_wins() -> None:
    cluster = {"driver": {"metadata": {"labels": {"team": "platform", "tier": "1"},
                                       "annotations": {"a": "1"}},
                          "spec": {"nodeSelector": {"pool": "streaming", "arch": "amd64"}}}}
    query = {"driver": {"metadata": {"labels": {"team": "data"}}, "spec": {"nodeSelector": {"pool": "big"}}}}
    merged = merge(cluster, query)["driver"]
    assert merged["metadata"] == {"labels": {"team": "data", "tier": "1"}, "annotations": {"a": "1"}}
    assert merged["spec"]["nodeSelector"] == {"pool": "big", "arch": "amd64"}


def test_lists_and_scalars_are_replaced_whole() -> None:
    cluster = {"driver": {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}],
                                   "imagePullSecrets": [{"name": "r1"}], "priorityClassName": "p1",
                                   "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                                  "whenUnsatisfiable": "DoNotSchedule"}]}}}
    query = {"driver": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}],
                                 "imagePullSecrets": [{"name": "r2"}], "priorityClassName": "p2"}}}
    spec = merge(cluster, query)["driver"]["spec"]
    assert spec["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert spec["imagePullSecrets"] == [{"name": "r2"}]
    assert spec["priorityClassName"] == "p2"
    assert spec["topologySpreadConstraints"] == cluster["driver"]["spec"]["topologySpreadConstraints"]


def test_an_empty_list_of_the_query_clears_the_clusters() -> None:
    cluster = {"driver": {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}}
    merged = merge(cluster, {"driver": {"spec": {"tolerations": []}}})
    assert merged["driver"]["spec"]["tolerations"] == []
    assert "tolerations" not in apply({"spec": {"containers": []}}, merged["driver"])["spec"]


def test_affinity_is_merged_kind_by_kind() -> None:
    node = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": []}]}}
    anti = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {}}]}
    other = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 9, "podAffinityTerm": {}}]}
    cluster = {"driver": {"spec": {"affinity": {"nodeAffinity": node, "podAntiAffinity": anti}}}}
    merged = merge(cluster, {"driver": {"spec": {"affinity": {"podAntiAffinity": other}}}})
    assert merged["driver"]["spec"]["affinity"] == {"nodeAffinity": node, "podAntiAffinity": other}


def test_roles_are_merged_apart_and_nothing_is_nothing() -> None:
    merged = merge({"driver": {"spec": {"nodeSelector": {"a": "1"}}}},
                   {"executor": {"spec": {"nodeSelector": {"b": "2"}}}})
    assert merged == {"driver": {"spec": {"nodeSelector": {"a": "1"}}},
                      "executor": {"spec": {"nodeSelector": {"b": "2"}}}}
    assert merge(None, None) == {} and merge({}, {}) == {}


def test_merge_leaves_its_inputs_alone() -> None:
    cluster, query = copy.deepcopy(REALISTIC), {"driver": {"metadata": {"labels": {"team": "x"}}}}
    merged = merge(cluster, query)
    merged["driver"]["metadata"]["labels"]["new"] = "1"
    merged["driver"]["spec"]["tolerations"].append({})
    assert cluster == REALISTIC and query == {"driver": {"metadata": {"labels": {"team": "x"}}}}


def test_compact_drops_what_means_nothing_on_a_cluster() -> None:
    assert compact({"driver": {},
                    "executor": {"metadata": {"labels": {}}, "spec": {"tolerations": []}}}) == {}
    assert compact({"driver": {"spec": {"nodeSelector": {"a": "b"}, "tolerations": []}}}) == {
        "driver": {"spec": {"nodeSelector": {"a": "b"}}}}
    assert compact(None) == {}
    assert compact({"executor": {"apiVersion": "v1", "kind": "Pod"}}) == {}


# -- apply: onto the operator's pod ----------------------------------------------------------------

POD: dict[str, Any] = {
    "metadata": {"labels": {"app.kubernetes.io/component": "driver"},
                 "annotations": {"prometheus.io/scrape": "true"}},
    "spec": {
        "serviceAccountName": "q-spark",
        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"q": "1"}}}]}},
        "containers": [{"name": "driver"}],
    },
}


@pytest.mark.parametrize("template", [None, {}, {"metadata": {}, "spec": {}},
                                      {"metadata": {"labels": {}},
                                       "spec": {"tolerations": [], "nodeSelector": {}}},
                                      {"apiVersion": "v1", "kind": "Pod"}])
def test_an_empty_template_changes_nothing(template: Any) -> None:
    out = apply(POD, template)
    assert json.dumps(out) == json.dumps(POD)


def test_the_template_is_added_to_the_pod() -> None:
    out = apply(POD, REALISTIC["driver"])
    assert out["metadata"]["labels"] == {"app.kubernetes.io/component": "driver", "team": "data",
                                         "cost-center": "c1"}
    assert out["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "owner": "data@example.com"}
    spec = out["spec"]
    for field in ("nodeSelector", "tolerations", "topologySpreadConstraints", "priorityClassName",
                  "imagePullSecrets"):
        assert spec[field] == REALISTIC["driver"]["spec"][field]
    assert spec["serviceAccountName"] == "q-spark" and spec["containers"] == [{"name": "driver"}]
    # the operator's pod affinity stays, the template's node affinity joins it
    assert spec["affinity"] == {**POD["spec"]["affinity"], **REALISTIC["driver"]["spec"]["affinity"]}
    assert "apiVersion" not in out and "kind" not in out


def test_pod_affinity_terms_are_added_after_the_operators() -> None:
    term = {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "kafka"}}}
    preferred = [{"weight": 50, "podAffinityTerm": term}]
    out = apply(POD, {"spec": {"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [term],
        "preferredDuringSchedulingIgnoredDuringExecution": preferred}}}})
    pod_affinity = out["spec"]["affinity"]["podAffinity"]
    assert pod_affinity["requiredDuringSchedulingIgnoredDuringExecution"] == [
        *POD["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"], term]
    assert pod_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == preferred


def test_a_pod_without_metadata_or_affinity_gets_them() -> None:
    executor = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "executor"}]}}
    anti = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}
    out = apply(executor, {"metadata": {"labels": {"team": "data"}},
                           "spec": {"affinity": {"podAntiAffinity": anti}}})
    assert out["metadata"] == {"labels": {"team": "data"}}
    assert list(out["spec"]["affinity"]) == ["podAntiAffinity"]
    assert out["apiVersion"] == "v1" and out["kind"] == "Pod"


def test_apply_leaves_its_inputs_alone() -> None:
    pod, template = copy.deepcopy(POD), copy.deepcopy(REALISTIC["driver"])
    out = apply(pod, template)
    out["metadata"]["labels"]["x"] = "1"
    out["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].append({})
    out["spec"]["tolerations"].append({})
    assert pod == POD and template == REALISTIC["driver"]


def test_only_supported_fields_are_applied() -> None:
    """A template is checked before (``problems``); were a protected field to slip through, it is not
    laid over the operator's pod."""
    out = apply(POD, {"metadata": {"name": "x"},
                      "spec": {"serviceAccountName": "root", "nodeSelector": {"a": "b"}}})
    assert out["spec"]["serviceAccountName"] == "q-spark" and "name" not in out["metadata"]
    assert out["spec"]["nodeSelector"] == {"a": "b"}

