"""The operator against the real API server and a real Kafka broker (no kubelet: pods stay Pending).

Each test gets a fresh namespace and its own in-process operator (kopf in a background thread,
watching only that namespace, with a Lease in that namespace).
"""

from __future__ import annotations

import argparse
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sluice.operator.kube import Kube

from tests.support.drivers import DriverSide
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

SQL = "SELECT customer, count(*) AS orders, sum(amount) AS total FROM orders GROUP BY customer"
SQL_BY_ORDER = "SELECT order_id, count(*) AS orders, sum(amount) AS total FROM orders GROUP BY order_id"
WORKLOAD_KINDS = ("ConfigMap", "Deployment", "PersistentVolumeClaim", "Service", "ServiceAccount", "Role",
                  "RoleBinding", "PodDisruptionBudget", "Lease")


class OperatorThread:
    def __init__(self, kube: Any, namespace: str, identity: str) -> None:
        from sluice.commands.operator import run_operator

        self.stop = threading.Event()
        self.ready = threading.Event()
        self.identity = identity
        args = argparse.Namespace(
            namespace=[namespace], peering=None, standalone=True, no_leader_election=False,
            lease_name="sluice-operator", lease_namespace=namespace, lease_seconds=6, identity=identity,
            metrics_port=0, kubeconfig=str(kube.kubeconfig), log_format="text", verbose=False,
        )
        self.result: list[int] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(run_operator(args, self.stop, self.ready)),
            daemon=True, name=f"operator-{identity}")
        self.thread.start()

    def shutdown(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "operator did not stop"


@pytest.fixture
def k(kube: Any) -> Kube:
    return Kube(kube.api)


@pytest.fixture
def operator(kube: Any, namespace: str, crds: None) -> Iterator[OperatorThread]:
    op = OperatorThread(kube, namespace, "op-a")
    eventually(op.ready.is_set, timeout=30, what="the operator is running")
    yield op
    op.shutdown()


def cluster(namespace: str, bootstrap: str, name: str = "default") -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"serviceId": "it", "kafka": {"bootstrapServers": bootstrap}, "drainSeconds": 10}}


def query(namespace: str, name: str, topic: str, **spec: Any) -> dict[str, Any]:
    body = {
        "sources": [{"name": "orders", "topic": f"{topic}-in", "schema": [
            {"name": "order_id", "type": "string"}, {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"}]}],
        "sql": SQL,
        "sink": {"topic": topic, "outputMode": "update"},
        "trigger": {"processingTime": "5 seconds"},
    }
    body.update(spec)
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


def topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def status(k: Kube, ns: str, name: str) -> dict[str, Any]:
    obj = k.get("StreamingQuery", ns, name)
    return (obj or {}).get("status") or {}


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), {})


def edit(k: Kube, ns: str, name: str, spec: dict[str, Any]) -> int:
    obj = k.patch("StreamingQuery", ns, name, {"spec": spec})
    return int(obj["metadata"]["generation"])


def settled(k: Kube, ns: str, name: str, generation: int) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        st = status(k, ns, name)
        return st if st.get("observedGeneration") == generation and st.get("plan") and (
            st.get("rollout") or {}).get("step") not in ("Deploying", "Applying") else None
    return check


def test_lifecycle_create_edit_suspend_resume(k: Kube, namespace: str, kafka: str,
                                              operator: OperatorThread) -> None:
    ns, topic = namespace, f"out-{uuid.uuid4().hex[:6]}"
    k.create(cluster(ns, kafka))
    obj = k.create(query(ns, "totals", topic))
    uid = obj["metadata"]["uid"]

    st = eventually(settled(k, ns, "totals", 1), timeout=60, what="the query is reconciled")
    assert st["phase"] == "Starting"  # no kubelet: the driver never becomes ready here
    assert len(st["plan"]["hash"]) == 64 and st["plan"]["version"] == 1
    assert {c["type"] for c in st["conditions"]} == {"Ready", "Progressing", "Degraded",
                                                      "ReplanAvailable", "NodeLossTolerant"}
    assert condition(st, "Degraded")["status"] == "False"
    assert st["identity"]["consumerGroup"] == f"it.{ns}.totals.v1"
    for kind in WORKLOAD_KINDS:
        objs = k.list(kind, ns, "sluice.dev/query=totals")
        assert len(objs) == 1, kind
        owners = objs[0]["metadata"].get("ownerReferences") or []
        if kind == "PersistentVolumeClaim":
            assert owners == []  # Retain (the default) keeps the claim out of garbage collection
        else:
            assert [o["uid"] for o in owners] == [uid], kind
    cm = k.list("ConfigMap", ns, "sluice.dev/query=totals")[0]
    assert cm["immutable"] is True and cm["metadata"]["name"] == st["plan"]["configMap"]
    assert topic in topics(kafka)
    qc = eventually(lambda: (k.get("QueryCluster", ns, "default") or {}).get("status", {}).get("phase"),
                    what="the cluster status")
    assert qc == "Ready"

    # a transparent edit (trigger) is carried out in place: the driver template rolls onto the new
    # plan, the rollout waits on the gate; the drivers' Lease records (written here as the runtime
    # writes them) pass it, and the operator's rollout timer (no event on the query) finishes it
    dep_before = k.get("Deployment", ns, "totals-driver")
    drivers = DriverSide(k.api, ns)
    drivers.take_over(st["plan"]["hash"], batches=5)
    gen = edit(k, ns, "totals", {"trigger": {"processingTime": "10 seconds"}})
    st = eventually(settled(k, ns, "totals", gen), timeout=30, what="the trigger edit")
    assert st["rollout"]["step"] == "Verifying" and st["lastUpgrade"]["outcome"] == "InProgress"
    drivers.take_over(st["rollout"]["targetHash"], batches=3)
    st = eventually(lambda: (s := status(k, ns, "totals")) and "rollout" not in s and s, timeout=30,
                    what="the gate passed on the rollout timer")
    assert st["lastUpgrade"]["category"] == "transparent" and st["lastUpgrade"]["outcome"] == "Succeeded"
    assert st["plan"]["version"] == 1
    dep = k.get("Deployment", ns, "totals-driver")
    assert dep["spec"]["template"] != dep_before["spec"]["template"]
    plan_volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "plan")
    assert plan_volume["configMap"]["name"] == st["plan"]["configMap"]

    # a group-by edit needs a replace; with backfill the new version runs beside the drivers, which
    # are untouched
    gen = edit(k, ns, "totals", {"sql": SQL_BY_ORDER, "upgrade": {"replaceStrategy": "backfill"}})
    st = eventually(settled(k, ns, "totals", gen), timeout=30, what="the group-by edit")
    assert st["phase"] == "Upgrading"
    assert st["rollout"]["step"] == "Backfilling" and st["rollout"]["decision"] == "replace"
    assert st["lastUpgrade"]["outcome"] == "InProgress"
    assert k.get("Deployment", ns, "totals-backfill") is not None
    # (generation and spec: the deployment controller writes its status, which moves resourceVersion)
    after = k.get("Deployment", ns, "totals-driver")
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]
    assert after["spec"] == dep["spec"]

    # a QueryCluster change (image) reaches the query through the cluster's rollout, which admits
    # it; but the upgrade in flight (the backfill) is finished first
    sq_gen = int(k.get("StreamingQuery", ns, "totals")["metadata"]["generation"])
    old_image = k.get("Deployment", ns, "totals-driver")["spec"]["template"]["spec"]["containers"][0]["image"]
    k.patch("QueryCluster", ns, "default", {"spec": {"image": "registry.example/sluice-runtime:9"}})
    def driver_image() -> str:
        pod = k.get("Deployment", ns, "totals-driver")["spec"]["template"]["spec"]
        return str(pod["containers"][0]["image"])

    eventually(lambda: "totals" in ((k.get("QueryCluster", ns, "default") or {}).get("status", {})
                                    .get("rollout", {}).get("admitted") or []),
               timeout=30, what="the cluster's rollout admits the query")
    time.sleep(3)
    assert driver_image() == old_image and status(k, ns, "totals")["phase"] == "Upgrading"  # the backfill
    assert int(k.get("StreamingQuery", ns, "totals")["metadata"]["generation"]) == sq_gen

    # suspend / resume
    # (the edit also reverts the SQL: the backfill is cancelled, then the drivers scale down; the
    # suspended query takes the cluster's new engine without a rollout: no driver runs)
    gen = edit(k, ns, "totals", {"sql": SQL, "suspend": True})
    st = eventually(lambda: (s := settled(k, ns, "totals", gen)()) and not s.get("rollout")
                    and s.get("engine", {}).get("image") == "registry.example/sluice-runtime:9" and s,
                    timeout=60, what="suspend, the backfill cancelled, the new engine taken")
    assert st["phase"] == "Suspended" and st["history"][1]["outcome"] == "Cancelled"
    assert st["lastUpgrade"]["outcome"] == "Succeeded" and st["lastUpgrade"]["cause"] == "cluster"
    # the status is written first (the write-ahead rule), the Deployment right after
    eventually(lambda: driver_image() == "registry.example/sluice-runtime:9", timeout=30,
               what="the suspended drivers' template on the new engine")
    assert k.get("Deployment", ns, "totals-backfill") is None
    assert k.get("Deployment", ns, "totals-driver")["spec"]["replicas"] == 0
    assert k.get("PersistentVolumeClaim", ns, "totals-state") is not None
    gen = edit(k, ns, "totals", {"suspend": False})
    st = eventually(settled(k, ns, "totals", gen), timeout=30, what="resume")
    assert st["phase"] == "Starting"
    assert k.get("Deployment", ns, "totals-driver")["spec"]["replicas"] == 1


def test_delete_with_each_policy(k: Kube, namespace: str, kafka: str, operator: OperatorThread) -> None:
    ns = namespace
    keep, drop = f"keep-{uuid.uuid4().hex[:6]}", f"drop-{uuid.uuid4().hex[:6]}"
    k.create(cluster(ns, kafka))
    k.create(query(ns, "keep", keep))
    k.create(query(ns, "drop", drop, deletionPolicy="Delete"))
    for name in ("keep", "drop"):
        eventually(settled(k, ns, name, 1), timeout=60, what=f"{name} reconciled")
    assert {keep, drop} <= topics(kafka)
    k.delete("StreamingQuery", ns, "keep")
    k.delete("StreamingQuery", ns, "drop")
    eventually(lambda: k.get("StreamingQuery", ns, "keep") is None and k.get("StreamingQuery", ns, "drop")
               is None, timeout=60, what="both queries are gone (finalizer released)")
    remaining = topics(kafka)
    assert keep in remaining and drop not in remaining
    assert k.get("PersistentVolumeClaim", ns, "keep-state") is not None
    eventually(lambda: k.get("PersistentVolumeClaim", ns, "drop-state") is None
               or k.get("PersistentVolumeClaim", ns, "drop-state")["metadata"].get("deletionTimestamp"),
               what="the Delete policy removed the claim")
    # garbage collection removes the owned objects of both
    eventually(lambda: not k.list("Deployment", ns) and not k.list("ConfigMap", ns, "sluice.dev/query"),
               timeout=60, what="garbage collection of owned objects")


def test_invalid_sql_and_missing_cluster(k: Kube, namespace: str, kafka: str,
                                         operator: OperatorThread) -> None:
    ns = namespace
    k.create(cluster(ns, kafka))  # 'default' exists; 'later' does not yet
    k.create(query(ns, "bad", "bad-out", sql="SELECT customer,\n  nope FROM orders"))
    k.create(query(ns, "orphan", f"orphan-{uuid.uuid4().hex[:6]}", clusterRef={"name": "later"}))

    st = eventually(lambda: status(k, ns, "bad").get("phase") == "Degraded" and status(k, ns, "bad"),
                    what="the invalid query is Degraded")
    err = st["lastCompileError"]
    assert err["line"] == 2 and err["column"] is not None
    assert condition(st, "Degraded")["reason"] == "CompileFailed"
    assert "line 2" in condition(st, "Degraded")["message"]
    assert k.list("Deployment", ns, "sluice.dev/query=bad") == []
    assert k.list("ConfigMap", ns, "sluice.dev/query=bad") == []

    st = eventually(lambda: condition(status(k, ns, "orphan"), "Degraded").get("reason") == "ClusterNotFound"
                    and status(k, ns, "orphan"), what="the missing cluster is reported")
    assert "later" in condition(st, "Degraded")["message"]
    assert operator.thread.is_alive()
    k.create(cluster(ns, kafka, name="later"))
    eventually(settled(k, ns, "orphan", 1), timeout=60, what="the query proceeds once the cluster exists")
    assert condition(status(k, ns, "orphan"), "Degraded")["status"] == "False"

    # the API server itself refuses what the schema forbids, naming the field
    bad = query(ns, "refused", "x", deletionPolicy="Sometimes")
    with pytest.raises(Exception) as info:
        k.create(bad)
    assert "deletionPolicy" in str(info.value)


def test_restart_mid_reconcile_and_conflicts(kube: Any, k: Kube, namespace: str, kafka: str,
                                             crds: None, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = namespace
    k.create(cluster(ns, kafka))
    # the first operator "dies" right before creating the driver: status already says Deploying,
    # the plan ConfigMap and some objects exist, the driver Deployment does not
    real_ensure = Kube.ensure

    def crashing_ensure(self: Kube, obj: dict[str, Any], probe_first: bool = False,
                        replace: bool = True) -> Any:
        if obj["kind"] == "Deployment":
            raise RuntimeError("simulated operator crash")
        return real_ensure(self, obj, probe_first, replace)

    monkeypatch.setattr(Kube, "ensure", crashing_ensure)
    op = OperatorThread(kube, ns, "op-first")
    eventually(op.ready.is_set, what="first operator running")
    names = ["q0", "q1", "q2"]
    for name in names:
        k.create(query(ns, name, f"r-{name}-{uuid.uuid4().hex[:6]}"))
    for name in names:
        st = eventually(lambda n=name: (status(k, ns, n).get("rollout") or {}).get("step") == "Deploying"
                        and k.list("PersistentVolumeClaim", ns, f"sluice.dev/query={n}") and status(k, ns, n),
                        what=f"{name} is mid-reconcile")
        assert "plan" not in st
        assert k.list("Deployment", ns, f"sluice.dev/query={name}") == []
    op.shutdown()
    monkeypatch.setattr(Kube, "ensure", real_ensure)

    op2 = OperatorThread(kube, ns, "op-second")
    try:
        for name in names:
            st = eventually(settled(k, ns, name, 1), timeout=60, what=f"{name} reconciled after restart")
            assert "rollout" not in st
        for name in names:
            for kind in WORKLOAD_KINDS:
                assert len(k.list(kind, ns, f"sluice.dev/query={name}")) == 1, (name, kind)
    finally:
        op2.shutdown()


def test_two_replicas_only_one_acts(kube: Any, k: Kube, namespace: str, kafka: str, crds: None) -> None:
    ns = namespace
    a = OperatorThread(kube, ns, "replica-a")
    eventually(a.ready.is_set, what="replica a leads")
    b = OperatorThread(kube, ns, "replica-b")
    try:
        k.create(cluster(ns, kafka))
        k.create(query(ns, "one", f"one-{uuid.uuid4().hex[:6]}"))
        eventually(settled(k, ns, "one", 1), timeout=60, what="the leader reconciles")
        assert not b.ready.is_set(), "the second replica must not run handlers"
        assert k.get("Lease", ns, "sluice-operator")["spec"]["holderIdentity"] == "replica-a"
        a.shutdown()  # releases the lease: b takes over
        eventually(b.ready.is_set, timeout=30, what="replica b takes over")
        k.create(query(ns, "two", f"two-{uuid.uuid4().hex[:6]}"))
        eventually(settled(k, ns, "two", 1), timeout=60, what="the new leader reconciles")
        assert k.get("Lease", ns, "sluice-operator")["spec"]["holderIdentity"] == "replica-b"
    finally:
        a.stop.set()
        b.shutdown()


def test_kubectl_explain_and_printer_columns(kube: Any, namespace: str, crds: None) -> None:
    kubectl = str(kube.bin_dir / "kubectl")

    def explain() -> str | None:  # the OpenAPI document lags a few seconds behind Established
        done = subprocess.run([kubectl, "explain", "sq.spec.deletionPolicy"], env=kube.env(),
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        return done.stdout

    out = eventually(explain, timeout=30, what="kubectl explain works")
    assert "Retain" in out and "Delete" in out
    out = subprocess.run([kubectl, "get", "sq", "-n", namespace], env=kube.env(), capture_output=True,
                         text=True)
    assert out.returncode == 0


def driver_pod(ns: str, name: str, query_name: str = "totals") -> dict[str, Any]:
    """A driver pod as the runtime would run it (no kubelet here: its status is patched by the test)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {
                "sluice.dev/query": query_name, "app.kubernetes.io/component": "driver"}},
            "spec": {"containers": [{"name": "driver", "image": "sluice-runtime:test"}],
                     "automountServiceAccountToken": False}}


def mark_ready(k: Kube, ns: str, pod: str) -> None:
    conditions = [{"type": t, "status": "True"} for t in ("Ready", "ContainersReady")]
    k.patch("Pod", ns, pod, {"status": {"phase": "Running", "conditions": conditions}}, sub="status")


def events(k: Kube, ns: str, reason: str, name: str = "totals") -> list[dict[str, Any]]:
    return [e for e in k.list("Event", ns) if e.get("reason") == reason
            and e["involvedObject"].get("kind") == "StreamingQuery" and e["involvedObject"]["name"] == name]


def test_standby_drivers_on_a_lease(k: Kube, namespace: str, kafka: str, operator: OperatorThread) -> None:
    from sluice.core import election

    ns = namespace
    k.create(cluster(ns, kafka))
    obj = k.create(query(ns, "totals", f"sb-{uuid.uuid4().hex[:6]}", standbyReplicas=1))
    eventually(settled(k, ns, "totals", 1), timeout=60, what="the query is reconciled")
    assert k.get("Deployment", ns, "totals-driver")["spec"]["replicas"] == 2  # active + 1 standby

    # the Lease: created by the operator, owned by the query, no holder
    lease = k.get("Lease", ns, "totals-driver")
    assert lease is not None
    assert [o["uid"] for o in lease["metadata"]["ownerReferences"]] == [obj["metadata"]["uid"]]
    assert lease["spec"]["leaseDurationSeconds"] == 10 and not lease["spec"].get("holderIdentity")

    # standby count changes down and up
    gen = edit(k, ns, "totals", {"standbyReplicas": 0})
    eventually(settled(k, ns, "totals", gen), timeout=30, what="standbys 0")
    assert k.get("Deployment", ns, "totals-driver")["spec"]["replicas"] == 1
    gen = edit(k, ns, "totals", {"standbyReplicas": 2})
    eventually(settled(k, ns, "totals", gen), timeout=30, what="standbys 2")
    assert k.get("Deployment", ns, "totals-driver")["spec"]["replicas"] == 3

    # a standby took over after the active driver died, as the runtime records it on the Lease
    for pod in ("fake-a", "fake-b"):
        eventually(lambda p=pod: k.create(driver_pod(ns, p)), what=f"pod {pod} created")
    mark_ready(k, ns, "fake-b")
    takeover = election.Takeover(time="2026-03-01T10:00:00Z", from_pod="fake-a", to_pod="fake-b",
                                 reason=election.Why.HOLDER_DEAD, epoch=1, gap_seconds=1.5)
    k.patch("Lease", ns, "totals-driver", {
        "metadata": {"annotations": {election.LAST_TAKEOVER: takeover.to_json()}},
        "spec": {"holderIdentity": "fake-b/1", "leaseTransitions": 1,
                 "renewTime": "2026-03-01T10:00:00.000000Z"}})
    st = eventually(lambda: status(k, ns, "totals").get("drivers", {}).get("lastFailover")
                    and status(k, ns, "totals"), timeout=30, what="status.drivers reports the fail-over")
    drivers = st["drivers"]
    assert drivers["active"] == "fake-b"
    assert "fake-a" in drivers["standbys"] and "fake-b" not in drivers["standbys"]
    assert drivers["lastFailover"] == {"time": "2026-03-01T10:00:00Z", "from": "fake-a", "to": "fake-b",
                                       "reason": "FailedOver", "gapSeconds": 1.5}
    eventually(lambda: status(k, ns, "totals").get("ready") is True, timeout=30,
               what="Ready follows the active driver")
    assert status(k, ns, "totals")["phase"] == "Running"
    # renewals change nothing: exactly one event
    for i in range(3):
        k.patch("Lease", ns, "totals-driver", {"spec": {"renewTime": f"2026-03-01T10:00:0{i + 2}.000000Z"}})
    eventually(lambda: len(events(k, ns, "FailedOver")) == 1, timeout=30, what="the FailedOver event")
    time.sleep(2)
    [event] = events(k, ns, "FailedOver")
    assert "fake-a" in event["message"] and "fake-b" in event["message"] and "1.50s" in event["message"]
    assert event.get("count", 1) == 1
    assert events(k, ns, "HandedOff") == []

    # a user asks for a hand-off through the query's annotation: forwarded to the Lease
    k.patch("StreamingQuery", ns, "totals", {"metadata": {"annotations": {election.QUERY_HANDOFF: "h-1"}}})

    def forwarded() -> election.HandoffRequest | None:
        lease = k.get("Lease", ns, "totals-driver") or {}
        text = (lease.get("metadata", {}).get("annotations") or {}).get(election.HANDOFF_REQUEST)
        return election.HandoffRequest.from_json(text)

    request = eventually(forwarded, timeout=30, what="the hand-off request reaches the Lease")
    assert request == election.HandoffRequest(id="h-1", to="")
    lease = k.get("Lease", ns, "totals-driver")
    assert lease["spec"]["holderIdentity"] == "fake-b/1"  # the operator never touches the holder


def test_standbys_on_a_one_pod_volume_are_refused(k: Kube, namespace: str, kafka: str,
                                                  operator: OperatorThread) -> None:
    ns = namespace
    qc = cluster(ns, kafka)
    qc["spec"]["storage"] = {"accessMode": "ReadWriteOncePod"}
    k.create(qc)
    k.create(query(ns, "one-pod", f"op-{uuid.uuid4().hex[:6]}", standbyReplicas=1))
    st = eventually(lambda: status(k, ns, "one-pod").get("phase") == "Degraded" and status(k, ns, "one-pod"),
                    what="the layout is refused")
    degraded = condition(st, "Degraded")
    assert degraded["reason"] == "InvalidSpec"
    assert degraded["message"].startswith("spec.standbyReplicas: 1 standby driver needs a volume")
    for kind in WORKLOAD_KINDS:
        assert k.list(kind, ns, "sluice.dev/query=one-pod") == [], kind
    # the API server refuses what the schema forbids, naming the field
    for bad in (-1, 100):
        with pytest.raises(Exception) as info:
            k.create(query(ns, f"bad{bad % 7}", "x", standbyReplicas=bad))
        assert "spec.standbyReplicas" in str(info.value)
