"""The Helm chart: values checked by its schema, the objects it renders, and installs on a real API
server in both RBAC modes; in namespaced mode the operator runs (a local process) under exactly
the chart's RBAC. (Its CRDs: tests/unit/crd/test_crd_generate.py.)"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.core.status import PHASES
from sluice.operator import builders
from sluice.operator.kube import Kube
from sluice.operator.leader import LEADER_LABEL
from sluice_dev.platform import common

from tests.support import helm as chart
from tests.support.metrics import operator_and_runtime
from tests.support.namespaces import fresh_namespace
from tests.support.operator_fixtures import cluster_spec, context
from tests.support.operator_process import OperatorProcess
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
CHART = chart.CHART
DOCS = REPO / "docs" / "chart.md"
MONITORS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
ALL_MONITORS = {"metrics.serviceMonitor.enabled": "true", "metrics.podMonitor.enabled": "true",
                "metrics.prometheusRule.enabled": "true"}

pytestmark = pytest.mark.integration


def driver_roles(namespace: str) -> list[dict[str, Any]]:
    """The driver Roles the operator creates in ``namespace``: a query's without executors and one
    with executors (which grants Spark's rules on top)."""
    roles = []
    for executors in (0, 2):
        ctx = context(name=f"q{executors}", cluster=cluster_spec(executors=executors))
        role = builders.role(dataclasses.replace(ctx, namespace=namespace))
        role["metadata"].pop("ownerReferences", None)
        roles.append(role)
    return roles


def driver_rules_missing(kube: Any, user: str, namespace: str) -> list[str]:
    """The permissions of the driver Roles (``driver_roles``: every verb, on every name a rule
    names, subresources included) that ``user`` lacks in ``namespace``, and the Roles the API
    server refuses to let ``user`` create there (a server-side dry run: RBAC forbids granting a
    permission one does not hold, so the query would never get its Role)."""
    missing = []
    for role in driver_roles(namespace):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    plural, _, sub = resource.partition("/")
                    what = f"{plural}.{group}" if group else plural
                    for name in rule.get("resourceNames") or [""]:
                        target = f"{what}/{name}" if name else what
                        extra = [f"--subresource={sub}"] if sub else []
                        for verb in rule["verbs"]:
                            if not chart.can_i(kube, user, verb, target, "-n", namespace, *extra):
                                missing.append(f"{verb} {target}{'/' + sub if sub else ''}")
        created = chart.kubectl(kube, "create", "--dry-run=server", "-n", namespace, f"--as={user}",
                                "-f", "-", stdin=json.dumps(role), check=False)
        if created.returncode != 0:
            missing.append(f"Role {role['metadata']['name']}: {created.stderr.strip()}")
    return missing


def test_chart_lints_and_installs(kube: Any, namespace: str) -> None:
    env = kube.env()
    kubectl = str(kube.bin_dir / "kubectl")
    lint = chart.helm("lint", "--strict", str(CHART), env=env)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # the release namespace enforces the restricted Pod Security Standard: the operator's pods are
    # created only if they pass it (no node runs them: they stay Pending)
    chart.kubectl(kube, "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                  "pod-security.kubernetes.io/enforce-version=latest")
    with chart.installed(kube, "sluice", namespace, {"watchNamespaces": "{" + namespace + "}"}):
        out = subprocess.run(
            [kubectl, "get", "deployment", "sluice-operator", "-n", namespace, "-o", "json"],
            capture_output=True, text=True, env=env, check=True,
        ).stdout
        deployment = json.loads(out)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["sluice", "operator"]
        assert f"--namespace={namespace}" in container["args"]
        assert deployment["spec"]["replicas"] == 2
        crds = subprocess.run([kubectl, "get", "crd", "-o", "name"], capture_output=True, text=True, env=env,
                              check=True).stdout
        assert "customresourcedefinition.apiextensions.k8s.io/streamingqueries.sluice.dev" in crds
        # the operator's Role holds every permission the driver Roles grant, and so may create them
        missing = driver_rules_missing(kube, f"system:serviceaccount:{namespace}:sluice-operator", namespace)
        assert missing == [], f"the chart's RBAC lacks what the driver Roles grant: {missing}"

        def pods() -> list[dict[str, Any]] | None:
            got = json.loads(chart.kubectl(kube, "get", "pods", "-n", namespace, "-l",
                                           "app.kubernetes.io/name=sluice,app.kubernetes.io/instance=sluice",
                                           "-o", "json").stdout)["items"]
            return got if len(got) == 2 else None

        def refusals() -> str:
            rs = chart.kubectl(kube, "get", "replicasets", "-n", namespace, "-o", "json").stdout
            return json.dumps([r.get("status", {}).get("conditions") for r in json.loads(rs)["items"]])

        try:
            eventually(pods, timeout=60, what="the ReplicaSet created both operator pods")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; ReplicaSet conditions: {refusals()}") from None
        chart.kubectl(kube, "get", "service", "sluice-operator-metrics", "-n", namespace)
        chart.kubectl(kube, "get", "poddisruptionbudget", "sluice-operator", "-n", namespace)

        # the helm test pod passes the same admission (server-side dry run: every admission plugin)
        test_pod = chart.kubectl(kube, "get", "pod", "-n", namespace, "-o", "name", check=False)
        assert "test-metrics" not in test_pod.stdout  # a test hook: only `helm test` creates it
        rendered = chart.helm("template", "sluice", str(CHART), "--namespace", namespace,
                              "--show-only", "templates/tests/test-metrics.yaml", env=env).stdout
        admitted = chart.kubectl(kube, "create", "--dry-run=server", "-n", namespace, "-f", "-",
                                 stdin=rendered, check=False)
        assert admitted.returncode == 0, admitted.stderr
        # ...which does refuse a pod that is not restricted (the check above can fail)
        plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
                 "spec": {"containers": [{"name": "c", "image": "sluice-operator:0.1.0"}]}}
        refused = chart.kubectl(kube, "create", "--dry-run=server", "-n", namespace, "-f", "-",
                                stdin=json.dumps(plain), check=False)
        assert refused.returncode != 0 and "restricted" in refused.stderr, refused.stderr


def test_cluster_wide_mode_holds_the_driver_rules_everywhere(kube: Any, namespace: str) -> None:
    user = f"system:serviceaccount:{namespace}:sluice-cw-operator"
    with chart.installed(kube, "sluice-cw", namespace), fresh_namespace(kube.api, "anywhere") as elsewhere:
        assert driver_rules_missing(kube, user, elsewhere) == []
        assert chart.can_i(kube, user, "list", "secrets", "-A")  # what namespaced mode avoids
        roles = chart.kubectl(kube, "get", "roles", "-n", namespace, "-o", "name").stdout
        assert "sluice-cw-operator" not in roles


def test_namespaced_mode_runs_the_operator_under_its_rbac(
        kube: Any, namespace: str, kafka: str, tmp_path: Path) -> None:
    """Install with watchNamespaces={ns1}, then run two operator replicas as the chart's
    ServiceAccount: the leader must reconcile a query in ns1 (plan pinned, driver Deployment and
    driver Role created) without one refusal, the standby must answer its probes, and the
    ServiceAccount (its own token) must hold no Secret beyond ns1."""
    release, sa = "sluice-ns", "sluice-ns-operator"
    user = f"system:serviceaccount:{namespace}:{sa}"
    k = Kube(kube.api)
    with fresh_namespace(kube.api, "ns1") as ns1, fresh_namespace(kube.api, "other") as other, \
            chart.installed(kube, release, namespace, {"watchNamespaces": "{" + ns1 + "}"}):
        # what the chart's objects say the pod gets: its probes' path, and the helm test's script
        objects = chart.render({"watchNamespaces": "{" + ns1 + "}", **ALL_MONITORS}, release=release,
                               namespace=namespace)
        deployment = chart.only(objects, "Deployment")
        probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
        test_script = chart.only(objects, "Pod")["spec"]["containers"][0]["command"][2]

        # the ServiceAccount's own token (kubectl create token): what the operator pod runs with
        config = chart.service_account_kubeconfig(kube, namespace, sa, tmp_path / "token.kubeconfig")
        seen = chart.whoami(kube, config)
        assert seen["username"] == user
        assert {"system:serviceaccounts", f"system:serviceaccounts:{namespace}"} <= set(seen["groups"])

        ports = [common.free_port(), common.free_port()]
        operators = [OperatorProcess.with_kubeconfig(config, tmp_path / f"op-{n}.log", "--namespace", ns1,
                                         "--metrics-port", str(port), "--lease-namespace", namespace,
                                         "--identity", f"op-{n}")
                     for n, port in zip("ab", ports, strict=True)]
        try:
            # one leads (the Lease in the release namespace, through the leader-election Role)
            lease = eventually(lambda: (k.get("Lease", namespace, "sluice-operator") or {}).get("spec"),
                               timeout=30, what="the operator's Lease")
            assert lease["holderIdentity"] in ("op-a", "op-b")
            standby = operators[1] if lease["holderIdentity"] == "op-a" else operators[0]
            eventually(lambda: "waiting for leadership" in standby.text(), timeout=30,
                       what="the other replica waits for the Lease")
            # the probes: every replica answers on the metrics port, the standby waiting for the
            # Lease too (it never starts kopf, so it stays Live and Ready)
            for port in ports:
                status, body = eventually(
                    lambda port=port: _answer(f"http://127.0.0.1:{port}{probe['path']}"),  # type: ignore[misc]
                    timeout=30, what=f"the metrics port {port} answers")
                assert status == 200 and "sluice_operator_queries" in body
            # the helm test's script passes against the real operator
            ran = subprocess.run([sys.executable, "-c", test_script], capture_output=True, text=True,
                                 env={"METRICS_URL": f"http://127.0.0.1:{ports[0]}{probe['path']}"},
                                 timeout=90, check=False)
            assert ran.returncode == 0, ran.stdout + ran.stderr

            k.create({"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
                      "metadata": {"name": "default", "namespace": ns1},
                      "spec": {"serviceId": "chart", "kafka": {"bootstrapServers": kafka},
                               "drainSeconds": 10}})
            topic = f"chart-{uuid.uuid4().hex[:6]}"
            k.create({"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
                      "metadata": {"name": "totals", "namespace": ns1},
                      "spec": {"sources": [{"name": "orders", "topic": f"{topic}-in", "schema": [
                          {"name": "customer", "type": "string"}, {"name": "amount", "type": "double"}]}],
                          "sql": "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer",
                          "sink": {"topic": topic, "outputMode": "update"}}})

            def reconciled() -> dict[str, Any] | None:
                for op in operators:
                    op.check_alive()
                st = (k.get("StreamingQuery", ns1, "totals") or {}).get("status") or {}
                done = st.get("plan") and k.get("Deployment", ns1, "totals-driver") and k.get(
                    "Role", ns1, "totals-spark")
                return st if done else None

            try:
                st = eventually(reconciled, timeout=90, what="the query is reconciled in ns1")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n" + "\n".join(op.tail() for op in operators)) from None
            assert len(st["plan"]["hash"]) == 64
            assert k.get("RoleBinding", ns1, "totals-spark") is not None
            # the chart's PodMonitor selects the driver pods the operator made, on their metrics port
            scrape = chart.only(objects, "PodMonitor")["spec"]
            driver = (k.get("Deployment", ns1, "totals-driver") or {})["spec"]["template"]
            assert scrape["selector"]["matchLabels"].items() <= driver["metadata"]["labels"].items()
            assert "sluice.dev/query" in driver["metadata"]["labels"]  # -> streamingquery
            assert scrape["podMetricsEndpoints"][0]["port"] in [
                p["name"] for c in driver["spec"]["containers"] for p in c.get("ports", [])]
            for op in operators:
                refusals = [line for line in op.text().splitlines()
                            if re.search(r"forbidden|HTTP 403|Not enough permissions", line, re.I)]
                assert refusals == [], f"{op.log}: {refusals}"
            # the standby is still waiting, and still answers its probes
            assert " starting (namespaces" not in standby.text()
            standby_port = ports[operators.index(standby)]
            assert chart.http_get(f"http://127.0.0.1:{standby_port}{probe['path']}")[0] == 200
        finally:
            for op in operators:
                op.stop()
            # the operator's finalizers would keep ns1 terminating: nobody handles them any more
            for kind, name in (("StreamingQuery", "totals"), ("QueryCluster", "default")):
                if k.get(kind, ns1, name) is not None:
                    k.patch(kind, ns1, name, {"metadata": {"finalizers": None}})

        # no Secret beyond the watched namespace (ns1: the Kafka credentials a QueryCluster names),
        # asked with the ServiceAccount's own token
        assert chart.can_i(kube, config, "get", "secrets", "-n", ns1)
        assert not chart.can_i(kube, config, "list", "secrets", "-A")
        assert not chart.can_i(kube, config, "get", "secrets", "-n", other)
        assert not chart.can_i(kube, config, "get", "secrets", "-n", namespace)
        assert not chart.can_i(kube, config, "create", "pods", "-n", other)
        assert chart.can_i(kube, config, "list", "namespaces", "-A")  # kopf's observation, read only
        assert driver_rules_missing(kube, user, ns1) == []

def _answer(url: str) -> tuple[int, str] | None:
    try:
        return chart.http_get(url)
    except OSError:
        return None


# -- values.schema.json ----------------------------------------------------------------------------

def test_the_operator_holds_no_delete_collection_but_of_pods() -> None:
    """What the operator holds in a watched namespace only to grant it: the driver Roles' rules.
    Nothing wider: no deletecollection but of pods (Spark's executors), and pods/status patch only
    (a driver labels its own pod)."""
    for values in ({}, {"watchNamespaces": "{a,b}"}):
        objects = chart.render(values)
        holder = chart.only(objects, "ClusterRole") if not values else chart.only(
            [o for o in objects if o["metadata"].get("namespace") == "a"], "Role")
        wide = {(r, v) for rule in holder["rules"] for r in rule["resources"] for v in rule["verbs"]
                if not rule.get("resourceNames")}
        assert {r for r, v in wide if v == "deletecollection"} == {"pods"}
        assert {v for r, v in wide if r == "pods/status"} == {"patch"}


def test_schema_refuses_typos_and_wrong_types(tmp_path: Path) -> None:
    """Helm validates values against values.schema.json on template, lint, install and upgrade."""
    cases = {
        "replicaCont": {"replicaCont": "3"},  # a typo'd top-level value
        "enable": {"metrics.serviceMonitor.enable": "true"},  # a typo'd nested one
        "/replicaCount": {"replicaCount": "two"},  # a wrong type
        "/logFormat": {"logFormat": "xml"},  # not one of json, text
        "/image/pullPolicy": {"image.pullPolicy": "Sometimes"},
        "/metrics/port": {"metrics.port": "80"},  # the operator runs without privileges
        "/watchNamespaces/0": {"watchNamespaces": "{Not_A_Namespace}"},
    }
    for named, values in cases.items():
        out = chart.helm("template", "rel", str(CHART), *chart.set_args(values))
        assert out.returncode != 0, f"{values} rendered"
        assert named in out.stderr and "schema" in out.stderr, out.stderr
    bad = tmp_path / "typo.yaml"
    bad.write_text("replicaCount: 2\nwatchNamespace: [a]\n")
    lint = chart.helm("lint", str(CHART), "-f", str(bad))
    assert lint.returncode != 0 and "watchNamespace" in lint.stdout + lint.stderr, lint.stdout
    # the chart's own values, and every switch on, pass
    everything = {**ALL_MONITORS, "metrics.grafanaDashboard.enabled": "true"}
    assert chart.helm("lint", "--strict", str(CHART), *chart.set_args(everything)).returncode == 0


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of values.yaml down to a scalar, a list or an empty map (the documented values)."""
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path != "resources":
            out += _leaves(value, path + ".")
        else:
            out.append(path)
    return out


def test_schema_and_docs_cover_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    docs = DOCS.read_text()
    undocumented, unschemed = [], []
    for path in _leaves(values):
        node = schema
        for part in path.split("."):
            assert node.get("additionalProperties") is False, f"{path}: a typo under it would pass"
            node = node.get("properties", {}).get(part)
            if node is None:
                unschemed.append(path)
                break
        else:
            assert node.get("type") and node.get("description"), f"{path}: no type or description"
        if f"`{path}`" not in docs:
            undocumented.append(path)
    assert unschemed == [], f"values.schema.json lacks {unschemed}"
    assert undocumented == [], f"docs/chart.md lacks {undocumented}"


# -- the rendered objects -------------------------------------------------------------------------

def test_rendered_probes_service_and_disruption_budget() -> None:
    objects = chart.render()
    assert not set(MONITORS) & set(chart.kinds(objects))  # off by default: no Prometheus Operator CRDs needed
    deployment = chart.only(objects, "Deployment")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                                  {"name": "webhook", "containerPort": 9443, "protocol": "TCP"}]
    assert "--metrics-port=9090" in container["args"]
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[kind]["httpGet"] == {"path": "/metrics", "port": "metrics"}, kind
    # a leader renews its Lease every 5 s (15 s term): liveness gives a stuck process a minute
    assert container["livenessProbe"]["periodSeconds"] * container["livenessProbe"]["failureThreshold"] >= 60

    service = chart.only(objects, "Service", "rel-operator-metrics")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics",
                                         "protocol": "TCP"}]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()

    pdb = chart.only(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    # no selector of the chart counts the helm test pod as an operator replica
    test_pod = chart.only(objects, "Pod")
    assert not service["spec"]["selector"].items() <= test_pod["metadata"]["labels"].items()
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert "rel-operator-metrics.sluice-system.svc:9090" in json.dumps(test_pod["spec"])

    single = chart.render({"replicaCount": "1"})
    assert "PodDisruptionBudget" not in chart.kinds(single)
    moved = chart.render({"metrics.port": "9300"})
    assert chart.only(moved, "Service", "rel-operator-metrics")["spec"]["ports"][0]["port"] == 9300
    assert "--metrics-port=9300" in chart.only(moved, "Deployment")["spec"]["template"]["spec"][
        "containers"][0]["args"]


def _restricted(pod_spec: dict[str, Any]) -> list[str]:
    """What keeps a pod spec from the restricted Pod Security Standard (the settings a chart sets)."""
    problems = []
    pod_ctx = pod_spec.get("securityContext") or {}
    for c in pod_spec["containers"]:
        ctx = c.get("securityContext") or {}
        name = c["name"]
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation")
        if ctx.get("capabilities", {}).get("drop") != ["ALL"]:
            problems.append(f"{name}: capabilities.drop ALL")
        if not (ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))):
            problems.append(f"{name}: runAsNonRoot")
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile")
        if ctx.get("privileged") or ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"{name}: privileged or root")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(key):
            problems.append(key)
    return problems


def test_operator_and_test_pods_are_restricted() -> None:
    objects = chart.render()
    assert _restricted(chart.only(objects, "Deployment")["spec"]["template"]["spec"]) == []
    test_pod = chart.only(objects, "Pod")["spec"]
    assert _restricted(test_pod) == []
    assert test_pod["automountServiceAccountToken"] is False and test_pod["restartPolicy"] == "Never"


def test_monitors_only_when_enabled() -> None:
    for switch, kind in zip(ALL_MONITORS, MONITORS, strict=True):
        objects = chart.render({switch: "true"})
        present = [k for k in MONITORS if k in chart.kinds(objects)]
        assert present == [kind], f"{switch}: {present}"
    objects = chart.render({**ALL_MONITORS, "metrics.serviceMonitor.labels.release": "prom"})
    service = chart.only(objects, "Service", "rel-operator-metrics")
    monitor = chart.only(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [service["spec"]["ports"][0]["name"]]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["sluice-system"]}

    pods = chart.only(objects, "PodMonitor")["spec"]
    assert pods["selector"]["matchLabels"] == {"app.kubernetes.io/component": "driver",
                                               "app.kubernetes.io/managed-by": "sluice-operator"}
    assert pods["namespaceSelector"] == {"any": True}
    assert [e["port"] for e in pods["podMetricsEndpoints"]] == ["http"]
    scoped = chart.render({**ALL_MONITORS, "watchNamespaces": "{a,b}"})
    assert chart.only(scoped, "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}


# -- the alerts -----------------------------------------------------------------------------------

def test_alerts_use_metrics_the_code_exports() -> None:
    operator_names, runtime_names = operator_and_runtime()
    names = {**operator_names, **runtime_names}
    assert "sluice_batches_total" in names and "sluice_batches" not in names  # prometheus_client's suffix
    assert not [n for n in names if n.endswith("_created")]  # no series beside each counter

    rule = chart.only(chart.render(ALL_MONITORS), "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {"SluiceQueryNotProgressing", "SluiceKafkaLagGrowing", "SluiceLateRowsDropped",
                           "SluiceStateVolumeFilling", "SluiceUpgradeRolledBack", "SluiceUpgradeFailed",
                           "SluiceFailoverStorm", "SluiceLeaseNotRenewed", "SluiceQueriesDegraded",
                           "SluiceOperatorReconcileErrors", "SluiceOperatorDown"}
    for name, alert in alerts.items():
        expr = alert["expr"]
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert re.fullmatch(r"\d+[smh]", alert["for"]), name
        used = set(re.findall(r"\bsluice_[a-z0-9_]+\b", expr))
        assert used or "up{" in expr, f"{name} uses no Sluice metric"
        unknown = sorted(used - set(names))
        assert unknown == [], f"{name}: {unknown} are exported by no code"
        # matchers name labels the metric has, and phases that exist
        for metric, matchers in re.findall(r"\b(sluice_[a-z0-9_]+)\{([^}]*)\}", expr):
            for label, value in re.findall(r'(\w+)\s*!?=~?\s*"([^"]*)"', matchers):
                assert label in names[metric], f"{name}: {metric} has no label {label}"
                if label.endswith("phase"):
                    assert value in PHASES, f"{name}: no phase {value}"
        # the drivers' metrics are joined per Spark query: they all carry `query`
        if "on (namespace, pod, query)" in expr:
            assert all("query" in names[m] for m in used), f"{name}: {used} not all per query"
    # the query alerts name the query (namespace/streamingquery, set by the PodMonitor)
    relabel = chart.only(chart.render(ALL_MONITORS), "PodMonitor")["spec"]["podMetricsEndpoints"][0][
        "relabelings"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_label_sluice_dev_query"],
            "targetLabel": "streamingquery"} in relabel
    per_query = [name for name, alert in alerts.items() if "streamingquery" in alert["expr"]]
    assert len(per_query) == 9, per_query
    for name in per_query:  # they name the query, with the label the operator's metrics carry too
        text = alerts[name]["annotations"]["description"]
        assert "{{ $labels.namespace }}/{{ $labels.streamingquery }}" in text, name
        for metric in set(re.findall(r"\b(sluice_operator_[a-z0-9_]+)\b", alerts[name]["expr"])):
            assert {"namespace", "streamingquery"} <= operator_names[metric], f"{name}: {metric}"
    # the operator's per-query series keep their own namespace label when scraped
    monitor = chart.only(chart.render(ALL_MONITORS), "ServiceMonitor")
    assert [e.get("honorLabels") for e in monitor["spec"]["endpoints"]] == [True]
    # the window values reach the expressions
    tuned = chart.render({**ALL_MONITORS, "metrics.prometheusRule.notProgressingWindow": "40m"})
    tuned_rule = chart.only(tuned, "PrometheusRule")
    assert "[40m]" in json.dumps(tuned_rule["spec"])


def test_alerts_tuning_is_validated() -> None:
    rule = "metrics.prometheusRule."
    for key, value in (("lagGrowingFor", "soon"), ("stateVolumeMinFreeRatio", "2"),
                       ("stateVolumeMinFreeRatio", "lots"), ("lateRowsMinRatio", "-1"),
                       ("failoverStormCount", "0"), ("stateVolumeFullWithinHours", "a day")):
        out = chart.helm("template", "rel", str(CHART), *chart.set_args({**ALL_MONITORS, rule + key: value}))
        assert out.returncode != 0 and key in out.stderr, f"{key}={value}: {out.stderr}"
    # --set passes a fraction as a string: taken, and written into the expressions as given
    tuned = chart.render({**ALL_MONITORS, rule + "stateVolumeMinFreeRatio": "0.05",
                          rule + "lateRowsMinRatio": "0.2", rule + "failoverStormCount": "5",
                          rule + "failoverStormWindow": "1h"})
    text = json.dumps(chart.only(tuned, "PrometheusRule")["spec"])
    assert "< 0.05" in text and "> 0.2" in text and "[1h])) >= 5" in text


# -- the Grafana dashboard ------------------------------------------------------------------------

def test_the_dashboard_config_map_for_grafana_s_sidecar() -> None:
    assert "ConfigMap" not in chart.kinds(chart.render(ALL_MONITORS))  # off by default
    shipped = json.loads((CHART / "files" / "grafana-dashboard.json").read_text())
    objects = chart.render({"metrics.grafanaDashboard.enabled": "true"})
    config_map = chart.only(objects, "ConfigMap", "rel-operator-dashboard")
    assert config_map["metadata"]["namespace"] == "sluice-system"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # what the sidecar looks for
    assert "annotations" not in config_map["metadata"]
    assert json.loads(config_map["data"]["sluice.json"]) == shipped
    # the sidecar's namespace, folder and label value may differ
    moved = chart.only(chart.render({"metrics.grafanaDashboard.enabled": "true",
                                     "metrics.grafanaDashboard.namespace": "monitoring",
                                     "metrics.grafanaDashboard.labels.grafana_dashboard": "sluice",
                                     "metrics.grafanaDashboard.labels.team": "data",
                                     "metrics.grafanaDashboard.annotations.grafana_folder": "Streaming"}),
                       "ConfigMap", "rel-operator-dashboard")["metadata"]
    assert moved["namespace"] == "monitoring" and moved["annotations"] == {"grafana_folder": "Streaming"}
    assert moved["labels"]["grafana_dashboard"] == "sluice" and moved["labels"]["team"] == "data"
    out = chart.helm("template", "rel", str(CHART), *chart.set_args(
        {"metrics.grafanaDashboard.enabled": "true",
         "metrics.grafanaDashboard.namespace": "Not_A_Namespace"}))
    assert out.returncode != 0 and "grafanaDashboard" in out.stderr, out.stderr



def test_the_webhook_is_served_by_the_leader_and_may_use_a_mounted_certificate() -> None:
    objects = chart.render()
    deployment = chart.only(objects, "Deployment")
    pod = deployment["spec"]["template"]
    args = pod["spec"]["containers"][0]["args"]
    assert "--webhook-port=9443" in args and "--webhook-service=sluice-system/rel-operator-webhook" in args
    assert "--webhook-failure-policy=Fail" in args and "--webhook-configuration=rel-operator" in args
    assert not any(a.startswith("--webhook-cert") for a in args)
    assert "--webhook-secret=rel-operator-webhook-certs" in args  # kept by the leader by default
    service = chart.only(objects, "Service", "rel-operator-webhook")
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    # the leader only: the selector is the pods' plus the label the leading replica sets on itself
    selector = service["spec"]["selector"]
    assert selector.pop(LEADER_LABEL) == "true"
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert LEADER_LABEL not in pod["metadata"]["labels"]  # never in the template: the leader sets it
    rules = chart.only(objects, "ClusterRole")["rules"]
    hooks = [r for r in rules if r["resources"] == ["validatingwebhookconfigurations"]]
    assert {v for r in hooks for v in r["verbs"]} == {"create", "get", "patch"}
    assert [r.get("resourceNames") for r in hooks if "patch" in r["verbs"]] == [["rel-operator"]]

    managed = chart.render({"webhook.certManager.enabled": "true"})
    certificate = chart.only(managed, "Certificate")
    assert certificate["spec"]["secretName"] == "rel-operator-webhook-tls"
    assert "rel-operator-webhook.sluice-system.svc" in certificate["spec"]["dnsNames"]
    spec = chart.only(managed, "Deployment")["spec"]["template"]["spec"]
    assert "--webhook-cert=/etc/sluice/webhook/tls.crt" in spec["containers"][0]["args"]
    mounted = {"name": "webhook-certificate", "secret": {"secretName": "rel-operator-webhook-tls"}}
    assert mounted in spec["volumes"]

    off = chart.render({"webhook.enabled": "false"})
    assert not any(a.startswith("--webhook") for a in chart.only(off, "Deployment")["spec"]["template"][
        "spec"]["containers"][0]["args"])
    assert [o["metadata"]["name"] for o in off if o["kind"] == "Service"] == ["rel-operator-metrics"]
