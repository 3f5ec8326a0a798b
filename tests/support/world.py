"""A StreamingQuery reconcile world on the real API server and broker (shared by integration tests).

The product's own REST client (``sluice.operator.kube.Kube``) talks to the test run's real
kube-apiserver; calls are recorded, and failures injected, by a subclass of the real client
(``RecordingKube``).
"""

from __future__ import annotations

import socket
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from sluice.operator.deletion import delete_query
from sluice.operator.env import Env, Retry
from sluice.operator.kube import SPEC_HASH, Kube, KubeError
from sluice.operator.metrics import OperatorMetrics

from tests.support import waiting

REPO = Path(__file__).resolve().parents[2]

SQL = """SELECT customer, count(*) AS orders, sum(amount) AS total
FROM orders GROUP BY customer"""
WORKLOAD_KINDS = ("ConfigMap", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "Service",
                  "PodDisruptionBudget", "Lease", "Deployment")
WRITES = ("POST", "PUT", "PATCH", "DELETE")
#: how this module waits (deadline, poll interval, which errors mean "not yet")
eventually = partial(waiting.eventually, interval=0.2)


def closed_port_address() -> str:
    """``127.0.0.1:PORT`` where nothing listens: a Kafka that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class RecordingKube(Kube):
    """The real client; records each request and can fail one chosen request once (fault injection)."""

    def __init__(self, api_client: Any) -> None:
        super().__init__(api_client)
        self.calls: list[tuple[str, str]] = []
        self.fail_once: tuple[str, str] | None = None  # (method, path suffix)
        self.fail_write: int | None = None  # fail the n-th write (1-based) from now on, once
        self._writes = 0

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                query: dict[str, Any] | None = None) -> Any:
        self.calls.append((method, path))
        if method in WRITES and self.fail_write is not None:
            self._writes += 1
            if self._writes == self.fail_write:
                self.fail_write, self._writes = None, 0
                raise KubeError(500, {"message": "injected: the operator dies here"}, f"{method} {path}")
        if self.fail_once and method == self.fail_once[0] and path.endswith(self.fail_once[1]):
            self.fail_once = None
            raise KubeError(500, {"message": "injected: the operator dies here"}, f"{method} {path}")
        return super().request(method, path, body, content_type=content_type, query=query)

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] in WRITES]


def apply_crds(kube: Any) -> None:
    """Apply the CRDs server-side and wait until they are Established (a just-started API server
    may refuse the first attempts: retried for up to 3 minutes)."""
    def attempt() -> bool:
        subprocess.run([str(kube.bin_dir / "kubectl"), "apply", "--server-side", "-f", str(REPO / "crds")],
                       env=kube.env(), check=True, capture_output=True)
        for crd in ("streamingqueries.sluice.dev", "queryclusters.sluice.dev"):
            subprocess.run([str(kube.bin_dir / "kubectl"), "wait", "--for=condition=Established",
                            f"crd/{crd}", "--timeout=60s"], env=kube.env(), check=True, capture_output=True)
        return True

    waiting.eventually(attempt, what="the CRDs applied and Established", timeout=180, interval=2,
                       retry_on=subprocess.CalledProcessError)


class World:
    """One test's namespace, client, Env (real compiler, classifier, Kafka admin) and recorded events."""

    def __init__(self, kube: Any, namespace: str, kafka: str) -> None:
        self.ns = namespace
        self.kafka = kafka
        self.k = RecordingKube(kube.api)
        self.events: list[tuple[str, str]] = []
        self.env = Env(kube=self.k, events=lambda body, t, reason, msg: self.events.append((reason, msg)),
                       clock=lambda: "2026-01-01T00:00:00Z", metrics=OperatorMetrics(CollectorRegistry()),
                       kafka_timeout=3.0)
        self.topic = f"totals-{namespace}"  # topics are broker-wide: one per test
        self.k.create({"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
                       "metadata": {"name": "default", "namespace": namespace},
                       "spec": {"serviceId": "shop", "kafka": {"bootstrapServers": kafka}}})

    # -- objects ---------------------------------------------------------------------------
    def query_spec(self, **overrides: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "sources": [{
                "name": "orders", "topic": "orders",
                "schema": [{"name": "order_id", "type": "string"}, {"name": "customer", "type": "string"},
                           {"name": "amount", "type": "double"}],
            }],
            "sql": SQL,
            "sink": {"topic": self.topic, "key": ["customer"], "outputMode": "update"},
            "trigger": {"processingTime": "5 seconds"},
        }
        spec.update(overrides)
        return spec

    def add_query(self, name: str = "totals", **spec: Any) -> dict[str, Any]:
        return self.k.create({"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
                              "metadata": {"name": name, "namespace": self.ns},
                              "spec": self.query_spec(**spec)})

    def current(self, name: str = "totals") -> dict[str, Any]:
        obj = self.k.get("StreamingQuery", self.ns, name)
        assert obj is not None
        return obj

    def status(self, name: str = "totals") -> dict[str, Any]:
        return self.current(name).get("status") or {}

    def edit(self, name: str = "totals", **spec: Any) -> dict[str, Any]:
        return self.k.patch("StreamingQuery", self.ns, name, {"spec": spec})

    def edit_cluster(self, **spec: Any) -> dict[str, Any]:
        return self.k.patch("QueryCluster", self.ns, "default", {"spec": spec})

    def of_kind(self, kind: str, query: str = "totals") -> list[dict[str, Any]]:
        return self.k.list(kind, self.ns, f"sluice.dev/query={query}")

    def kinds(self) -> set[str]:
        return {kind for kind in WORKLOAD_KINDS if self.of_kind(kind)}

    def deployment(self, role: str = "driver") -> dict[str, Any]:
        """The query's driver Deployment (``role="backfill"``: a backfill's, beside it)."""
        [dep] = [d for d in self.of_kind("Deployment")
                 if d["metadata"]["labels"].get("app.kubernetes.io/component") == role]
        return dep

    def backfill_gone(self, query: str = "totals") -> bool:
        """Whether a backfill's Deployment and its pods are gone."""
        return not [d for d in self.of_kind("Deployment", query)
                    if d["metadata"]["name"] == f"{query}-backfill"] and not [
            p for p in self.of_kind("Pod", query)
            if p["metadata"]["labels"].get("app.kubernetes.io/component") == "backfill"]

    def lease(self, name: str = "totals-driver") -> dict[str, Any]:
        lease = self.k.get("Lease", self.ns, name)
        assert lease is not None
        return lease

    def reasons(self) -> list[str]:
        return [r for r, _ in self.events]

    # -- Kafka -----------------------------------------------------------------------------
    def topic_partitions(self) -> dict[str, int]:
        """Sink topics of this test on the broker (versioned ones included) -> partition count."""
        from confluent_kafka.admin import AdminClient

        meta = AdminClient({"bootstrap.servers": self.kafka}).list_topics(timeout=10)
        return {t: len(m.partitions) for t, m in meta.topics.items()
                if t == self.topic or t.startswith(f"{self.topic}-v")}

    def commit_groups(self, *groups: str) -> None:
        """Consumer groups with a committed offset, as a version's sources and exactly-once markers
        leave them."""
        from confluent_kafka import Consumer, TopicPartition

        for name in groups:
            consumer = Consumer({"bootstrap.servers": self.kafka, "group.id": name,
                                 "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition(self.topic, 0, 1)], asynchronous=False)
            consumer.close()

    def groups(self) -> set[str]:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.kafka})
        return {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}

    def kafka_down(self) -> None:
        self.edit_cluster(kafka={"bootstrapServers": closed_port_address()})

    def kafka_up(self) -> None:
        self.edit_cluster(kafka={"bootstrapServers": self.kafka})

    def delete_after_drain(self, **kw: Any) -> None:
        """delete_query once the ReplicaSet controller has removed the (Pending) driver pods."""
        def attempt() -> bool:
            try:
                delete_query(self.env, self.current(), **kw)
            except Retry as exc:
                if "drain" not in str(exc):
                    raise
                return False
            return True

        eventually(attempt, timeout=60, what="the driver drained and the finalizer completed")


def snapshot(w: World) -> dict[tuple[str, str], tuple[Any, ...]]:
    """What the operator controls about each workload object (controllers may update status)."""
    out: dict[tuple[str, str], tuple[Any, ...]] = {}
    for kind in WORKLOAD_KINDS:
        for obj in w.of_kind(kind):
            meta = obj["metadata"]
            out[(kind, meta["name"])] = (meta["uid"], meta.get("generation"),
                                         (meta.get("annotations") or {}).get(SPEC_HASH),
                                         meta.get("labels"), bool(meta.get("ownerReferences")),
                                         obj.get("spec", {}).get("replicas"), obj.get("data"))
    return out
