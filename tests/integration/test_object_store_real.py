"""Checkpoints in an object store, against the real API server (and controller-manager): the CRD keeps
and refuses ``storage.objectStore`` naming the field; the reconcile builds a workload without a
claim, with the s3a environment, the drivers spread over nodes and quick to leave a lost one; a
ReadWriteOnce query with standbys says in its status that a node loss takes them all; executors on a
ReadWriteOnce claim are refused, the field named.

Same harness as ``test_pod_templates_real.py`` (``tests/support/world.py``); no kubelet, pods stay
Pending."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.operator.env import Stop
from sluice.operator.kube import KubeError
from sluice.operator.reconcile import reconcile_query

from tests.support.world import World, eventually

pytestmark = pytest.mark.integration

STORE = {
    "uri": "s3a://checkpoints/sluice",
    "endpoint": "http://s3proxy.storage:8080",
    "pathStyleAccess": True,
    "credentialsSecret": "s3-credentials",
    "serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/q"},
}


def condition(w: World, type_: str) -> dict[str, Any]:
    return next(c for c in w.status()["conditions"] if c["type"] == type_)


def test_the_crd_keeps_an_object_store_and_refuses_a_bad_one_naming_the_field(world: World) -> None:
    w = world
    w.edit_cluster(storage={"objectStore": STORE})
    cluster = w.k.get("QueryCluster", w.ns, "default")
    assert cluster is not None and cluster["spec"]["storage"]["objectStore"] == STORE
    for bad, field in (
        ({"uri": "s3://checkpoints"}, "spec.storage.objectStore.uri"),
        ({"uri": "s3a://Checkpoints/x"}, "spec.storage.objectStore.uri"),
        ({"uri": "s3a://b-1", "endpoint": "s3proxy:8080"}, "spec.storage.objectStore.endpoint"),
        ({"endpoint": "http://s3:9000"}, "spec.storage.objectStore.uri"),
        ({"uri": "s3a://b-1", "credentialsSecret": "Bad_Name"}, "spec.storage.objectStore.credentialsSecret"),
    ):
        with pytest.raises(KubeError) as info:
            w.edit_cluster(storage={"objectStore": None})  # a merge patch: start from no store
            w.edit_cluster(storage={"objectStore": bad})
        assert info.value.status == 422 and field in str(info.value), str(info.value)


def test_an_object_store_query_has_no_claim_carries_the_env_and_spreads(world: World) -> None:
    w = world
    w.edit_cluster(storage={"objectStore": STORE}, standbyReplicas=1)
    w.add_query()
    assert reconcile_query(w.env, w.current()) == "Starting"
    assert w.of_kind("PersistentVolumeClaim") == []
    spec = w.deployment()["spec"]["template"]["spec"]
    assert "state" not in [v["name"] for v in spec["volumes"]]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in spec["containers"][0]["env"]}
    assert env["SLUICE_CHECKPOINT"] == f"s3a://checkpoints/sluice/shop/{w.ns}/totals/v1"
    assert (
        env["SLUICE_S3_ENDPOINT"] == "http://s3proxy.storage:8080" and env["SLUICE_S3_PATH_STYLE"] == "true"
    )
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-credentials", "key": "accessKey"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-credentials", "key": "secretKey"}}
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert {(t["key"], t["tolerationSeconds"]) for t in spec["tolerations"]} == {
        ("node.kubernetes.io/not-ready", 10),
        ("node.kubernetes.io/unreachable", 10),
    }
    assert w.deployment()["spec"]["replicas"] == 2
    # the identity and the engine in the status say where the checkpoint is
    status = w.status()
    assert status["identity"]["checkpointPath"] == env["SLUICE_CHECKPOINT"]
    assert status["engine"]["objectStore"]["uri"] == STORE["uri"]
    node = condition(w, "NodeLossTolerant")
    assert (node["status"], node["reason"]) == ("True", "DriversSpread")
    # workload identity: the query's ServiceAccount carries the annotations
    [account] = w.of_kind("ServiceAccount")
    assert (
        account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == "arn:aws:iam::111122223333:role/q"
    )
    # the Role grants no claims
    [role] = w.of_kind("Role")
    assert not [r for r in role["rules"] if "persistentvolumeclaims" in r["resources"]]
    # the pods the ReplicaSet made keep the operator's tolerations (no 300 s default added over them)
    pod = eventually(lambda: (w.of_kind("Pod") or [None])[0], timeout=60, what="a driver pod")
    unreachable = [t for t in pod["spec"]["tolerations"] if t["key"] == "node.kubernetes.io/unreachable"]
    assert [t["tolerationSeconds"] for t in unreachable] == [10]


def test_moving_a_running_querys_checkpoint_is_refused(world: World) -> None:
    from sluice.operator.waves import roll_fleet

    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    assert w.of_kind("PersistentVolumeClaim")
    w.edit_cluster(storage={"objectStore": STORE})
    cluster = w.k.get("QueryCluster", w.ns, "default")
    assert cluster is not None
    roll_fleet(w.env, cluster)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "objectStore" not in status["engine"]  # still on the volume
    assert status["identity"]["checkpointPath"].startswith("/var/lib/sluice/state/")
    spec = w.deployment()["spec"]["template"]["spec"]
    assert "state" in [v["name"] for v in spec["volumes"]]
    assert "storage.objectStore.uri" in str(status.get("lastUpgrade") or status.get("rollout"))


def test_standbys_on_a_read_write_once_claim_are_said_to_share_a_node(world: World) -> None:
    w = world
    w.add_query(standbyReplicas=1)
    reconcile_query(w.env, w.current())
    node = condition(w, "NodeLossTolerant")
    assert (node["status"], node["reason"]) == ("False", "DriversOnOneNode")
    assert node["message"] == (
        "storage.accessMode ReadWriteOnce keeps the driver and its 1 standby on the state claim's node: a "
        "node loss takes all of them; use storage.objectStore or a ReadWriteMany storage class to spread them"
    )
    spec = w.deployment()["spec"]["template"]["spec"]
    assert spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_executors_on_a_read_write_once_claim_are_refused_naming_the_field(world: World) -> None:
    w = world
    w.add_query(resources={"executors": 2})
    with pytest.raises(Stop) as info:
        reconcile_query(w.env, w.current())
    message = (
        "spec.resources.executors: 2 executor pods mount the state claim from any node; QueryCluster "
        "storage.accessMode ReadWriteOnce attaches it to one node: use storage.objectStore or "
        "storage.accessMode ReadWriteMany, or executors 0"
    )
    assert str(info.value) == message
    degraded = condition(w, "Degraded")
    assert (degraded["reason"], degraded["message"]) == ("InvalidSpec", message)
    assert w.kinds() == set()
