"""Reconcile flows against an in-memory API (FakeKube) with the real compiler and classifier."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from operator_fixtures import FakeKube, cluster_spec, query_spec
from prometheus_client import CollectorRegistry
from sluice.operator.kafka_admin import KafkaUnavailable, TopicResult
from sluice.operator.kube import KubeError
from sluice.operator.metrics import OperatorMetrics
from sluice.operator.reconcile import Env, Retry, Stop, delete_query, reconcile_cluster, reconcile_query


class FakeAdmin:
    def __init__(self) -> None:
        self.topics_: dict[str, int] = {}
        self.down = False
        self.deleted: list[str] = []

    def topics(self) -> set[str]:
        if self.down:
            raise KafkaUnavailable("down")
        return set(self.topics_)

    def ensure_topic(self, topic: str, partitions: int, replication: int) -> TopicResult:
        if topic in self.topics():
            return TopicResult(topic, False)
        self.topics_[topic] = partitions
        return TopicResult(topic, True)

    def delete_topic(self, topic: str) -> bool:
        if topic not in self.topics():
            return False
        del self.topics_[topic]
        self.deleted.append(topic)
        return True


class FakeEnv(Env):
    admin: FakeAdmin

    def topic_admin(self, namespace: str, cluster: Any) -> Any:
        return self.admin


@pytest.fixture
def world() -> tuple[FakeEnv, FakeKube, list[tuple[str, str]]]:
    kube = FakeKube()
    events: list[tuple[str, str]] = []
    env = FakeEnv(kube=kube, events=lambda body, t, reason, msg: events.append((reason, msg)),  # type: ignore[arg-type]
                  clock=lambda: "2026-01-01T00:00:00Z",
                  metrics=OperatorMetrics(CollectorRegistry()))
    env.admin = FakeAdmin()
    kube.objects[("QueryCluster", "shop", "default")] = {
        "kind": "QueryCluster", "metadata": {"name": "default", "namespace": "shop"}, "spec": cluster_spec()}
    return env, kube, events


def add_query(kube: FakeKube, name: str = "totals", **spec: Any) -> dict[str, Any]:
    obj = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
           "metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}-0000", "generation": 1},
           "spec": query_spec(**spec)}
    kube.objects[("StreamingQuery", "shop", name)] = obj
    return obj


def current(kube: FakeKube, name: str = "totals") -> dict[str, Any]:
    return copy.deepcopy(kube.objects[("StreamingQuery", "shop", name)])


def edit(kube: FakeKube, name: str = "totals", **spec: Any) -> dict[str, Any]:
    obj = kube.objects[("StreamingQuery", "shop", name)]
    obj["spec"].update(spec)
    obj["metadata"]["generation"] += 1
    return current(kube, name)


def kinds(kube: FakeKube) -> set[str]:
    return {k for (k, _, _) in kube.objects} - {"QueryCluster", "StreamingQuery"}


def test_create_pins_plan_then_builds_workload(world: Any) -> None:
    env, kube, events = world
    add_query(kube)
    phase = reconcile_query(env, current(kube))
    assert phase == "Starting"
    assert kinds(kube) == {"ConfigMap", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding",
                           "Service", "PodDisruptionBudget", "StatefulSet"}
    status = current(kube)["status"]
    assert status["observedGeneration"] == 1
    assert status["plan"]["version"] == 1 and len(status["plan"]["hash"]) == 64
    assert status["plan"]["configMap"] == f"totals-plan-{status['plan']['hash'][:12]}"
    assert "rollout" not in status
    assert status["identity"]["consumerGroup"] == "shop.shop.totals.v1"
    assert {c["type"] for c in status["conditions"]} == {"Ready", "Progressing", "Degraded"}
    assert env.admin.topics_ == {"totals": 1}
    reasons = [r for r, _ in events]
    assert reasons == ["TopicCreated", "PlanPinned", "WorkloadCreated"]
    # write-ahead: the first status patch carried the rollout before any object was created
    first_patch = next(i for i, c in enumerate(kube.calls) if c[0] == "PATCH")
    first_create = next(i for i, c in enumerate(kube.calls) if c[0] == "POST")
    assert first_patch < first_create


def test_second_reconcile_is_idempotent_and_cheap(world: Any) -> None:
    env, kube, _ = world
    add_query(kube)
    reconcile_query(env, current(kube))
    before = copy.deepcopy(kube.objects)
    kube.calls.clear()
    reconcile_query(env, current(kube))
    assert kube.objects == before
    assert not [c for c in kube.calls if c[0] in ("POST", "PUT", "PATCH", "DELETE")]


def test_restart_mid_create_resumes_without_duplicates(world: Any) -> None:
    env, kube, _ = world
    add_query(kube)
    kube.fail_creates = {"StatefulSet"}  # the operator "dies" right before the driver
    with pytest.raises(KubeError):
        reconcile_query(env, current(kube))
    assert current(kube)["status"]["rollout"]["step"] == "Deploying"
    kube.fail_creates = set()
    reconcile_query(env, current(kube))
    status = current(kube)["status"]
    assert "rollout" not in status and status["plan"]
    assert len(kube.of_kind("StatefulSet")) == 1 and len(kube.of_kind("ConfigMap")) == 1


def test_transparent_edit_is_applied_in_place(world: Any) -> None:
    env, kube, events = world
    add_query(kube)
    reconcile_query(env, current(kube))
    old = current(kube)["status"]["plan"]
    reconcile_query(env, edit(kube, trigger={"processingTime": "10 seconds"}))
    status = current(kube)["status"]
    assert status["plan"]["hash"] != old["hash"] and status["plan"]["version"] == 1
    assert status["lastUpgrade"]["category"] == "transparent"
    assert status["lastUpgrade"]["outcome"] == "Applied"
    assert status["observedGeneration"] == 2
    sts = kube.of_kind("StatefulSet")[0]
    vol = next(v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "plan")
    assert vol["configMap"]["name"] == status["plan"]["configMap"]
    assert len(kube.of_kind("ConfigMap")) == 2  # the old plan stays pinned for rollback
    assert "UpgradeApplied" in [r for r, _ in events]


def test_group_by_edit_waits_and_leaves_workload_alone(world: Any) -> None:
    env, kube, _ = world
    add_query(kube)
    reconcile_query(env, current(kube))
    sts_before = copy.deepcopy(kube.of_kind("StatefulSet")[0])
    pinned = current(kube)["status"]["plan"]
    sql = "SELECT order_id, count(*) AS orders, sum(amount) AS total FROM orders GROUP BY order_id"
    phase = reconcile_query(env, edit(kube, sql=sql, sink={"topic": "totals", "key": ["order_id"],
                                                          "outputMode": "update"}))
    status = current(kube)["status"]
    assert phase == "UpgradePending"
    assert status["plan"] == pinned
    assert status["rollout"]["step"] == "AwaitingUpgrade"
    assert status["rollout"]["decision"] == "replace" and status["rollout"]["targetPlanVersion"] == 2
    assert status["lastUpgrade"]["outcome"] == "Pending" and status["lastUpgrade"]["changes"]
    assert kube.of_kind("StatefulSet")[0] == sts_before
    # reconciling again changes nothing; reverting the edit cancels the pending upgrade
    reconcile_query(env, current(kube))
    assert kube.of_kind("StatefulSet")[0] == sts_before
    reconcile_query(env, edit(kube, sql=query_spec()["sql"], sink=query_spec()["sink"]))
    status = current(kube)["status"]
    assert "rollout" not in status and status["lastUpgrade"]["outcome"] == "Cancelled"
    assert status["phase"] == "Starting"


def test_suspend_and_resume(world: Any) -> None:
    env, kube, events = world
    add_query(kube)
    reconcile_query(env, current(kube))
    assert reconcile_query(env, edit(kube, suspend=True)) == "Suspended"
    assert kube.of_kind("StatefulSet")[0]["spec"]["replicas"] == 0
    assert len(kube.of_kind("PersistentVolumeClaim")) == 1
    assert reconcile_query(env, edit(kube, suspend=False)) == "Starting"
    assert kube.of_kind("StatefulSet")[0]["spec"]["replicas"] == 1
    reasons = [r for r, _ in events]
    assert "Suspended" in reasons and "Resumed" in reasons


def test_invalid_sql_is_degraded_and_creates_nothing(world: Any) -> None:
    env, kube, events = world
    add_query(kube, sql="SELECT customer, nope FROM orders")
    with pytest.raises(Stop):
        reconcile_query(env, current(kube))
    status = current(kube)["status"]
    assert status["phase"] == "Degraded"
    err = status["lastCompileError"]
    assert err["line"] == 1 and err["column"] is not None
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "CompileFailed" and "line 1" in degraded["message"]
    assert kinds(kube) == set()
    assert env.admin.topics_ == {}
    assert [r for r, _ in events] == ["CompileFailed"]


def test_invalid_sql_on_a_running_query_keeps_it_running(world: Any) -> None:
    env, kube, _ = world
    add_query(kube)
    reconcile_query(env, current(kube))
    before = copy.deepcopy({k: v for k, v in kube.objects.items() if k[0] != "StreamingQuery"})
    with pytest.raises(Stop):
        reconcile_query(env, edit(kube, sql="SELEC oops"))
    after = {k: v for k, v in kube.objects.items() if k[0] != "StreamingQuery"}
    assert after == before
    assert current(kube)["status"]["plan"]


def test_missing_cluster_retries_with_backoff(world: Any) -> None:
    env, kube, events = world
    add_query(kube, clusterRef={"name": "nope"})
    with pytest.raises(Retry) as info:
        reconcile_query(env, current(kube), retry=2)
    assert info.value.delay == 20
    status = current(kube)["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ClusterNotFound"
    assert kinds(kube) == set()
    with pytest.raises(Retry):
        reconcile_query(env, current(kube), retry=3)
    assert [r for r, _ in events] == ["ClusterNotFound"]  # no event spam on retries


def test_kafka_down_is_a_condition_and_a_retry(world: Any) -> None:
    env, kube, _ = world
    env.admin.down = True
    add_query(kube)
    with pytest.raises(Retry):
        reconcile_query(env, current(kube))
    degraded = next(c for c in current(kube)["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "KafkaUnreachable"
    env.admin.down = False
    assert reconcile_query(env, current(kube)) == "Starting"
    degraded = next(c for c in current(kube)["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"


def test_delete_with_retain_keeps_claim_and_topic(world: Any) -> None:
    env, kube, events = world
    add_query(kube)
    reconcile_query(env, current(kube))
    delete_query(env, current(kube), retry=0, runtime_seconds=0)
    assert kube.of_kind("StatefulSet")[0]["spec"]["replicas"] == 0
    assert len(kube.of_kind("PersistentVolumeClaim")) == 1
    assert env.admin.topics_ == {"totals": 1}
    assert "StateRetained" in [r for r, _ in events]


def test_delete_with_delete_removes_claim_and_topic(world: Any) -> None:
    env, kube, events = world
    add_query(kube, deletionPolicy="Delete")
    reconcile_query(env, current(kube))
    assert kube.of_kind("PersistentVolumeClaim")[0]["metadata"]["ownerReferences"]
    delete_query(env, current(kube), retry=0, runtime_seconds=0)
    assert kube.of_kind("PersistentVolumeClaim") == []
    assert env.admin.deleted == ["totals"]
    assert {"TopicDeleted", "StateDeleted"} <= {r for r, _ in events}


def test_delete_never_hangs_when_kafka_is_gone(world: Any) -> None:
    env, kube, events = world
    add_query(kube, deletionPolicy="Delete")
    reconcile_query(env, current(kube))
    env.admin.down = True
    with pytest.raises(Retry):
        delete_query(env, current(kube), retry=0, runtime_seconds=0)
    delete_query(env, current(kube), retry=3, runtime_seconds=30)  # gives up, releases
    assert "TopicCleanupFailed" in [r for r, _ in events]


def test_delete_waits_for_drain_then_gives_up(world: Any) -> None:
    env, kube, events = world
    add_query(kube)
    reconcile_query(env, current(kube))
    kube.objects[("Pod", "shop", "totals-driver-0")] = {
        "kind": "Pod", "metadata": {"name": "totals-driver-0", "namespace": "shop", "labels": {
            "sluice.dev/query": "totals", "app.kubernetes.io/component": "driver"}}}
    with pytest.raises(Retry):
        delete_query(env, current(kube), retry=0, runtime_seconds=10)
    delete_query(env, current(kube), retry=5, runtime_seconds=10_000)
    assert "DrainTimedOut" in [r for r, _ in events]


def test_switching_deletion_policy_adopts_or_releases_the_claim(world: Any) -> None:
    env, kube, _ = world
    add_query(kube)
    reconcile_query(env, current(kube))
    assert not kube.of_kind("PersistentVolumeClaim")[0]["metadata"].get("ownerReferences")
    reconcile_query(env, edit(kube, deletionPolicy="Delete"))
    assert kube.of_kind("PersistentVolumeClaim")[0]["metadata"]["ownerReferences"]
    reconcile_query(env, edit(kube, deletionPolicy="Retain"))
    assert not kube.of_kind("PersistentVolumeClaim")[0]["metadata"].get("ownerReferences")


def test_cluster_status(world: Any) -> None:
    env, kube, _ = world
    body = copy.deepcopy(kube.objects[("QueryCluster", "shop", "default")])
    body["metadata"]["generation"] = 1
    assert reconcile_cluster(env, body) == "Ready"
    status = kube.objects[("QueryCluster", "shop", "default")]["status"]
    assert status["image"].startswith("sluice-runtime:")
    env.admin.down = True
    with pytest.raises(Retry):
        reconcile_cluster(env, body)


def test_driver_readiness_updates_ready_condition(world: Any) -> None:
    from sluice.operator.handlers import _common, query_driver

    env, kube, _ = world
    add_query(kube)
    reconcile_query(env, current(kube))
    _common.configure(lambda: env)
    sts = kube.of_kind("StatefulSet")[0]
    sts["metadata"]["generation"] = 1
    sts["status"] = {"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1}
    query_driver.handle(sts, namespace="shop", type="MODIFIED")
    status = current(kube)["status"]
    assert status["ready"] is True and status["phase"] == "Running"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "DriverReady"
    kube.calls.clear()
    query_driver.handle(sts, namespace="shop", type="MODIFIED")  # unchanged: no API call at all
    assert kube.calls == []
    sts["status"] = {"observedGeneration": 1, "readyReplicas": 0, "updatedReplicas": 1}
    query_driver.handle(sts, namespace="shop", type="MODIFIED")
    assert current(kube)["status"]["phase"] == "Starting"
    # a steady reconcile keeps reporting what the StatefulSet says
    sts = kube.objects[("StatefulSet", "shop", "totals-driver")]
    sts["status"] = {"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1}
    assert reconcile_query(env, current(kube)) == "Running"


def test_service_id_is_pinned_at_creation(world: Any) -> None:
    env, kube, _ = world
    add_query(kube)
    reconcile_query(env, current(kube))
    assert current(kube)["status"]["identity"]["serviceId"] == "shop"
    checkpoint = current(kube)["status"]["identity"]["checkpointPath"]
    kube.objects[("QueryCluster", "shop", "default")]["spec"]["serviceId"] = "renamed"
    reconcile_query(env, current(kube))
    sts = kube.of_kind("StatefulSet")[0]
    env_vars = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env_vars["SLUICE_CHECKPOINT"] == checkpoint
    assert current(kube)["status"]["identity"]["serviceId"] == "shop"


def test_cluster_changes_reach_the_driver(world: Any) -> None:
    env, kube, _ = world
    add_query(kube)
    reconcile_query(env, current(kube))
    kube.objects[("QueryCluster", "shop", "default")]["spec"]["image"] = "registry/sluice-runtime:2"
    reconcile_query(env, current(kube))
    sts = kube.of_kind("StatefulSet")[0]
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "registry/sluice-runtime:2"


def test_cluster_change_pokes_its_queries_once(world: Any) -> None:
    from sluice.operator.reconcile import CLUSTER_REVISION, poke_queries_of_cluster

    env, kube, _ = world
    add_query(kube, "a")
    add_query(kube, "b", clusterRef={"name": "other"})
    qc = copy.deepcopy(kube.objects[("QueryCluster", "shop", "default")])
    qc["metadata"].update(uid="abcdef123456", generation=2)
    assert poke_queries_of_cluster(env, qc) == 1
    assert current(kube, "a")["metadata"]["annotations"][CLUSTER_REVISION] == "abcdef12-2"
    assert "annotations" not in current(kube, "b")["metadata"]
    assert poke_queries_of_cluster(env, qc) == 0
