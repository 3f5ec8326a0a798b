"""End to end: manifests applied with kubectl, records through Kafka, results out of Kafka.

The operator compiles and pins the plan, the driver pod runs the runtime (a container on the
real node locally, or under kind), and the test checks the output topic against
results computed here.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from cluster import E2ECluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.jvm import TEST_JVM_OPTS

pytestmark = pytest.mark.e2e

READY_TIMEOUT = 300.0


def create_topics(bootstrap: str, *names: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
    ).values():
        future.result(30)


def produce(bootstrap: str, topic: str, rows: list[dict[str, Any]], key: str | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for row in rows:
        producer.produce(topic, key=str(row[key]) if key else None, value=json.dumps(row))
    producer.flush(30)


def consume(bootstrap: str, topic: str, want: int, timeout: float, committed: bool = False) -> list[Any]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
    })
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(out) < want:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            out.append(json.loads(msg.value()))
        # a little longer, to see records that should not be there
        settle = time.monotonic() + 3
        while time.monotonic() < settle:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(json.loads(msg.value()))
    finally:
        consumer.close()
    return out


def cluster_doc(ns: str, bootstrap: str, service_id: str = "e2e", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
        "metadata": {"name": "default", "namespace": ns},
        "spec": {"serviceId": service_id, "kafka": {"bootstrapServers": bootstrap},
                 "driver": {"requests": {"cpu": "100m", "memory": "512Mi"}},
                 # the drivers' and the executors' JVMs compile with C1 only, as the test processes'
                 # do (see tests/support/jvm.py); Spark adds its own module options to these
                 "sparkConf": {"spark.driver.memory": "768m", "spark.driver.extraJavaOptions": TEST_JVM_OPTS,
                               "spark.executor.extraJavaOptions": TEST_JVM_OPTS},
                 **extra},
    }


def query_doc(ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def ts(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_700_000_000 + second)) + "Z"


def wait_ready(cluster: E2ECluster, ns: str, name: str) -> None:
    cluster.wait_for(f"StreamingQuery {ns}/{name} Ready",
                     lambda: cluster.query_condition(ns, name, "Ready") == "True", READY_TIMEOUT)


def test_stateless_query_filters_and_projects(cluster: E2ECluster, ns: str) -> None:
    src, out = f"{ns}-clicks", f"{ns}-big-clicks"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap), query_doc(ns, "big-clicks", {
        "sources": [{"name": "clicks", "topic": src, "schema": [
            {"name": "id", "type": "int"}, {"name": "user", "type": "string"},
            {"name": "amount", "type": "double"}]}],
        "sql": "SELECT id, upper(user) AS user, amount * 2 AS doubled FROM clicks WHERE amount > 10",
        "sink": {"topic": out, "outputMode": "append"},
        "trigger": {"processingTime": "1 second"},
    }))
    rows = [{"id": i, "user": f"u{i % 3}", "amount": float(i)} for i in range(40)]
    produce(cluster.bootstrap, src, rows)
    expected = sorted(
        ({"id": r["id"], "user": str(r["user"]).upper(), "doubled": r["amount"] * 2}
         for r in rows if r["amount"] > 10), key=lambda r: r["id"])
    got = consume(cluster.bootstrap, out, len(expected), READY_TIMEOUT)
    assert sorted(got, key=lambda r: r["id"]) == expected, cluster.diagnostics(ns)
    wait_ready(cluster, ns, "big-clicks")
    # the driver's JVM mapped the image's class-data-sharing archive (sluice_runtime.classdata):
    # the pod's class path is the one the image build wrote it for
    pod = cluster.active_pod(ns, "big-clicks")
    assert pod is not None, cluster.diagnostics(ns)
    mapping = cluster.kubectl("exec", "-n", ns, pod["metadata"]["name"], "--", "sh", "-c",
                              "grep -l /opt/sluice/spark-driver.jsa /proc/[0-9]*/maps || true")
    assert mapping.strip(), cluster.kubectl("logs", "-n", ns, pod["metadata"]["name"], check=False)


def test_stream_stream_join_matches_orders_with_shipments(cluster: E2ECluster, ns: str) -> None:
    orders, ships, out = f"{ns}-orders", f"{ns}-shipments", f"{ns}-shipped"
    create_topics(cluster.bootstrap, orders, ships, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap), query_doc(ns, "shipped", {
        "sources": [
            {"name": "orders", "topic": orders, "schema": [
                {"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"},
                {"name": "ts", "type": "timestamp"}],
             "eventTime": {"column": "ts", "watermark": "1 minute"}},
            {"name": "shipments", "topic": ships, "schema": [
                {"name": "order_id", "type": "string"}, {"name": "carrier", "type": "string"},
                {"name": "ts", "type": "timestamp"}],
             "eventTime": {"column": "ts", "watermark": "1 minute"}},
        ],
        "sql": "SELECT o.order_id AS order_id, o.amount AS amount, s.carrier AS carrier "
               "FROM orders o JOIN shipments s ON o.order_id = s.order_id "
               "AND s.ts BETWEEN o.ts AND o.ts + INTERVAL 10 MINUTES",
        "sink": {"topic": out, "outputMode": "append"},
        "trigger": {"processingTime": "1 second"},
    }))
    produce(cluster.bootstrap, orders,
            [{"order_id": f"o{i}", "amount": float(i), "ts": ts(i)} for i in range(20)])
    # even orders ship in time, odd ones too late (outside the 10-minute range), o99 never ordered
    produce(cluster.bootstrap, ships,
            [{"order_id": f"o{i}", "carrier": "dhl" if i % 4 else "ups",
              "ts": ts(i + (60 if i % 2 == 0 else 3600))} for i in range(20)]
            + [{"order_id": "o99", "carrier": "ups", "ts": ts(5)}])
    expected = sorted(
        ({"order_id": f"o{i}", "amount": float(i), "carrier": "dhl" if i % 4 else "ups"}
         for i in range(0, 20, 2)), key=lambda r: r["order_id"])
    got = consume(cluster.bootstrap, out, len(expected), READY_TIMEOUT)
    assert sorted(got, key=lambda r: r["order_id"]) == expected, cluster.diagnostics(ns)


def executor_pods(cluster: E2ECluster, ns: str, query: str) -> list[dict[str, Any]]:
    selector = f"sluice.dev/query={query},app.kubernetes.io/component=executor"
    listed = cluster.read(f"/api/v1/namespaces/{ns}/pods", [("labelSelector", selector)])
    return list((listed or {}).get("items", []))


def test_executors_created_by_spark_s_kubernetes_scheduler_run_a_stateful_query(
    cluster: E2ECluster, ns: str
) -> None:
    src, out = f"{ns}-sales", f"{ns}-sales-per-shop"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(
        # executors mount the state claim from any node: a ReadWriteMany claim (ReadWriteOnce is
        # refused, spec.executors named)
        cluster_doc(ns, cluster.bootstrap, executors=2, storage={"accessMode": "ReadWriteMany"},
                    executor={"requests": {"cpu": "250m", "memory": "512Mi"}}),
        query_doc(ns, "sales", {
            "sources": [{"name": "sales", "topic": src, "schema": [
                {"name": "shop", "type": "string"}, {"name": "qty", "type": "int"}]}],
            "sql": "SELECT shop, count(*) AS orders, sum(qty) AS total FROM sales GROUP BY shop",
            "sink": {"topic": out, "outputMode": "update", "key": ["shop"]},
            "trigger": {"processingTime": "1 second"},
        }))

    def running_executors() -> list[dict[str, Any]] | None:
        pods = [p for p in executor_pods(cluster, ns, "sales") if p["status"].get("phase") == "Running"]
        return pods if len(pods) == 2 else None

    executors = cluster.wait_for("two executor pods created by Spark", running_executors, READY_TIMEOUT)
    driver = cluster.driver_pod(ns, "sales")
    assert driver is not None
    for pod in executors:  # owned by the driver pod: they go when it goes
        assert [o["uid"] for o in pod["metadata"]["ownerReferences"]] == [driver["metadata"]["uid"]]
        # and their JVMs map the image's class-data-sharing archive, as the driver's does
        mapping = cluster.kubectl("exec", "-n", ns, pod["metadata"]["name"], "--", "sh", "-c",
                                  "grep -l /opt/sluice/spark-driver.jsa /proc/[0-9]*/maps || true")
        assert mapping.strip(), cluster.kubectl("logs", "-n", ns, pod["metadata"]["name"], check=False)

    def latest(want: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]] | None:
        seen = {r["shop"]: (r["orders"], r["total"])
                for r in consume(cluster.bootstrap, out, 10_000, 5)}
        return seen if seen == want else None

    # with a k8s:// master the driver runs no tasks: every result below was computed by the
    # executors, and the second batch's counts come from the state they keep in the state claim
    first = [{"shop": f"s{i % 4}", "qty": i} for i in range(40)]
    produce(cluster.bootstrap, src, first)
    want = {f"s{k}": (10, sum(i for i in range(40) if i % 4 == k)) for k in range(4)}
    cluster.wait_for("the first counts", lambda: latest(want), READY_TIMEOUT)
    produce(cluster.bootstrap, src, [{"shop": "s1", "qty": 100}, {"shop": "s5", "qty": 7}])
    want = {**want, "s1": (11, want["s1"][1] + 100), "s5": (1, 7)}
    assert cluster.wait_for("counts that carry the executors' state", lambda: latest(want), 120), (
        cluster.diagnostics(ns))
    wait_ready(cluster, ns, "sales")
    cluster.kubectl("delete", "sq", "sales", "-n", ns, "--timeout=180s")
    cluster.wait_for("the executor pods to go away with the driver",
                     lambda: not executor_pods(cluster, ns, "sales"), 180)


def counting_query(ns: str, src: str, out: str, delivery: str, **extra: Any) -> dict[str, Any]:
    return query_doc(ns, "counts", {
        "sources": [{"name": "events", "topic": src, "schema": [
            {"name": "k", "type": "string"}, {"name": "n", "type": "int"}]}],
        "sql": "SELECT k, n FROM events",
        "sink": {"topic": out, "outputMode": "append", "delivery": delivery},
        "trigger": {"processingTime": "1 second"},
        **extra,
    })


def test_killed_driver_resumes_from_checkpoint_exactly_once(cluster: E2ECluster, ns: str) -> None:
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap), counting_query(ns, src, out, "exactlyOnce"))
    produce(cluster.bootstrap, src, [{"k": "a", "n": i} for i in range(50)])
    first = consume(cluster.bootstrap, out, 50, READY_TIMEOUT, committed=True)
    assert len(first) == 50, cluster.diagnostics(ns)
    wait_ready(cluster, ns, "counts")
    before = cluster.restart_count(ns, "counts")
    cluster.kill_driver(ns, "counts")
    produce(cluster.bootstrap, src, [{"k": "b", "n": i} for i in range(50, 100)])
    cluster.wait_for("the driver container to restart",
                     lambda: cluster.restart_count(ns, "counts") > before, 120)
    got = consume(cluster.bootstrap, out, 100, READY_TIMEOUT, committed=True)
    assert sorted(r["n"] for r in got) == list(range(100)), "lost or duplicated records\n" + (
        cluster.diagnostics(ns))


def test_suspend_and_resume_keep_state(cluster: E2ECluster, ns: str) -> None:
    src, out = f"{ns}-words", f"{ns}-word-counts"
    create_topics(cluster.bootstrap, src, out)
    query = query_doc(ns, "wc", {
        "sources": [{"name": "words", "topic": src, "schema": [{"name": "w", "type": "string"}]}],
        "sql": "SELECT w, count(*) AS c FROM words GROUP BY w",
        "sink": {"topic": out, "outputMode": "update", "key": ["w"]},
        "trigger": {"processingTime": "1 second"},
    })
    cluster.apply(cluster_doc(ns, cluster.bootstrap), query)
    produce(cluster.bootstrap, src, [{"w": "x"}] * 3)
    first = consume(cluster.bootstrap, out, 1, READY_TIMEOUT)
    assert first and max(r["c"] for r in first) == 3, cluster.diagnostics(ns)
    cluster.kubectl("patch", "sq", "wc", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    cluster.wait_for("the driver pod to go away", lambda: cluster.driver_pod(ns, "wc") is None, 180)
    produce(cluster.bootstrap, src, [{"w": "x"}] * 2)
    cluster.kubectl("patch", "sq", "wc", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    counts = cluster.wait_for(
        "the resumed query to count on from its state",
        lambda: 5 in [r["c"] for r in consume(cluster.bootstrap, out, 10, 5)], READY_TIMEOUT)
    assert counts


def test_delete_with_retain_keeps_the_state_and_the_topic(cluster: E2ECluster, ns: str) -> None:
    """(``deletionPolicy: Delete``, with several plan versions: tests/e2e/test_upgrades.py.)"""
    src, out = f"{ns}-in", f"{ns}-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap),
                  counting_query(ns, src, out, "atLeastOnce", deletionPolicy="Retain"))
    produce(cluster.bootstrap, src, [{"k": "a", "n": 1}])
    assert consume(cluster.bootstrap, out, 1, READY_TIMEOUT), cluster.diagnostics(ns)
    claim = cluster.driver_pod(ns, "counts")["spec"]["volumes"]  # type: ignore[index]
    claim_name = next(v["persistentVolumeClaim"]["claimName"] for v in claim if "persistentVolumeClaim" in v)
    cluster.kubectl("delete", "sq", "counts", "-n", ns, "--timeout=180s")
    cluster.wait_for("the driver pod to go away", lambda: cluster.driver_pod(ns, "counts") is None, 180)
    topics = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).topics
    assert cluster.get("pvc", ns, claim_name) is not None
    assert out in topics
