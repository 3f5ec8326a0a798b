"""Reconcile flows and Lease leader election against the real API server and a real Kafka broker.

The product's own REST client (``sluice.operator.kube.Kube``) talks to the test run's real
kube-apiserver (with the real controller-manager and scheduler; no kubelet, so pods stay Pending);
sink topics live on the real broker. Objects and status are read back from the API server. Calls
are recorded, and failures injected, by a subclass of the real client (``RecordingKube``); an
unreachable Kafka is a QueryCluster pointing at a closed port.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from sluice.core import election
from sluice.operator.cluster import reconcile_cluster
from sluice.operator.deletion import delete_query
from sluice.operator.env import Retry, Stop
from sluice.operator.kube import Kube, KubeError
from sluice.operator.leader import LeaderElector
from sluice.operator.reconcile import reconcile_query

from tests.support.drivers import DriverSide
from tests.support.world import (
    SQL,
    World,
    closed_port_address,
    eventually,
    snapshot,
)

pytestmark = pytest.mark.integration

# --------------------------------------------------------------------------------------------
# StreamingQuery reconcile
# --------------------------------------------------------------------------------------------


def test_create_pins_plan_then_builds_workload(world: World) -> None:
    w = world
    w.add_query()
    w.k.calls.clear()
    phase = reconcile_query(w.env, w.current())
    assert phase == "Starting"
    assert w.kinds() == {"ConfigMap", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding",
                         "Service", "PodDisruptionBudget", "Lease", "Deployment"}
    status = w.status()
    assert status["observedGeneration"] == 1
    assert status["plan"]["version"] == 1 and len(status["plan"]["hash"]) == 64
    assert status["plan"]["configMap"] == f"totals-plan-{status['plan']['hash'][:12]}"
    assert "rollout" not in status
    assert status["identity"]["consumerGroup"] == f"shop.{w.ns}.totals.v1"
    assert {c["type"] for c in status["conditions"]} == {"Ready", "Progressing", "Degraded",
                                                          "ReplanAvailable", "NodeLossTolerant"}
    assert w.topic_partitions() == {w.topic: 1}
    assert w.reasons() == ["TopicCreated", "PlanPinned", "WorkloadCreated"]
    # write-ahead: the first status patch carried the rollout before any object was created
    first_patch = next(i for i, c in enumerate(w.k.calls) if c[0] == "PATCH")
    first_create = next(i for i, c in enumerate(w.k.calls) if c[0] == "POST")
    assert first_patch < first_create
    assert w.k.calls[first_patch][1].endswith("/streamingqueries/totals/status")


def test_second_reconcile_is_idempotent_and_cheap(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    before, status_before = snapshot(w), w.status()
    w.k.calls.clear()
    reconcile_query(w.env, w.current())
    assert not w.k.writes()
    assert snapshot(w) == before
    assert w.status() == status_before


def test_restart_mid_create_resumes_without_duplicates(world: World) -> None:
    w = world
    w.add_query()
    w.k.fail_once = ("POST", "/deployments")  # the operator "dies" right before the driver
    with pytest.raises(KubeError):
        reconcile_query(w.env, w.current())
    assert w.status()["rollout"]["step"] == "Deploying"
    assert w.of_kind("Deployment") == [] and len(w.of_kind("ConfigMap")) == 1
    assert len(w.of_kind("Lease")) == 1
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "rollout" not in status and status["plan"]
    assert len(w.of_kind("Deployment")) == 1 and len(w.of_kind("ConfigMap")) == 1
    assert len(w.of_kind("Lease")) == 1


def test_transparent_edit_is_applied_in_place(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    old = w.status()["plan"]
    reconcile_query(w.env, w.edit(trigger={"processingTime": "10 seconds"}))
    status = w.status()
    assert status["rollout"]["step"] == "Verifying"
    DriverSide(w.k.api, w.ns).take_over(status["rollout"]["targetHash"], batches=3)
    reconcile_query(w.env, w.current())
    status = w.status()
    assert status["plan"]["hash"] != old["hash"] and status["plan"]["version"] == 1
    assert status["lastUpgrade"]["category"] == "transparent"
    assert status["lastUpgrade"]["outcome"] == "Succeeded"
    assert status["observedGeneration"] == 2
    vol = next(v for v in w.deployment()["spec"]["template"]["spec"]["volumes"] if v["name"] == "plan")
    assert vol["configMap"]["name"] == status["plan"]["configMap"]
    assert len(w.of_kind("ConfigMap")) == 2  # the old plan stays pinned for rollback
    assert "UpgradeSucceeded" in w.reasons()


def test_group_by_edit_with_backfill_leaves_the_drivers_alone_and_a_revert_cancels_it(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    dep_before = w.deployment()["spec"]
    rv_before = snapshot(w)[("Deployment", "totals-driver")]
    pinned = w.status()["plan"]
    sql = "SELECT order_id, count(*) AS orders, sum(amount) AS total FROM orders GROUP BY order_id"
    phase = reconcile_query(w.env, w.edit(sql=sql, sink={"topic": w.topic, "key": ["order_id"],
                                                         "outputMode": "update"},
                                          upgrade={"replaceStrategy": "backfill"}))
    status = w.status()
    assert phase == "Upgrading"
    assert status["plan"] == pinned
    assert status["rollout"]["step"] == "Backfilling"
    assert status["rollout"]["decision"] == "replace" and status["rollout"]["targetPlanVersion"] == 2
    assert status["lastUpgrade"]["outcome"] == "InProgress" and status["lastUpgrade"]["changes"]
    # the backfill runs beside the drivers, which stay exactly as they were
    assert w.deployment("backfill")["spec"]["replicas"] == 1
    assert w.deployment()["spec"] == dep_before
    assert snapshot(w)[("Deployment", "totals-driver")] == rv_before
    reconcile_query(w.env, w.current())
    assert snapshot(w)[("Deployment", "totals-driver")] == rv_before
    # reverting the edit cancels it: the backfill goes, the drivers were never touched
    reconcile_query(w.env, w.edit(sql=SQL, sink=w.query_spec()["sink"], upgrade=None))
    eventually(w.backfill_gone, timeout=60, what="the backfill's Deployment and pods are gone")
    reconcile_query(w.env, w.current())
    status = w.status()
    assert "rollout" not in status and status["lastUpgrade"]["outcome"] == "Cancelled"
    assert status["phase"] == "Starting" and status["plan"] == pinned
    assert snapshot(w)[("Deployment", "totals-driver")] == rv_before


def test_suspend_and_resume(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    assert reconcile_query(w.env, w.edit(suspend=True)) == "Suspended"
    assert w.deployment()["spec"]["replicas"] == 0
    assert len(w.of_kind("PersistentVolumeClaim")) == 1
    assert reconcile_query(w.env, w.edit(suspend=False)) == "Starting"
    assert w.deployment()["spec"]["replicas"] == 1
    assert "Suspended" in w.reasons() and "Resumed" in w.reasons()


def test_invalid_sql_is_degraded_and_creates_nothing(world: World) -> None:
    w = world
    w.add_query(sql="SELECT customer, nope FROM orders")
    with pytest.raises(Stop):
        reconcile_query(w.env, w.current())
    status = w.status()
    assert status["phase"] == "Degraded"
    err = status["lastCompileError"]
    assert err["line"] == 1 and err["column"] is not None
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "CompileFailed" and "line 1" in degraded["message"]
    assert w.kinds() == set()
    assert w.topic_partitions() == {}
    assert w.reasons() == ["CompileFailed"]


def test_invalid_sql_on_a_running_query_keeps_it_running(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    before = snapshot(w)
    w.k.calls.clear()
    with pytest.raises(Stop):
        reconcile_query(w.env, w.edit(sql="SELEC oops"))
    assert snapshot(w) == before
    assert all("/streamingqueries/" in path for _, path in w.k.writes())
    assert w.status()["plan"]


def test_missing_cluster_retries_with_backoff(world: World) -> None:
    w = world
    w.add_query(clusterRef={"name": "nope"})
    with pytest.raises(Retry) as info:
        reconcile_query(w.env, w.current(), retry=2)
    assert info.value.delay == 20
    degraded = next(c for c in w.status()["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ClusterNotFound"
    assert w.kinds() == set()
    with pytest.raises(Retry):
        reconcile_query(w.env, w.current(), retry=3)
    assert w.reasons() == ["ClusterNotFound"]  # no event spam on retries


def test_kafka_down_is_a_condition_and_a_retry(world: World) -> None:
    w = world
    w.kafka_down()
    w.add_query()
    with pytest.raises(Retry):
        reconcile_query(w.env, w.current())
    degraded = next(c for c in w.status()["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "KafkaUnreachable"
    w.kafka_up()
    assert reconcile_query(w.env, w.current()) == "Starting"
    degraded = next(c for c in w.status()["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"


# --------------------------------------------------------------------------------------------
# deletion
# --------------------------------------------------------------------------------------------


def test_delete_with_retain_keeps_claim_and_topic(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    group = w.status()["identity"]["consumerGroup"]
    w.commit_groups(group, f"{group}.eos.1")
    w.delete_after_drain(retry=0, runtime_seconds=0)
    assert w.deployment()["spec"]["replicas"] == 0
    assert len(w.of_kind("PersistentVolumeClaim")) == 1
    assert w.topic_partitions() == {w.topic: 1}
    assert {group, f"{group}.eos.1"} <= w.groups()  # resumed by a query created again
    assert "StateRetained" in w.reasons()


def test_delete_with_delete_removes_claim_and_topic(world: World) -> None:
    w = world
    w.add_query(deletionPolicy="Delete")
    reconcile_query(w.env, w.current())
    assert w.of_kind("PersistentVolumeClaim")[0]["metadata"]["ownerReferences"]
    group = w.status()["identity"]["consumerGroup"]
    w.commit_groups(group, f"{group}.eos.1")
    w.delete_after_drain(retry=0, runtime_seconds=0)
    eventually(lambda: not [c for c in w.of_kind("PersistentVolumeClaim")
                            if not c["metadata"].get("deletionTimestamp")],
               what="the state claim is gone")
    eventually(lambda: w.topic_partitions() == {}, what="the sink topic is gone from the broker")
    assert [m for r, m in w.events if r == "TopicDeleted"] == [f"deleted topic {w.topic!r}"]
    assert not {group, f"{group}.eos.1"} & w.groups()  # every version's groups, from status.versions
    assert {"TopicDeleted", "StateDeleted", "ConsumerGroupsDeleted"} <= set(w.reasons())


def test_delete_never_hangs_when_kafka_is_gone(world: World) -> None:
    w = world
    w.add_query(deletionPolicy="Delete")
    reconcile_query(w.env, w.current())
    w.kafka_down()

    def kafka_retry() -> bool:
        try:
            delete_query(w.env, w.current(), retry=0, runtime_seconds=0)
        except Retry as exc:
            return "drain" not in str(exc)
        raise AssertionError("delete_query finished although Kafka is down")

    eventually(kafka_retry, timeout=60, what="the finalizer retries because Kafka is down")
    delete_query(w.env, w.current(), retry=3, runtime_seconds=30)  # gives up, releases
    assert "TopicCleanupFailed" in w.reasons()
    assert w.topic_partitions() == {w.topic: 1}


def test_delete_waits_for_drain_then_gives_up(world: World, kube: Any) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    # a driver pod no ReplicaSet owns (no pod-template-hash label), so it stays while draining
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "stuck-driver", "namespace": w.ns, "labels": {
               "sluice.dev/query": "totals", "app.kubernetes.io/component": "driver"}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}], "automountServiceAccountToken": False}}
    eventually(lambda: w.k.create(pod), what="the pod is created (default ServiceAccount exists)")
    with pytest.raises(Retry):
        delete_query(w.env, w.current(), retry=0, runtime_seconds=10)
    delete_query(w.env, w.current(), retry=5, runtime_seconds=10_000)
    assert "DrainTimedOut" in w.reasons()


def _purge_step(w: World) -> str:
    """One call of the finalizer; the message of its Retry ("" when it finished)."""
    try:
        delete_query(w.env, w.current(), retry=0, runtime_seconds=0)
    except Retry as exc:
        return str(exc)
    return ""


def _end_purge(w: World, phase: str, message: str) -> None:
    """What the kubelet reports of the purge container (no node runs pods in these tests; the
    pod itself on a real node: tests/e2e/test_objectstore.py)."""
    w.k.patch_status("Pod", w.ns, "totals-purge", {"phase": phase, "containerStatuses": [{
        "name": "purge", "image": "sluice-runtime:test", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "message": message}}}]})


def test_delete_with_an_object_store_purges_its_checkpoints_in_a_pod(world: World) -> None:
    w = world
    w.edit_cluster(storage={"objectStore": {"uri": "s3a://checkpoints/sluice", "endpoint": "http://store:9000",
                                            "pathStyleAccess": True}})
    w.add_query(deletionPolicy="Delete")
    reconcile_query(w.env, w.current())
    assert not w.of_kind("PersistentVolumeClaim")
    prefix = "s3a://checkpoints/sluice/shop/" + w.ns + "/totals"
    eventually(lambda: "waiting for pod totals-purge" in _purge_step(w), timeout=60,
               what="the drivers drained and the purge pod started")
    pod = w.k.get("Pod", w.ns, "totals-purge")
    assert pod is not None and pod["spec"]["containers"][0]["command"][-1] == prefix
    assert pod["spec"]["serviceAccountName"] == "totals-spark"
    assert "waiting for pod totals-purge" in _purge_step(w)  # it runs: the finalizer waits
    assert w.status()["purge"] == {"prefix": prefix, "attempts": 1, "state": "Running"}

    # a failed purge is started again, and nothing else of the deletion happens meanwhile
    _end_purge(w, "Failed", '{"error": "S3Exception: Access Denied (403)"}')
    assert "Access Denied" in _purge_step(w)
    assert w.k.get("Pod", w.ns, "totals-purge") is None
    assert w.topic_partitions() == {w.topic: 1}
    assert "waiting for pod totals-purge" in _purge_step(w)
    assert w.status()["purge"]["attempts"] == 2

    _end_purge(w, "Succeeded", '{"objects": 12, "left": 0}')
    assert _purge_step(w) == ""
    assert w.k.get("Pod", w.ns, "totals-purge") is None
    assert w.status()["purge"]["state"] == "Done"
    deleted = [m for r, m in w.events if r == "StateDeleted"]
    assert deleted == [f'deleted the checkpoints under {prefix}: {{"objects": 12, "left": 0}}']
    eventually(lambda: w.topic_partitions() == {}, what="the sink topic is gone from the broker")
    assert w.reasons().count("StateDeleting") == 2
    assert _purge_step(w) == ""  # the finalizer called again: done is done, no new pod
    assert w.k.get("Pod", w.ns, "totals-purge") is None


def test_delete_gives_up_a_purge_that_keeps_failing_and_says_what_stays(world: World) -> None:
    w = world
    w.edit_cluster(storage={"objectStore": {"uri": "s3a://checkpoints", "endpoint": "http://store:9000"}})
    w.add_query(deletionPolicy="Delete")
    reconcile_query(w.env, w.current())
    eventually(lambda: "waiting for pod totals-purge" in _purge_step(w), timeout=60,
               what="the drivers drained and the purge pod started")
    for attempt in range(1, 4):
        _end_purge(w, "Failed", "DeadlineExceeded")
        said = _purge_step(w)
        if attempt < 3:
            assert "failed to delete" in said
            assert "waiting for pod totals-purge" in _purge_step(w)
        else:
            assert said == ""
    warnings = [m for r, m in w.events if r == "StateCleanupFailed"]
    assert len(warnings) == 1 and "after 3 attempts" in warnings[0] and "the objects stay" in warnings[0]
    assert w.status()["purge"]["state"] == "GaveUp"


def test_switching_deletion_policy_adopts_or_releases_the_claim(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    assert not w.of_kind("PersistentVolumeClaim")[0]["metadata"].get("ownerReferences")
    reconcile_query(w.env, w.edit(deletionPolicy="Delete"))
    assert w.of_kind("PersistentVolumeClaim")[0]["metadata"]["ownerReferences"]
    reconcile_query(w.env, w.edit(deletionPolicy="Retain"))
    assert not w.of_kind("PersistentVolumeClaim")[0]["metadata"].get("ownerReferences")


# --------------------------------------------------------------------------------------------
# QueryCluster, driver readiness, identity
# --------------------------------------------------------------------------------------------


def test_cluster_status(world: World) -> None:
    w = world
    body = w.k.get("QueryCluster", w.ns, "default")
    assert body is not None and body["metadata"]["generation"] == 1
    assert reconcile_cluster(w.env, body) == "Ready"
    qc = w.k.get("QueryCluster", w.ns, "default")
    assert qc is not None and qc["status"]["image"].startswith("sluice-runtime:")
    assert qc["status"]["phase"] == "Ready" and qc["status"]["observedGeneration"] == 1
    down = w.edit_cluster(kafka={"bootstrapServers": closed_port_address()})
    with pytest.raises(Retry):
        reconcile_cluster(w.env, down)
    qc = w.k.get("QueryCluster", w.ns, "default")
    assert qc is not None and qc["status"]["phase"] == "Degraded"


def driver_pods(w: World, count: int) -> list[str]:
    """Names of the driver pods the ReplicaSet controller created (Pending: there is no kubelet)."""
    def check() -> list[str] | None:
        pods = sorted(p["metadata"]["name"] for p in w.of_kind("Pod")
                      if not p["metadata"].get("deletionTimestamp"))
        return pods if len(pods) == count else None

    return eventually(check, timeout=60, what=f"{count} driver pods exist")


def set_pod_ready(w: World, pod: str, ready: bool) -> None:
    """There is no kubelet: report a driver pod's readiness through its status, as a kubelet would."""
    conditions = [{"type": t, "status": "True" if ready else "False"} for t in ("Ready", "ContainersReady")]
    w.k.patch("Pod", w.ns, pod, {"status": {"phase": "Running", "conditions": conditions}}, sub="status")


def hold(w: World, pod: str, takeover: election.Takeover | None = None) -> dict[str, Any]:
    """What a driver does on the Lease when it becomes the holder."""
    patch: dict[str, Any] = {"spec": {"holderIdentity": f"{pod}/{uuid.uuid4().hex[:6]}",
                                      "renewTime": "2026-01-01T00:00:00.000000Z"}}
    if takeover is not None:
        patch["metadata"] = {"annotations": {election.LAST_TAKEOVER: takeover.to_json()}}
        patch["spec"]["leaseTransitions"] = takeover.epoch
    return w.k.patch("Lease", w.ns, "totals-driver", patch)


def test_ready_follows_the_active_driver(world: World) -> None:
    from sluice.operator.handlers import _kopf, driver_lease

    w = world
    w.add_query(standbyReplicas=1)
    reconcile_query(w.env, w.current())
    a, b = driver_pods(w, 2)
    _kopf.configure(lambda: w.env)
    set_pod_ready(w, b, True)  # a warm standby is Ready, the Lease is not held yet
    lease = w.lease()
    driver_lease.handle(lease, namespace=w.ns, type="MODIFIED")
    status = w.status()
    assert status["ready"] is False and status["phase"] == "Starting"
    assert status["drivers"] == {"standbys": [a, b]}  # no active driver yet
    lease = hold(w, a)  # the holder is not ready yet
    driver_lease.handle(lease, namespace=w.ns, type="MODIFIED")
    assert w.status()["ready"] is False and w.status()["drivers"]["active"] == a
    set_pod_ready(w, a, True)
    assert reconcile_query(w.env, w.current()) == "Running"  # the reconcile reads the holder's pod too
    status = w.status()
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "DriverReady"
    renewed = w.k.patch("Lease", w.ns, "totals-driver",
                        {"spec": {"renewTime": "2026-01-01T00:00:02.000000Z"}})
    w.k.calls.clear()
    driver_lease.handle(renewed, namespace=w.ns, type="MODIFIED")  # a renewal: no API call at all
    assert w.k.calls == []
    set_pod_ready(w, a, False)
    assert reconcile_query(w.env, w.current()) == "Starting"  # the standby being Ready does not count


def test_standby_count_changes_up_and_down(world: World) -> None:
    w = world
    w.add_query(standbyReplicas=1)
    reconcile_query(w.env, w.current())
    assert w.deployment()["spec"]["replicas"] == 2
    strategy = w.deployment()["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    reconcile_query(w.env, w.edit(standbyReplicas=0))
    assert w.deployment()["spec"]["replicas"] == 1
    w.edit_cluster(standbyReplicas=3)
    reconcile_query(w.env, w.edit(standbyReplicas=None))  # back to the cluster's default
    assert w.deployment()["spec"]["replicas"] == 4
    driver_pods(w, 4)
    assert reconcile_query(w.env, w.edit(suspend=True)) == "Suspended"
    assert w.deployment()["spec"]["replicas"] == 0
    assert reconcile_query(w.env, w.edit(suspend=False)) == "Starting"
    assert w.deployment()["spec"]["replicas"] == 4


def test_driver_lease_is_created_once_and_left_to_the_drivers(world: World) -> None:
    w = world
    obj = w.add_query()
    reconcile_query(w.env, w.current())
    lease = w.lease()
    assert [o["uid"] for o in lease["metadata"]["ownerReferences"]] == [obj["metadata"]["uid"]]
    assert lease["spec"] == {"leaseDurationSeconds": 10}
    # a driver takes it and writes its annotations; converging never overwrites any of it
    taken = w.k.patch("Lease", w.ns, "totals-driver", {
        "metadata": {"annotations": {election.HOLDER_ADDRESS: "10.0.0.1:8080"}},
        "spec": {"holderIdentity": "p/1", "leaseDurationSeconds": 15,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}})
    w.edit_cluster(image="registry/sluice-runtime:2")  # the Deployment is replaced ...
    reconcile_query(w.env, w.current())
    after = w.lease()
    assert after["metadata"]["resourceVersion"] == taken["metadata"]["resourceVersion"]  # ... the Lease not
    assert after["spec"]["holderIdentity"] == "p/1" and after["spec"]["leaseDurationSeconds"] == 15


def test_a_lease_a_driver_created_first_is_adopted(world: World) -> None:
    w = world
    obj = w.add_query()
    w.k.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "totals-driver", "namespace": w.ns},
                "spec": {"holderIdentity": "early/1", "leaseDurationSeconds": 10}})
    reconcile_query(w.env, w.current())
    lease = w.lease()
    assert [o["uid"] for o in lease["metadata"]["ownerReferences"]] == [obj["metadata"]["uid"]]
    assert lease["metadata"]["labels"]["sluice.dev/query"] == "totals"
    assert lease["spec"]["holderIdentity"] == "early/1"


def test_a_takeover_is_reported_once(world: World) -> None:
    from sluice.operator.drivers import refresh_drivers

    w = world
    w.add_query(standbyReplicas=1)
    reconcile_query(w.env, w.current())
    a, b = driver_pods(w, 2)
    set_pod_ready(w, b, True)
    hold(w, a, election.Takeover(time="2026-01-01T00:00:00Z", from_pod="", to_pod=a, reason="new", epoch=0))
    refresh_drivers(w.env, w.ns, "totals")
    assert "lastFailover" not in w.status()["drivers"]  # the first holder replaced nobody
    took = election.Takeover(time="2026-01-01T00:00:30Z", from_pod=a, to_pod=b, reason="holder-dead",
                             epoch=1, gap_seconds=2.5)
    hold(w, b, took)
    for _ in range(3):  # the Lease and the Deployment watches may both report it
        refresh_drivers(w.env, w.ns, "totals")
    drivers = w.status()["drivers"]
    assert drivers["active"] == b and drivers["standbys"] == [a]
    assert drivers["lastFailover"] == {"time": "2026-01-01T00:00:30Z", "from": a, "to": b,
                                       "reason": "FailedOver", "gapSeconds": 2.5}
    assert [r for r in w.reasons() if r in ("FailedOver", "HandedOff")] == ["FailedOver"]
    assert w.status()["ready"] is True
    failovers = {kind: w.env.metrics.registry.get_sample_value(
        "sluice_operator_failovers_total", {"namespace": w.ns, "streamingquery": "totals", "kind": kind})
        for kind in ("FailedOver", "HandedOff")}
    assert failovers == {"FailedOver": 1, "HandedOff": 0}  # per query; both kinds from 0 on
    # a hand-off later is the next announcement
    hold(w, a, election.Takeover(time="2026-01-01T00:01:00Z", from_pod=b, to_pod=a, reason="released",
                                 epoch=2, gap_seconds=0.3))
    refresh_drivers(w.env, w.ns, "totals")
    assert [r for r in w.reasons() if r in ("FailedOver", "HandedOff")] == ["FailedOver", "HandedOff"]
    assert w.status()["drivers"]["lastFailover"]["reason"] == "HandedOff"


def test_handoff_annotation_is_forwarded_to_the_lease(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    hold(w, "p")
    w.k.patch("StreamingQuery", w.ns, "totals", {"metadata": {"annotations": {election.QUERY_HANDOFF: "r1"}}})
    reconcile_query(w.env, w.current())
    annotations = w.lease()["metadata"]["annotations"]
    assert election.HandoffRequest.from_json(annotations[election.HANDOFF_REQUEST]) == \
        election.HandoffRequest(id="r1", to="")
    w.k.calls.clear()
    reconcile_query(w.env, w.current())  # already forwarded: nothing written
    assert not w.k.writes()




def test_standbys_on_a_read_write_once_pod_volume_are_refused(world: World) -> None:
    w = world
    w.edit_cluster(storage={"accessMode": "ReadWriteOncePod"}, standbyReplicas=1)
    w.add_query()
    with pytest.raises(Stop) as info:
        reconcile_query(w.env, w.current())
    assert str(info.value).startswith("spec.standbyReplicas (QueryCluster 'default' default): 1 standby")
    degraded = next(c for c in w.status()["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "InvalidSpec" and "ReadWriteOncePod" in degraded["message"]
    assert w.kinds() == set() and w.topic_partitions() == {}
    assert w.reasons() == ["InvalidSpec"]
    # no standby for this query: one pod at a time, replaced by Recreate
    assert reconcile_query(w.env, w.edit(standbyReplicas=0)) == "Starting"
    assert w.deployment()["spec"]["strategy"] == {"type": "Recreate"}


def test_a_driver_container_too_small_for_spark_is_refused_before_anything_is_created(world: World) -> None:
    w = world
    w.edit_cluster(driver={"requests": {"memory": "512Mi"}, "limits": {"memory": "768Mi"}})
    w.add_query()
    with pytest.raises(Stop) as info:
        reconcile_query(w.env, w.current())
    assert "cannot hold a Spark driver" in str(info.value) and "raise it to at least" in str(info.value)
    degraded = next(c for c in w.status()["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "InvalidSpec" and "limits.memory" in degraded["message"]
    assert w.kinds() == set() and w.topic_partitions() == {}
    # a heap set in sparkConf is the user's choice: the container is taken as it is
    w.edit_cluster(sparkConf={"spark.driver.memory": "512m"})
    assert reconcile_query(w.env, w.edit(standbyReplicas=0)) == "Starting"


def test_service_id_is_pinned_at_creation(world: World) -> None:
    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    assert w.status()["identity"]["serviceId"] == "shop"
    checkpoint = w.status()["identity"]["checkpointPath"]
    w.edit_cluster(serviceId="renamed")
    reconcile_query(w.env, w.current())
    container = w.deployment()["spec"]["template"]["spec"]["containers"][0]
    env_vars = {e["name"]: e.get("value") for e in container["env"]}
    assert env_vars["SLUICE_CHECKPOINT"] == checkpoint
    assert w.status()["identity"]["serviceId"] == "shop"


def test_cluster_changes_reach_the_driver_once_the_cluster_rollout_admits_it(world: World) -> None:
    from sluice.operator.waves import roll_fleet

    w = world
    w.add_query()
    reconcile_query(w.env, w.current())
    w.edit_cluster(image="registry/sluice-runtime:2")
    reconcile_query(w.env, w.current())
    assert w.deployment()["spec"]["template"]["spec"]["containers"][0]["image"] == "sluice-runtime:0.1.0"
    cluster = w.k.get("QueryCluster", w.ns, "default")
    assert cluster is not None
    roll_fleet(w.env, cluster)
    reconcile_query(w.env, w.current())
    assert w.deployment()["spec"]["template"]["spec"]["containers"][0]["image"] == "registry/sluice-runtime:2"


def test_cluster_change_pokes_its_queries_once(world: World) -> None:
    from sluice.operator.cluster import CLUSTER_REVISION, poke_queries_of_cluster

    w = world
    w.add_query("a")
    w.add_query("b", clusterRef={"name": "other"})
    qc = w.edit_cluster(image="registry/sluice-runtime:2")
    meta = qc["metadata"]
    assert meta["generation"] == 2
    assert poke_queries_of_cluster(w.env, qc) == 1
    assert w.current("a")["metadata"]["annotations"][CLUSTER_REVISION] == f"{meta['uid'][:8]}-2"
    assert CLUSTER_REVISION not in (w.current("b")["metadata"].get("annotations") or {})
    assert poke_queries_of_cluster(w.env, qc) == 0


# --------------------------------------------------------------------------------------------
# Lease leader election
# --------------------------------------------------------------------------------------------

LEASE = "sluice-operator"


@pytest.fixture
def lease_kube(kube: Any) -> Kube:
    return Kube(kube.api)


def elector(k: Kube, namespace: str, identity: str, lease: int = 15) -> LeaderElector:
    return LeaderElector(k, namespace, LEASE, identity, lease_seconds=lease, renew_seconds=0.01)


def lease_spec(k: Kube, namespace: str) -> dict[str, Any]:
    obj = k.get("Lease", namespace, LEASE)
    assert obj is not None
    return dict(obj["spec"])


def expire(k: Kube, namespace: str) -> None:
    k.patch("Lease", namespace, LEASE, {"spec": {"renewTime": "2000-01-01T00:00:00.000000Z"}})


def test_only_one_candidate_wins(lease_kube: Kube, namespace: str) -> None:
    a, b = elector(lease_kube, namespace, "a"), elector(lease_kube, namespace, "b")
    assert a.try_acquire() is True
    assert b.try_acquire() is False
    assert a.try_acquire() is True  # renewal
    assert lease_spec(lease_kube, namespace)["holderIdentity"] == "a"


def test_expired_lease_is_taken_over_and_transitions_counted(lease_kube: Kube, namespace: str) -> None:
    a, b = elector(lease_kube, namespace, "a"), elector(lease_kube, namespace, "b")
    assert a.try_acquire()
    expire(lease_kube, namespace)
    assert b.try_acquire() is True
    spec = lease_spec(lease_kube, namespace)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert a.try_acquire() is False


def test_release_hands_over_at_once(lease_kube: Kube, namespace: str) -> None:
    a, b = elector(lease_kube, namespace, "a"), elector(lease_kube, namespace, "b")
    assert a.try_acquire()
    a.release()
    assert b.try_acquire() is True


class RacingKube(Kube):
    """The real client; just before this candidate's replace, another writer moves the Lease."""

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "Lease":
            meta = obj["metadata"]
            Kube(self.api).patch("Lease", meta["namespace"], meta["name"],
                                 {"metadata": {"annotations": {"raced": uuid.uuid4().hex}}})
        return super().replace(obj)


def test_conflicting_update_loses(kube: Any, lease_kube: Kube, namespace: str) -> None:
    a = elector(lease_kube, namespace, "a")
    assert a.try_acquire()
    expire(lease_kube, namespace)
    assert elector(RacingKube(kube.api), namespace, "b").try_acquire() is False  # a real 409
    assert lease_spec(lease_kube, namespace)["holderIdentity"] == "a"


def test_wait_for_leadership_stops_on_flag(lease_kube: Kube, namespace: str) -> None:
    assert elector(lease_kube, namespace, "a").try_acquire()
    stop = threading.Event()
    stop.set()
    assert elector(lease_kube, namespace, "b").wait_for_leadership(stop) is False


def test_renewal_failure_sets_lost(lease_kube: Kube, namespace: str) -> None:
    a = elector(lease_kube, namespace, "a", lease=1)  # the API server rejects 0 (must be > 0)
    assert a.try_acquire()
    lease_kube.patch("Lease", namespace, LEASE,
                     {"spec": {"holderIdentity": "thief", "leaseDurationSeconds": 3600}})
    stop, lost = threading.Event(), threading.Event()
    guard = threading.Timer(20, stop.set)  # never hang the run if renewal kept "succeeding"
    guard.start()
    try:
        a.keep_renewing(stop, lost)
    finally:
        guard.cancel()
    assert lost.is_set()
