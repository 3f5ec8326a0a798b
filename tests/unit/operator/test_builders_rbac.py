"""The driver's ServiceAccount, Role and RoleBinding (``sluice.operator.builders.rbac``): what each
query's Role grants. On a real API server, with a driver's own token:
``tests/integration/test_rbac_real.py``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sluice.core import election
from sluice.operator import builders
from sluice.operator.builders import rbac
from sluice.operator.builders.context import BACKFILL_ROLE

from tests.support.operator_fixtures import cluster_spec, context, query_spec

H = "ab" * 32
#: what Kubernetes cannot restrict by name: the verbs without an object name at authorization time
UNNAMEABLE = {"create", "deletecollection"}


def grants(role: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(group, resource, verb, name or "*") of every permission the Role grants."""
    return {(group, resource, verb, name)
            for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
            for verb in rule["verbs"] for name in rule.get("resourceNames") or ["*"]}


def test_without_executors_the_role_names_its_leases_and_patches_its_pods_metadata() -> None:
    ctx = context()
    assert ctx.executors == 0
    role = builders.role(ctx)
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["totals-driver", "totals-backfill"], "verbs": ["get", "list", "watch", "update"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    ]
    # no pod, claim, ConfigMap, Service, Secret or RBAC object: the kubelet mounts the plan and the
    # state claim, the runtime never reads them through the API
    assert {resource for _, resource, _, _ in grants(role)} == {"leases", "pods/status"}


def test_the_role_names_the_leases_the_query_s_pods_compete_for() -> None:
    ctx = context()
    backfill = dataclasses.replace(ctx, role=BACKFILL_ROLE)
    names = rbac.lease_names(ctx)
    assert names == [builders.driver_lease(c)["metadata"]["name"] for c in (ctx, backfill)]
    assert names[0] == election.lease_name(ctx.names.base)

    def lease_env(c: Any) -> str:
        env = builders.driver_deployment(c, H, "cm")["spec"]["template"]["spec"]["containers"][0]["env"]
        return str(next(e["value"] for e in env if e["name"] == "SLUICE_LEASE_NAME"))

    assert [lease_env(ctx), lease_env(backfill)] == names
    # the backfill runs under the same ServiceAccount, and its context builds the same Role (the
    # operator converges one Role per query: never two versions of it)
    assert builders.role(backfill) == builders.role(ctx)
    pod_spec = builders.driver_deployment(backfill, H, "cm")["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == ctx.names.service_account


def test_no_lease_create_patch_or_delete_and_none_by_another_name() -> None:
    for ctx in (context(), context(cluster=cluster_spec(executors=2))):
        lease_grants = {g for g in grants(builders.role(ctx)) if g[1] == "leases"}
        assert {verb for _, _, verb, _ in lease_grants} == {"get", "list", "watch", "update"}
        assert {name for _, _, _, name in lease_grants} == {"totals-driver", "totals-backfill"}
    # ...because the operator creates the Lease before the Deployment whose pods compete for it
    kinds = [o["kind"] for o in builders.workload_objects(context(), H, "cm")]
    assert kinds.index("Lease") < kinds.index("Deployment")
    assert kinds.index("Role") < kinds.index("RoleBinding") < kinds.index("Deployment")


def test_with_executors_spark_s_scheduler_gets_pods_its_config_map_and_on_demand_claims() -> None:
    ctx = context(cluster=cluster_spec(executors=3))
    role = builders.role(ctx)
    assert role["rules"][:2] == builders.role(context())["rules"]
    assert role["rules"][2:] == [
        {"apiGroups": [""], "resources": ["pods"],
         "verbs": ["create", "get", "list", "watch", "patch", "delete", "deletecollection"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["create", "list"]},
    ]
    got = grants(role)
    # Spark creates no Service in client mode; no claim or ConfigMap can be read, changed or deleted
    assert not {g for g in got if g[1] == "services"}
    assert {verb for _, resource, verb, _ in got if resource in ("configmaps", "persistentvolumeclaims")} <= \
        {"create", "list"}


def test_a_query_without_executors_of_a_cluster_with_executors_gets_no_executor_rules() -> None:
    ctx = context(spec=query_spec(resources={"executors": 0}), cluster=cluster_spec(executors=4))
    assert ctx.executors == 0
    assert builders.role(ctx) == builders.role(context())


def test_nothing_unnamed_beyond_what_kubernetes_cannot_name_or_the_pods_names_hide() -> None:
    """Every unnamed grant is one the docs list as namespace-wide: verbs that carry no name, and
    pods (names generated by the ReplicaSet or by Spark)."""
    for ctx in (context(), context(cluster=cluster_spec(executors=1))):
        for group, resource, verb, name in grants(builders.role(ctx)):
            if name == "*":
                assert verb in UNNAMEABLE or resource in ("pods", "pods/status") or \
                    (resource, verb) == ("persistentvolumeclaims", "list"), (resource, verb)
            assert group in ("", "coordination.k8s.io")
            assert verb not in ("*", "escalate", "bind", "impersonate")


def test_the_role_is_a_fresh_copy() -> None:
    role = builders.role(context(cluster=cluster_spec(executors=1)))
    for rule in role["rules"]:
        rule["verbs"].append("escalate")
    again = builders.role(context(cluster=cluster_spec(executors=1)))
    assert "escalate" not in json.dumps(again)
    assert "escalate" not in json.dumps([rbac.EXECUTOR_RULES, rbac.POD_METADATA_RULES, rbac.LEASE_VERBS])


def test_binding_and_service_account() -> None:
    ctx = context()
    role = builders.role(ctx)
    binding = builders.role_binding(ctx)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "totals-spark", "namespace": "shop"}]
    account = builders.service_account(ctx)
    assert account["metadata"]["name"] == "totals-spark"
    assert account["automountServiceAccountToken"] is True
    deployment = builders.driver_deployment(ctx, H, "cm")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "totals-spark"
