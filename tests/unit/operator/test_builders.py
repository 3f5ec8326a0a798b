"""Pure builders: the Kubernetes objects of one StreamingQuery."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice import __version__
from sluice.operator import builders
from sluice.operator.builders.driver import spark_conf, termination_grace_seconds
from sluice.operator.builders.storage import owner_patch

from tests.support.operator_fixtures import cluster_spec, context, query_spec

H = "ab" * 32


def all_objects(ctx: Any) -> list[dict[str, Any]]:
    return [builders.plan_config_map(ctx, H, "{}"),
            *builders.workload_objects(ctx, H, "totals-plan-abababababab")]


def env_of(sts: dict[str, Any]) -> dict[str, Any]:
    c = sts["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def test_every_object_is_namespaced_labelled_and_owned() -> None:
    ctx = context(spec=query_spec(deletionPolicy="Delete"))
    for obj in all_objects(ctx):
        meta = obj["metadata"]
        assert meta["namespace"] == "shop"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "sluice-operator"
        assert meta["labels"]["sluice.dev/query"] == "totals"
        owners = meta["ownerReferences"]
        assert owners == [{"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery", "name": "totals",
                           "uid": ctx.uid, "controller": True, "blockOwnerDeletion": True}]


def test_retain_leaves_the_state_claim_unowned() -> None:
    ctx = context()  # Retain is the default
    claim = builders.state_claim(ctx)
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["annotations"]["sluice.dev/deletion-policy"] == "Retain"
    others = [o for o in all_objects(ctx) if o["kind"] != "PersistentVolumeClaim"]
    assert all(o["metadata"]["ownerReferences"] for o in others)
    assert owner_patch(ctx)["metadata"]["ownerReferences"] == []
    assert owner_patch(context(spec=query_spec(deletionPolicy="Delete")))["metadata"]["ownerReferences"]


def test_plan_config_map_is_immutable_and_named_after_the_hash() -> None:
    cm = builders.plan_config_map(context(), H, '{"steps": []}')
    assert cm["immutable"] is True
    assert cm["metadata"]["name"] == "totals-plan-abababababab"
    assert cm["metadata"]["annotations"]["sluice.dev/plan-hash"] == H
    assert cm["metadata"]["labels"]["sluice.dev/plan-hash"] == H[:12]
    assert sorted(cm["data"]) == ["plan.json", "spec.json"]
    assert cm["data"]["plan.json"] == '{"steps": []}'


def test_plan_config_map_keeps_the_query_spec_that_compiled_into_the_plan() -> None:
    from sluice.core.compiler import compile_query
    from sluice.core.spec import QuerySpec
    from sluice.operator.builders.plan import query_spec_json

    ctx = context(spec=query_spec(suspend=True, restartNonce="7", deletionPolicy="Delete",
                                  upgrade={"allowReplace": False}, clusterRef={"name": "other"}))
    plan = compile_query(ctx.spec.query())
    cm = builders.plan_config_map(ctx, plan.hash, plan.to_json())
    kept = json.loads(cm["data"]["spec.json"])
    # only the fields the compiler reads: not the upgrade policy, clean-up, suspend, resources, ...
    assert sorted(kept) == ["shufflePartitions", "sink", "sources", "sql", "trigger"]
    assert kept["sql"] == ctx.spec.sql and kept["sink"]["key"] == ["customer"]
    assert kept["sources"][0]["schema"][0] == {"name": "order_id", "type": "string"}
    assert kept["trigger"] == {"processingTime": "5 seconds"}
    # it compiles into the very plan the ConfigMap pins, and the same spec gives the same text
    assert compile_query(QuerySpec.model_validate(kept)).hash == plan.hash
    assert cm["data"]["spec.json"] == query_spec_json(ctx.spec.query())
    unset = json.loads(query_spec_json(context(spec=query_spec(trigger={})).spec.query()))
    assert unset["trigger"] == {}  # optional fields left unset are left out, not written as null


def test_state_claim_uses_cluster_storage() -> None:
    ctx = context(cluster=cluster_spec(storage={"storageClassName": "fast", "size": "5Gi",
                                                "accessMode": "ReadWriteOncePod"}))
    spec = builders.state_claim(ctx)["spec"]
    assert spec == {"accessModes": ["ReadWriteOncePod"], "resources": {"requests": {"storage": "5Gi"}},
                    "storageClassName": "fast"}
    assert "storageClassName" not in builders.state_claim(context())["spec"]


def test_driver_runs_the_runtime_on_the_pinned_plan() -> None:
    ctx = context()
    sts = builders.driver_deployment(ctx, H, "totals-plan-abababababab")
    assert sts["kind"] == "Deployment" and sts["spec"]["replicas"] == 1
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["sluice-runtime", "run"]
    assert c["image"] == f"sluice-runtime:{__version__}"
    env = env_of(sts)
    assert env["SLUICE_PLAN"] == "/etc/sluice/plan/plan.json"
    assert env["SLUICE_CHECKPOINT"] == "/var/lib/sluice/state/shop/shop/totals/v1"
    assert env["SLUICE_BOOTSTRAP"] == "kafka:9092"
    assert env["SLUICE_MASTER"] == "local[*]"
    assert env["SLUICE_HTTP_ADDR"] == "$(POD_IP):8080"
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    names = [e["name"] for e in c["env"]]
    assert names.index("POD_IP") < names.index("SLUICE_HTTP_ADDR")  # $(VAR) needs it defined first
    assert env["SLUICE_QUERY_ID"].startswith("shop.shop.totals.01234567")
    conf = json.loads(env["SLUICE_SPARK_CONF"])
    assert conf["spark.local.dir"] == "/var/lib/sluice/spark-local"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["plan"]["configMap"]["name"] == "totals-plan-abababababab"
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "totals-state"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert env["SLUICE_CHECKPOINT"].startswith(mounts["state"] + "/")
    assert mounts["plan"] == "/etc/sluice/plan"
    assert sts["spec"]["template"]["metadata"]["annotations"]["sluice.dev/plan-hash"] == H


def test_driver_probes_and_drain() -> None:
    ctx = context(cluster=cluster_spec(drainSeconds=200))
    sts = builders.driver_deployment(ctx, H, "cm")
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 230
    assert termination_grace_seconds(ctx) > ctx.cluster.drain_seconds


def test_driver_security_context_is_restricted() -> None:
    sts = builders.driver_deployment(context(), H, "cm")
    pod = sts["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/tmp" in mounts and "/var/lib/sluice/spark-local" in mounts
    assert {v["name"] for v in pod["volumes"] if "emptyDir" in v} == {"tmp", "spark-local"}
    assert pod["automountServiceAccountToken"] is True  # the runtime's Lease client needs the token


def test_suspend_scales_to_zero_and_nonce_rolls() -> None:
    suspended = builders.driver_deployment(context(spec=query_spec(suspend=True)), H, "cm")
    assert suspended["spec"]["replicas"] == 0
    a = builders.driver_deployment(context(spec=query_spec(restartNonce="1")), H, "cm")
    b = builders.driver_deployment(context(spec=query_spec(restartNonce="2")), H, "cm")
    assert a["spec"]["template"] != b["spec"]["template"]
    assert a["spec"]["selector"] == b["spec"]["selector"]


def test_plan_change_changes_the_pod_template_only() -> None:
    a = builders.driver_deployment(context(), H, "cm-a")
    b = builders.driver_deployment(context(), "cd" * 32, "cm-b")
    assert a["spec"]["template"] != b["spec"]["template"]
    assert a["spec"]["selector"] == b["spec"]["selector"]  # immutable
    assert {k: v for k, v in a["spec"].items() if k != "template"} == \
        {k: v for k, v in b["spec"].items() if k != "template"}


def test_executors_use_spark_kubernetes_scheduler() -> None:
    ctx = context(cluster=cluster_spec(executors=3, image="reg/sluice-runtime:9",
                                       sparkConf={"spark.foo": "bar"}))
    sts = builders.driver_deployment(ctx, H, "cm")
    env = env_of(sts)
    # the API server the pod runs under, from the variables the kubelet injects into every pod
    assert env["SLUICE_MASTER"] == "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
    conf = json.loads(env["SLUICE_SPARK_CONF"])
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.kubernetes.container.image"] == "reg/sluice-runtime:9"
    assert conf["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "$(POD_IP)"
    # $(VAR) expands only against variables defined earlier in the list
    names = [e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.index("POD_IP") < names.index("SLUICE_SPARK_CONF")
    assert names.index("POD_NAME") < names.index("SLUICE_SPARK_CONF")
    # executors write state store files: they mount the driver's state claim at the same path
    claim = "spark.kubernetes.executor.volumes.persistentVolumeClaim.state"
    assert conf[f"{claim}.options.claimName"] == "totals-state"
    assert conf[f"{claim}.mount.path"] == "/var/lib/sluice/state"
    assert conf["spark.foo"] == "bar"
    # the executor container (limit 2Gi) is heap + overhead: max(384 MiB, 10 %) + RocksDB's 10 %
    assert (conf["spark.executor.memory"], conf["spark.executor.memoryOverhead"]) == ("1459m", "589m")
    assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "205"
    assert sts["spec"]["template"]["spec"]["automountServiceAccountToken"] is True


def test_query_overrides_cluster_resources() -> None:
    ctx = context(spec=query_spec(resources={"executors": 0, "driver": {"limits": {"cpu": "2"}}}),
                  cluster=cluster_spec(executors=4))
    assert ctx.executors == 0
    c = builders.driver_deployment(ctx, H, "cm")["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}
    assert "spark.executor.instances" not in spark_conf(ctx)


def test_kafka_credentials_come_from_secrets() -> None:
    ctx = context(cluster=cluster_spec(kafka={
        "bootstrapServers": "k:9093",
        "sasl": {"mechanism": "PLAIN", "usernameSecret": {"name": "kafka", "key": "user"},
                 "passwordSecret": {"name": "kafka", "key": "pass"}},
        "tls": {"caSecret": {"name": "ca", "key": "ca.crt"}},
    }))
    env = env_of(builders.driver_deployment(ctx, H, "cm"))
    assert env["SLUICE_KAFKA_SASL_PASSWORD"] == {"secretKeyRef": {"name": "kafka", "key": "pass"}}
    assert env["SLUICE_KAFKA_TLS_CA"] == {"secretKeyRef": {"name": "ca", "key": "ca.crt"}}
    assert "pass" not in json.dumps([e.get("value") for e in
                                     builders.driver_deployment(ctx, H, "cm")["spec"]["template"]["spec"]
                                     ["containers"][0]["env"]])


def test_service_is_headless_and_selects_the_driver() -> None:
    ctx = context()
    svc = builders.metrics_service(ctx)
    sts = builders.driver_deployment(ctx, H, "cm")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    tmpl_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert all(tmpl_labels[k] == v for k, v in svc["spec"]["selector"].items())
    assert {p["name"] for p in svc["spec"]["ports"]} == {"http", "driver-rpc", "blockmanager"}


def test_pdb_selects_the_driver() -> None:
    ctx = context()
    pdb = builders.disruption_budget(ctx)
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"] == ctx.selector()
    assert pdb["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("name", ["a" * 253, "Weird.Name.With.Dots"])
def test_long_or_odd_query_names(name: str) -> None:
    ctx = context(name=name)
    for obj in all_objects(ctx):
        assert len(obj["metadata"]["name"]) <= 63
        assert all(len(v) <= 63 for v in obj["metadata"]["labels"].values())


def test_builders_are_deterministic() -> None:
    assert all_objects(context()) == all_objects(context())


def test_executor_pods_get_the_restricted_security_context_through_a_pod_template() -> None:
    sts = builders.driver_deployment(context(cluster=cluster_spec(executors=2)), H, "cm")
    template = json.loads(env_of(sts)["SLUICE_EXECUTOR_POD_TEMPLATE"])
    assert template["kind"] == "Pod"
    pod = template["spec"]["securityContext"]
    assert pod == sts["spec"]["template"]["spec"]["securityContext"]  # the driver's user and group
    assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}
    container = template["spec"]["containers"][0]["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}
    # local mode: no executor pods, no template
    local = builders.driver_deployment(context(cluster=cluster_spec(executors=0)), H, "cm")
    assert "SLUICE_EXECUTOR_POD_TEMPLATE" not in env_of(local)


def test_the_lease_duration_of_the_cluster_reaches_the_lease_and_the_drivers() -> None:
    from sluice.crd.querycluster import QueryClusterSpec

    default = context()
    assert env_of(builders.driver_deployment(default, H, "cm"))["SLUICE_LEASE_SECONDS"] == "10"
    assert builders.driver_lease(default)["spec"] == {"leaseDurationSeconds": 10}
    longer = context(cluster=cluster_spec(lease={"durationSeconds": 30}))
    assert env_of(builders.driver_deployment(longer, H, "cm"))["SLUICE_LEASE_SECONDS"] == "30"
    assert builders.driver_lease(longer)["spec"] == {"leaseDurationSeconds": 30}
    # pinned with the engine, which an absent duration leaves as it was
    unset = QueryClusterSpec.model_validate(cluster_spec()).engine("img")
    assert "leaseSeconds" not in unset.canonical()
    assert QueryClusterSpec.model_validate(cluster_spec(lease={"durationSeconds": 30})).engine(
        "img").lease_seconds == 30
    shortest = QueryClusterSpec.model_validate(cluster_spec(lease={"durationSeconds": 3}))
    assert shortest.lease.duration_seconds == 3
    with pytest.raises(ValueError, match="durationSeconds"):
        QueryClusterSpec.model_validate(cluster_spec(lease={"durationSeconds": 2}))
