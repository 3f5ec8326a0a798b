"""The workload of a query whose checkpoint is in an object store (no claim, the s3a environment,
the executors' credentials, the RBAC without claims), and where the drivers of any query go."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice.operator import builders
from sluice.operator.builders.driver import (
    EXECUTOR_STATE_VOLUME,
    HOSTNAME_TOPOLOGY,
    NODE_LOSS_TOLERATION_SECONDS,
    driver_deployment,
    spark_conf,
    tolerations,
    update_strategy,
)
from sluice.operator.builders.rbac import MANAGED_ANNOTATIONS, rules, service_account, service_account_patch

from tests.support.operator_fixtures import cluster_spec, context, query_spec

STORE = {
    "uri": "s3a://checkpoints/sluice/",
    "endpoint": "http://s3proxy.storage:8080",
    "region": "eu-west-1",
    "pathStyleAccess": True,
    "credentialsSecret": "s3-credentials",
}
IDENTITY = {
    "uri": "s3a://checkpoints",
    "serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/sluice"},
}


def store_ctx(store: dict[str, Any] | None = None, spec: dict[str, Any] | None = None, **cluster: Any) -> Any:
    return context(spec=spec, cluster=cluster_spec(storage={"objectStore": store or STORE}, **cluster))


def pod(ctx: Any) -> dict[str, Any]:
    return driver_deployment(ctx, "ab" * 32, "cm")["spec"]["template"]  # type: ignore[no-any-return]


def env_of(ctx: Any) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod(ctx)["spec"]["containers"][0]["env"]}


def test_no_claim_is_created_or_mounted() -> None:
    ctx = store_ctx()
    kinds = [o["kind"] for o in builders.workload_objects(ctx, "ab" * 32, "cm")]
    assert "PersistentVolumeClaim" not in kinds and kinds[0] == "ServiceAccount"
    spec = pod(ctx)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["plan", "tmp", "spark-local"]
    assert [m["name"] for m in spec["containers"][0]["volumeMounts"]] == ["plan", "tmp", "spark-local"]
    # RocksDB's working copy: Spark's local dir, on the pod's emptyDir
    assert json.loads(env_of(ctx)["SLUICE_SPARK_CONF"])["spark.local.dir"] == "/var/lib/sluice/spark-local"
    # a volume query keeps its claim
    volume = context()
    assert builders.workload_objects(volume, "ab" * 32, "cm")[0]["kind"] == "PersistentVolumeClaim"
    assert "state" in [v["name"] for v in pod(volume)["spec"]["volumes"]]


def test_the_runtime_gets_the_object_store_environment() -> None:
    env = env_of(store_ctx())
    assert env["SLUICE_CHECKPOINT"] == "s3a://checkpoints/sluice/shop/shop/totals/v1"
    assert env["SLUICE_S3_ENDPOINT"] == "http://s3proxy.storage:8080"
    assert env["SLUICE_S3_PATH_STYLE"] == "true" and env["SLUICE_S3_REGION"] == "eu-west-1"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-credentials", "key": "accessKey"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-credentials", "key": "secretKey"}}
    # the same relative layout as on the volume, and the identity in the status follows it
    assert context().identity.checkpoint_path == "/var/lib/sluice/state/shop/shop/totals/v1"
    assert store_ctx().identity.checkpoint_relative == context().identity.checkpoint_relative


def test_workload_identity_sets_no_keys_and_optional_settings_are_left_out() -> None:
    env = env_of(store_ctx(IDENTITY))
    assert env["SLUICE_CHECKPOINT"] == "s3a://checkpoints/shop/shop/totals/v1"
    assert env["SLUICE_S3_PATH_STYLE"] == "false"
    for absent in ("SLUICE_S3_ENDPOINT", "SLUICE_S3_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert absent not in env
    assert not [k for k in env_of(context()) if k.startswith(("SLUICE_S3_", "AWS_"))]  # volume: none


def test_executors_get_the_key_pair_through_spark_and_mount_no_claim() -> None:
    conf = spark_conf(store_ctx(executors=2))
    assert conf["spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID"] == "s3-credentials:accessKey"
    assert conf["spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY"] == "s3-credentials:secretKey"
    assert not [k for k in conf if k.startswith(EXECUTOR_STATE_VOLUME)]
    assert "spark.kubernetes.authenticate.executor.serviceAccountName" not in conf
    volume = spark_conf(context(cluster=cluster_spec(executors=2, storage={"accessMode": "ReadWriteMany"})))
    assert volume[f"{EXECUTOR_STATE_VOLUME}.options.claimName"] == "totals-state"
    assert not [k for k in volume if "secretKeyRef" in k]


def test_executors_under_workload_identity_run_as_the_querys_service_account_without_its_token() -> None:
    ctx = store_ctx(IDENTITY, executors=1)
    conf = spark_conf(ctx)
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == "totals-spark"
    assert not [k for k in conf if "secretKeyRef" in k]
    template = json.loads(env_of(ctx)["SLUICE_EXECUTOR_POD_TEMPLATE"])
    assert template["spec"]["automountServiceAccountToken"] is False
    keyed = json.loads(env_of(store_ctx(executors=1))["SLUICE_EXECUTOR_POD_TEMPLATE"])
    assert "automountServiceAccountToken" not in keyed["spec"]


def test_the_role_has_no_claim_rules_with_an_object_store() -> None:
    def resources(ctx: Any) -> set[str]:
        return {r for rule in rules(ctx) for r in rule["resources"]}

    assert "persistentvolumeclaims" not in resources(store_ctx(executors=1))
    assert {"pods", "configmaps"} <= resources(store_ctx(executors=1))
    rwx = context(cluster=cluster_spec(executors=1, storage={"accessMode": "ReadWriteMany"}))
    assert "persistentvolumeclaims" in resources(rwx)


def test_the_service_account_carries_the_workload_identity_annotations() -> None:
    ctx = store_ctx(IDENTITY)
    annotations = service_account(ctx)["metadata"]["annotations"]
    assert annotations["eks.amazonaws.com/role-arn"] == "arn:aws:iam::111122223333:role/sluice"
    assert annotations[MANAGED_ANNOTATIONS] == "eks.amazonaws.com/role-arn"
    assert MANAGED_ANNOTATIONS not in service_account(context())["metadata"]["annotations"]
    # an existing ServiceAccount converges on them: set, changed, and removed again
    created = service_account(ctx)
    assert service_account_patch(ctx, created) is None
    bare = {"metadata": {"annotations": {"sluice.dev/query-name": "totals"}}}
    assert service_account_patch(ctx, bare) == {
        "metadata": {
            "annotations": {
                "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/sluice",
                MANAGED_ANNOTATIONS: "eks.amazonaws.com/role-arn",
            }
        }
    }
    other = store_ctx(
        {
            "uri": "s3a://checkpoints",
            "serviceAccountAnnotations": {"iam.gke.io/gcp-service-account": "q@p.iam.gserviceaccount.com"},
        }
    )
    assert service_account_patch(other, created) == {
        "metadata": {
            "annotations": {
                "eks.amazonaws.com/role-arn": None,
                "iam.gke.io/gcp-service-account": "q@p.iam.gserviceaccount.com",
                MANAGED_ANNOTATIONS: "iam.gke.io/gcp-service-account",
            }
        }
    }
    assert service_account_patch(store_ctx(), created) == {
        "metadata": {"annotations": {"eks.amazonaws.com/role-arn": None, MANAGED_ANNOTATIONS: None}}
    }
    # a hand-made annotation the operator never set is left alone
    assert service_account_patch(store_ctx(), {"metadata": {"annotations": {"team": "a"}}}) is None


SPREAD = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": HOSTNAME_TOPOLOGY,
                    "labelSelector": {
                        "matchLabels": {"sluice.dev/query": "totals", "app.kubernetes.io/component": "driver"}
                    },
                },
            }
        ]
    }
}


@pytest.mark.parametrize(
    "storage",
    [
        {"objectStore": STORE},
        {"accessMode": "ReadWriteMany"},
        {"objectStore": STORE, "accessMode": "ReadWriteOncePod"},
    ],
)
def test_drivers_spread_over_nodes_when_every_node_reaches_the_checkpoint(storage: dict[str, Any]) -> None:
    ctx = context(spec=query_spec(standbyReplicas=2), cluster=cluster_spec(storage=storage))
    spec = pod(ctx)["spec"]
    assert spec["affinity"] == SPREAD
    assert update_strategy(ctx)["type"] == "RollingUpdate"  # the object store ignores the claim's mode
    assert builders.standby_storage_problem(ctx, "default") is None


def test_drivers_on_a_read_write_once_claim_stay_together() -> None:
    spec = pod(context(spec=query_spec(standbyReplicas=1)))["spec"]
    assert list(spec["affinity"]) == ["podAffinity"]
    assert (
        spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
        == HOSTNAME_TOPOLOGY
    )


def test_drivers_leave_a_lost_node_after_ten_seconds() -> None:
    assert NODE_LOSS_TOLERATION_SECONDS == 10
    expected = [
        {
            "key": f"node.kubernetes.io/{taint}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 10,
        }
        for taint in ("not-ready", "unreachable")
    ]
    assert tolerations() == expected
    for ctx in (context(), store_ctx()):
        assert pod(ctx)["spec"]["tolerations"] == expected


def test_a_templates_tolerations_are_added_and_may_lengthen_the_operators() -> None:
    pool = {"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}
    longer = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 60,
    }
    template = {"driver": {"spec": {"tolerations": [pool, longer]}}}
    got = pod(store_ctx(podTemplate=template))["spec"]["tolerations"]
    assert got == [tolerations()[0], pool, longer]
    # with a template's anti-affinity too: the operator's spread first, the template's terms after it
    zone = {
        "weight": 50,
        "podAffinityTerm": {
            "topologyKey": "topology.kubernetes.io/zone",
            "labelSelector": {"matchLabels": {"sluice.dev/query": "totals"}},
        },
    }
    spread = {
        "driver": {
            "spec": {
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [zone]}}
            }
        }
    }
    terms = pod(store_ctx(podTemplate=spread))["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms == [*SPREAD["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"], zone]


def test_executors_on_a_one_node_claim_are_refused_naming_the_field() -> None:
    cluster_wide = context(cluster=cluster_spec(executors=2))
    assert builders.executor_storage_problem(cluster_wide, "default") == (
        "spec.executors (QueryCluster 'default'): 2 executor pods mount the state claim from any node; "
        "QueryCluster storage.accessMode ReadWriteOnce attaches it to one node: use storage.objectStore or "
        "storage.accessMode ReadWriteMany, or executors 0"
    )
    own = context(
        spec=query_spec(resources={"executors": 1}),
        cluster=cluster_spec(storage={"accessMode": "ReadWriteOncePod"}),
    )
    assert builders.executor_storage_problem(own, "default") == (
        "spec.resources.executors: 1 executor pod mounts the state claim from any node; QueryCluster "
        "storage.accessMode ReadWriteOncePod attaches it to one node: use storage.objectStore or "
        "storage.accessMode ReadWriteMany, or executors 0"
    )
    assert builders.executor_storage_problem(store_ctx(executors=2), "default") is None
    rwx = context(cluster=cluster_spec(executors=2, storage={"accessMode": "ReadWriteMany"}))
    assert builders.executor_storage_problem(rwx, "default") is None
    assert builders.executor_storage_problem(context(), "default") is None


def test_what_a_node_loss_does_to_the_query() -> None:
    assert builders.node_loss(context(spec=query_spec(standbyReplicas=1))) == (
        False,
        "storage.accessMode ReadWriteOnce keeps the driver and its 1 standby on the state claim's node: "
        "a node loss takes all of them; use storage.objectStore or a ReadWriteMany storage class to spread "
        "them",
    )
    assert builders.node_loss(store_ctx(spec=query_spec(standbyReplicas=2))) == (
        True,
        "checkpoint on the object store: the driver and its 2 standbys are spread over nodes "
        "(preferred): a standby on another node takes over after a node loss",
    )
    tolerant, why = builders.node_loss(context())
    assert not tolerant and "waits until the volume can attach elsewhere" in why
    tolerant, why = builders.node_loss(context(cluster=cluster_spec(storage={"accessMode": "ReadWriteMany"})))
    assert tolerant and why.startswith("checkpoint on a ReadWriteMany claim: after a node loss the driver")
