"""The admission webhook on a real API server, through the real ``kubectl``.

``sluice operator --webhook-port`` runs as a process of its own (watching one namespace, real Kafka
for its sink topics, no kubelet: driver pods stay Pending), serves the webhook on 127.0.0.1 with a
self-signed certificate and publishes the ValidatingWebhookConfiguration (a URL clientConfig: the
API server runs on this machine). What a user sees is what ``kubectl`` prints.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sluice.operator.kube import Kube, KubeError

from tests.support.namespaces import fresh_namespace
from tests.support.operator_process import OperatorProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
SQL = """SELECT page,
       count(*) AS views
FROM pageviews
GROUP BY page"""
TYPO = SQL.replace("FROM pageviews", "FROM pageviews WHERE pgae <> ''")
TYPO_ERROR = ("spec.sql: line 3, column 22: column 'pgae' does not exist in source 'pageviews'; did you mean "
              "'page'?")
WHERE = SQL.replace("FROM pageviews", "FROM pageviews WHERE page <> ''")
BY_USER = SQL.replace("SELECT page", "SELECT user").replace("GROUP BY page", "GROUP BY user")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Hooked:
    """A namespace, its QueryCluster, and an operator process serving the webhook."""

    kube: Any
    ns: str
    k: Kube
    tmp: Path
    port: int
    operator: OperatorProcess
    extra: list[OperatorProcess]

    @property
    def configuration(self) -> str:
        return f"sluice-{self.ns}"

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kube.bin_dir / "kubectl"), *args, "-n", self.ns], input=stdin,
                              text=True, capture_output=True, env=self.kube.env(), timeout=60, check=False)

    def apply(self, obj: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", *flags, stdin=json.dumps(obj))

    def query(self, name: str, sql: str, **spec: Any) -> dict[str, Any]:
        body = {"sources": [{"name": "pageviews", "topic": f"pageviews-{self.ns}", "schema": [
                    {"name": "page", "type": "string"}, {"name": "user", "type": "string"}]}],
                "sql": sql, "sink": {"topic": f"views-{self.ns}", "outputMode": "update"}, **spec}
        return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
                "metadata": {"name": name, "namespace": self.ns}, "spec": body}

    def status(self, name: str) -> dict[str, Any]:
        return (self.k.get("StreamingQuery", self.ns, name) or {}).get("status") or {}

    def webhooks(self) -> list[dict[str, Any]] | None:
        try:
            return list(self.k.request("GET", f"{CONFIGURATIONS}/{self.configuration}").get("webhooks") or [])
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise


@pytest.fixture(scope="module")
def hooked(kube: Any, kafka: str, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hooked]:
    tmp = tmp_path_factory.mktemp("admission")
    k = Kube(kube.api)
    with fresh_namespace(kube.api, "adm") as ns:
        k.create({"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
                  "metadata": {"name": "default", "namespace": ns},
                  "spec": {"serviceId": "adm", "kafka": {"bootstrapServers": kafka}, "drainSeconds": 10}})
        port = free_port()
        operator = OperatorProcess(kube, ns, tmp / "operator.log", "--webhook-port", str(port),
                                   "--webhook-host", "127.0.0.1", "--webhook-configuration", f"sluice-{ns}")
        h = Hooked(kube=kube, ns=ns, k=k, tmp=tmp, port=port, operator=operator, extra=[])
        try:
            # published, and the API server calls it (its view of webhook configurations lags a little)
            def refuses() -> bool:
                h.operator.check_alive()
                done = h.apply(h.query("probe", TYPO), "--dry-run=server")
                return done.returncode != 0 and "denied the request" in done.stderr
            eventually(refuses, what="the webhook answers the API server", timeout=60, interval=0.5,
                       retry_on=KubeError)
            yield h
        except BaseException:
            print(h.operator.tail())
            raise
        finally:
            for process in (h.operator, *h.extra):
                process.stop()
            try:
                k.request("DELETE", f"{CONFIGURATIONS}/{h.configuration}")
            except KubeError as exc:
                if exc.status != 404:
                    raise


def test_the_configuration_is_scoped_to_the_watched_namespace(hooked: Hooked) -> None:
    hooks = {h["name"]: h for h in hooked.webhooks() or []}
    assert set(hooks) == {"streamingqueries.sluice.dev", "queryclusters.sluice.dev"}
    sq = hooks["streamingqueries.sluice.dev"]
    assert sq["clientConfig"]["url"] == f"https://127.0.0.1:{hooked.port}/validate-streamingquery"
    assert sq["clientConfig"]["caBundle"]
    assert (sq["failurePolicy"], sq["timeoutSeconds"], sq["sideEffects"]) == ("Fail", 10, "None")
    assert sq["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [hooked.ns]}]


def test_a_typo_in_the_sql_is_refused_with_its_line_and_column(hooked: Hooked) -> None:
    done = hooked.apply(hooked.query("typo", TYPO))
    assert done.returncode != 0
    assert 'admission webhook "streamingqueries.sluice.dev" denied the request: ' + TYPO_ERROR in done.stderr
    assert hooked.k.get("StreamingQuery", hooked.ns, "typo") is None


def test_a_cluster_spec_the_model_refuses_names_the_field(hooked: Hooked) -> None:
    bad = {"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster", "metadata": {"name": "bad"},
           "spec": {"serviceId": "bad", "kafka": {"bootstrapServers": "k:9092"},
                    "cleanup": {"retention": "soon"}}}
    done = hooked.apply(bad)
    assert done.returncode != 0
    assert ('admission webhook "queryclusters.sluice.dev" denied the request: spec.cleanup.retention: Value '
            "error, 'soon' is not a duration such as 30s") in done.stderr


def test_standbys_on_a_read_write_once_claim_are_warned_of_and_executors_refused(hooked: Hooked) -> None:
    h = hooked
    done = h.apply(h.query("standby", SQL, standbyReplicas=1), "--dry-run=server")
    assert done.returncode == 0, done.stderr
    assert ("Warning: storage.accessMode ReadWriteOnce keeps the driver and its 1 standby on the state "
            "claim's node: a node loss takes all of them") in done.stderr
    refused = h.apply(h.query("executors", SQL, resources={"executors": 2}), "--dry-run=server")
    assert refused.returncode != 0
    assert ("denied the request: spec.resources.executors: 2 executor pods mount the state claim from any "
            "node") in refused.stderr
    cluster = {"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster", "metadata": {"name": "exec"},
               "spec": {"serviceId": "exec", "kafka": {"bootstrapServers": "k:9092"}, "executors": 1}}
    refused = h.apply(cluster, "--dry-run=server")
    assert refused.returncode != 0
    assert "denied the request: spec.executors: 1 executor pod mounts" in refused.stderr
    cluster["spec"]["storage"] = {"objectStore": {"uri": "s3a://checkpoints/sluice"}}
    done = h.apply(cluster, "--dry-run=server")
    assert done.returncode == 0, done.stderr


def test_edits_of_a_pinned_plan_are_announced_or_refused(hooked: Hooked) -> None:
    h = hooked
    created = h.apply(h.query("views", SQL))
    assert created.returncode == 0, created.stderr
    assert "Warning" not in created.stderr
    st = eventually(lambda: h.status("views").get("plan") and h.status("views"), timeout=60,
                    what=f"the operator pinned the plan (no node runs the driver; log {h.operator.log})")
    generation = h.k.get("StreamingQuery", h.ns, "views")["metadata"]["generation"]

    # (b) a WHERE is an in-place upgrade: said before anything is stored
    dry = h.apply(h.query("views", WHERE), "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    assert "Warning: data-selection change: in-place upgrade, same checkpoint" in dry.stderr
    assert "(server dry run)" in dry.stdout

    # a new grouping key needs a replace: with backfill the output moves to a versioned topic
    dry = h.apply(h.query("views", BY_USER, upgrade={"replaceStrategy": "backfill"}), "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    assert (f"Warning: topology change: replace with backfill, output moves to topic views-{h.ns}-v2 "
            f"(plan version 2)") in dry.stderr
    assert "Warning: state starts empty: running aggregates restart from zero" in dry.stderr

    # (c) ... which the query's policy forbids: refused with the classifier's reason
    done = h.apply(h.query("views", BY_USER, upgrade={"allowReplace": False}))
    assert done.returncode != 0
    assert ('denied the request: topology change refused: This topology change needs a new checkpoint '
            '(replace), but spec.upgrade.allowReplace is false') in done.stderr
    assert "grouping keys changed from ['page'] to ['user']" in done.stderr

    # nothing of it was stored, and a spec edit that keeps the plan passes without a word
    obj = h.k.get("StreamingQuery", h.ns, "views")
    assert obj["metadata"]["generation"] == generation and obj["spec"]["sql"] == SQL
    same = h.apply(h.query("views", SQL, restartNonce="1"))
    assert same.returncode == 0 and "Warning" not in same.stderr, same.stderr
    assert h.status("views")["plan"]["hash"] == st["plan"]["hash"]


def test_with_the_webhook_gone_the_operator_refuses_a_bad_spec_in_status(hooked: Hooked) -> None:
    """(d) A clean stop takes the webhooks out of the configuration; a bad spec is then stored, and
    the next operator (without a webhook) refuses it in status, as it always did."""
    h = hooked
    assert h.operator.stop(signal.SIGTERM) == 0, h.operator.tail()
    assert h.webhooks() == []
    # (the API server's view of the configuration may lag a moment behind the withdrawal)
    eventually(lambda: h.apply(h.query("typo", TYPO)).returncode == 0, timeout=15, interval=0.5,
               what="the bad spec is stored without the webhook")

    plain = OperatorProcess(h.kube, h.ns, h.tmp / "operator-plain.log")
    h.extra.append(plain)

    def refused() -> dict[str, Any] | None:
        plain.check_alive()
        st = h.status("typo")
        return st if st.get("lastCompileError") else None

    st = eventually(refused, timeout=60, what=f"the reconcile refused the SQL in status (log {plain.log})")
    assert st["lastCompileError"] == {"message": TYPO_ERROR, "field": "spec.sql", "line": 3, "column": 22}
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "CompileFailed"
    assert degraded["message"] == TYPO_ERROR
    assert h.k.list("Deployment", h.ns, "sluice.dev/query=typo") == []

