"""Pure builders of the standby-driver layout: the driver Deployment, its Lease, the storage check."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.core import election
from sluice.operator import builders

from tests.support.operator_fixtures import MUTABLE_KINDS, cluster_spec, context, query_spec

H = "ab" * 32


def deployment(**kw: Any) -> dict[str, Any]:
    return builders.driver_deployment(context(**kw), H, "cm")


def storage(mode: str) -> dict[str, Any]:
    return cluster_spec(storage={"accessMode": mode})


def env_of(dep: dict[str, Any]) -> dict[str, Any]:
    c = dep["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def test_deployment_shape() -> None:
    ctx = context()
    dep = builders.driver_deployment(ctx, H, "cm")
    assert dep["apiVersion"] == "apps/v1" and dep["kind"] == "Deployment"
    assert dep["metadata"]["name"] == "totals-driver"
    spec = dep["spec"]
    assert spec["selector"] == {"matchLabels": {"sluice.dev/query": "totals",
                                                "app.kubernetes.io/component": "driver"}}
    assert spec["minReadySeconds"] == 0
    assert spec["revisionHistoryLimit"] == 2
    assert spec["progressDeadlineSeconds"] == 600
    assert "serviceName" not in spec and "podManagementPolicy" not in spec
    template = spec["template"]
    # the runtime keeps its own pod's role label and deletion cost: never in the template
    assert election.ROLE_LABEL not in template["metadata"]["labels"]
    assert election.DELETION_COST not in template["metadata"]["annotations"]
    assert template["spec"]["automountServiceAccountToken"] is True


@pytest.mark.parametrize(("cluster_standbys", "override", "suspend", "replicas"), [
    (0, None, False, 1),
    (2, None, False, 3),
    (2, 0, False, 1),
    (0, 3, False, 4),
    (1, 1, False, 2),
    (3, 2, True, 0),
    (0, None, True, 0),
])
def test_replicas_follow_suspend_standbys_and_override(cluster_standbys: int, override: int | None,
                                                        suspend: bool, replicas: int) -> None:
    spec = query_spec(suspend=suspend) if override is None else query_spec(suspend=suspend,
                                                                            standbyReplicas=override)
    ctx = context(spec=spec, cluster=cluster_spec(standbyReplicas=cluster_standbys))
    assert builders.driver_deployment(ctx, H, "cm")["spec"]["replicas"] == replicas == ctx.driver_replicas


@pytest.mark.parametrize("mode", ["ReadWriteOnce", "ReadWriteMany"])
def test_surge_rollout_starts_the_replacement_first(mode: str) -> None:
    strategy = deployment(cluster=storage(mode))["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_read_write_once_pod_recreates() -> None:
    assert deployment(cluster=storage("ReadWriteOncePod"))["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("mode", ["ReadWriteOnce", "ReadWriteOncePod"])
def test_single_node_claims_keep_every_driver_on_the_claims_node(mode: str) -> None:
    ctx = context(cluster=storage(mode))
    aff = builders.driver_deployment(ctx, H, "cm")["spec"]["template"]["spec"]["affinity"]
    assert aff == {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": ctx.selector()}}]}}


def test_read_write_many_spreads_drivers_over_nodes() -> None:
    ctx = context(cluster=storage("ReadWriteMany"))
    aff = builders.driver_deployment(ctx, H, "cm")["spec"]["template"]["spec"]["affinity"]
    assert list(aff) == ["podAntiAffinity"]
    [pref] = aff["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": ctx.selector()}}
    assert 1 <= pref["weight"] <= 100


def test_driver_env_names_the_lease_and_the_pod() -> None:
    env = env_of(deployment())
    assert env["SLUICE_LEASE_NAME"] == "totals-driver" == election.lease_name("totals")
    assert env["SLUICE_LEASE_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["SLUICE_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SLUICE_LEASE_SECONDS"] == "10"


def test_service_account_mounts_its_token() -> None:
    assert builders.service_account(context())["automountServiceAccountToken"] is True


def test_lease_is_created_without_a_holder_and_owned_by_the_query() -> None:
    ctx = context()
    lease = builders.driver_lease(ctx)
    assert lease["apiVersion"] == "coordination.k8s.io/v1" and lease["kind"] == "Lease"
    assert lease["metadata"]["name"] == election.lease_name(ctx.names.base)
    assert lease["metadata"]["namespace"] == "shop"
    assert lease["metadata"]["labels"][election.QUERY_LABEL] == "totals"
    assert lease["metadata"]["labels"]["app.kubernetes.io/component"] == "driver"
    assert lease["metadata"]["annotations"]["sluice.dev/query-name"] == "totals"
    assert lease["metadata"]["ownerReferences"] == [ctx.owner_reference()]
    assert lease["spec"] == {"leaseDurationSeconds": 10}
    # the drivers own its spec and annotations: converge never replaces it
    assert "Lease" not in MUTABLE_KINDS and "Deployment" in MUTABLE_KINDS


def test_lease_comes_before_the_driver() -> None:
    kinds = [o["kind"] for o in builders.workload_objects(context(), H, "cm")]
    assert kinds.index("Lease") < kinds.index("Deployment") == len(kinds) - 1
    assert "StatefulSet" not in kinds


def test_standbys_on_a_one_pod_volume_are_refused_naming_the_field() -> None:
    ctx = context(spec=query_spec(standbyReplicas=1), cluster=storage("ReadWriteOncePod"))
    assert builders.standby_storage_problem(ctx, "default") == (
        "spec.standbyReplicas: 1 standby driver needs a volume that 2 pods can mount; "
        "QueryCluster storage.accessMode ReadWriteOncePod allows one pod")
    ctx = context(cluster=cluster_spec(standbyReplicas=2, storage={"accessMode": "ReadWriteOncePod"}))
    message = builders.standby_storage_problem(ctx, "fast")
    assert message is not None
    assert message.startswith("spec.standbyReplicas (QueryCluster 'fast' default): 2 standby drivers need")


@pytest.mark.parametrize(("mode", "cluster_standbys", "override"), [
    ("ReadWriteOncePod", 0, None),
    ("ReadWriteOncePod", 2, 0),  # the override resolves to no standby
    ("ReadWriteOnce", 3, None),
    ("ReadWriteMany", 0, 3),
])
def test_layouts_that_work(mode: str, cluster_standbys: int, override: int | None) -> None:
    spec = query_spec() if override is None else query_spec(standbyReplicas=override)
    ctx = context(spec=spec, cluster=cluster_spec(standbyReplicas=cluster_standbys,
                                                  storage={"accessMode": mode}))
    assert builders.standby_storage_problem(ctx, "default") is None
