"""The local node agent runs real pods bound by the real scheduler, as local processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sluice_dev.nodeagent.kubeapi import Api, ApiError
from sluice_dev.platform import common
from sluice_dev.platform import nodeagent as nodeagent_component

from tests.support import waiting

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
NODE = "sluice-test-node"
PY = sys.executable
AGENT_ARGS = ["--backoff-initial", "1", "--backoff-max", "4", "--heartbeat", "5", "--delete-node-on-exit"]
#: how this module waits (deadline, poll interval, which errors mean "not yet")
eventually = partial(waiting.eventually, timeout=60.0, retry_on=ApiError)


class Agent:
    def __init__(self, api: Api, state: Path) -> None:
        self.api = api
        self.state = state

    def pod(self, ns: str, name: str) -> Obj | None:
        return self.api.get_or_none(f"/api/v1/namespaces/{ns}/pods/{name}")

    def create(self, ns: str, kind: str, body: Obj) -> Obj:
        path = {
            "pods": "/api/v1",
            "configmaps": "/api/v1",
            "secrets": "/api/v1",
            "serviceaccounts": "/api/v1",
            "persistentvolumeclaims": "/api/v1",
            "roles": "/apis/rbac.authorization.k8s.io/v1",
            "rolebindings": "/apis/rbac.authorization.k8s.io/v1",
        }[kind]
        return self.api.create(f"{path}/namespaces/{ns}/{kind}", body)

    def run_pod(self, ns: str, name: str, containers: list[Obj], **spec: Any) -> Obj:
        eventually(
            lambda: self.api.get_or_none(f"/api/v1/namespaces/{ns}/serviceaccounts/default"),
            timeout=30,
            what="the default service account exists",
        )
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"test": name}},
            # pinned to this test's node through the scheduler: another agent (a developer's
            # platform, an earlier suite) may have a Ready node on the same API server
            "spec": {
                "containers": containers,
                "terminationGracePeriodSeconds": 5,
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                **spec,
            },
        }
        return self.create(ns, "pods", body)

    def log(self, pod: Obj, container: str) -> str:
        path = self.state / "pods" / pod["metadata"]["uid"] / "logs" / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else "(no log)"

    def wait_phase(self, ns: str, name: str, phase: str, timeout: float = 60.0) -> Obj:
        def check() -> Obj | None:
            pod = self.pod(ns, name)
            current = (pod or {}).get("status", {}).get("phase")
            if pod and current in ("Succeeded", "Failed") and current != phase:
                logs = "\n".join(self.log(pod, c["name"]) for c in pod["spec"]["containers"])
                raise AssertionError(
                    f"pod {name} is {current}, wanted {phase}: {json.dumps(pod['status'])}\n{logs}"
                )
            return pod if current == phase else None

        return eventually(check, timeout=timeout, what=f"pod {name} is {phase}")

    def wait_ready(self, ns: str, name: str, timeout: float = 60.0) -> Obj:
        def check() -> Obj | None:
            pod = self.pod(ns, name)
            conds = {c["type"]: c["status"] for c in (pod or {}).get("status", {}).get("conditions", [])}
            return pod if conds.get("Ready") == "True" else None

        return eventually(check, timeout=timeout, what=f"pod {name} is Ready")


@pytest.fixture(scope="module")
def agent(kube: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    state = tmp_path_factory.mktemp("nodeagent")
    try:
        started = nodeagent_component.start(
            state,
            kube.kubeconfig,
            node_name=NODE,
            extra_args=AGENT_ARGS,
        )
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    api = Api(kube.kubeconfig)
    try:
        yield Agent(api, Path(started.info["state_dir"]))
    finally:
        nodeagent_component.stop(state)


def test_node_is_registered_ready_and_heartbeats_its_lease(agent: Agent) -> None:
    node = agent.api.get(f"/api/v1/nodes/{NODE}")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert node["status"]["allocatable"]["pods"] == "110"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
    first = agent.api.get(lease_path)["spec"]["renewTime"]
    eventually(
        lambda: agent.api.get(lease_path)["spec"]["renewTime"] != first,
        timeout=15,
        what="the node lease is renewed",
    )
    # the node lifecycle controller may briefly taint a fresh node not-ready; it must clear
    eventually(
        lambda: not agent.api.get(f"/api/v1/nodes/{NODE}")["spec"].get("taints"),
        timeout=30,
        what="the node has no taints",
    )


SERVER = textwrap.dedent("""
    import http.server, os
    ip, name = os.environ["POD_IP"], os.environ["POD_NAME"]
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"{name} {ip}".encode()
            self.send_response(200); self.end_headers(); self.wfile.write(body)
        def log_message(self, *a): pass
    http.server.HTTPServer((ip, 8080), H).serve_forever()
""")

POD_ENV = [
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
]


def test_two_pods_listen_on_the_same_port_of_their_own_ip_and_become_ready(
    agent: Agent, namespace: str
) -> None:
    container = {
        "name": "web",
        "image": "python:3.11",
        "command": [PY, "-c", SERVER],
        "env": POD_ENV,
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    for name in ("web-a", "web-b"):
        agent.run_pod(namespace, name, [container])
    pods = [agent.wait_ready(namespace, name) for name in ("web-a", "web-b")]
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 2 and all(ip.startswith("127.") and ip != "127.0.0.1" for ip in ips)
    assert [p["status"]["podIPs"] for p in pods] == [[{"ip": ip}] for ip in ips]
    for pod, ip in zip(pods, ips, strict=True):
        assert pod["spec"]["nodeName"] == NODE
        status = pod["status"]["containerStatuses"][0]
        assert status["ready"] and "running" in status["state"]
        with urllib.request.urlopen(f"http://{ip}:8080/", timeout=5) as resp:
            assert resp.read().decode() == f"{pod['metadata']['name']} {ip}"
    # no cluster DNS: the pod's /etc/hosts resolves Services to a pod they select
    agent.api.create(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"test": "web-b"}, "ports": [{"port": 8080}], "clusterIP": "None"},
        },
    )
    client = (
        "import urllib.request, sys; "
        f"a = urllib.request.urlopen('http://web:8080/').read().decode(); "
        f"b = urllib.request.urlopen('http://web.{namespace}.svc.cluster.local:8080/').read().decode(); "
        "print(a, b); sys.exit(0 if a == b and a.startswith('web-b ') else 1)"
    )
    agent.run_pod(
        namespace,
        "client",
        [{"name": "c", "image": "python:3.11", "args": ["-c", client]}],
        restartPolicy="Never",
    )
    agent.wait_phase(namespace, "client", "Succeeded")


CHECKER = textwrap.dedent("""
    import json, os, ssl, sys, urllib.request, urllib.error
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    checks = {
        "env_field": os.environ["POD_NAME"] == "checker" and os.environ["MY_NS"] == os.environ["EXPECT_NS"],
        "env_configmap": os.environ["GREETING"] == "hello",
        "env_secret": os.environ["PASSWORD"] == "s3cret",
        "env_from": os.environ["CFG_greeting"] == "hello",
        "expanded": os.environ["URL"] == "http://" + os.environ["POD_IP"] + ":8080",
        "args_expanded": sys.argv[1] == "checker",
        "cm_volume": open("/tmp/sluice-nodeagent-test/config/greeting").read() == "hello",
        "cm_items": open("/tmp/sluice-nodeagent-test/items/renamed.txt").read() == "hello",
        "secret_volume": open("/tmp/sluice-nodeagent-test/secret/password").read() == "s3cret",
        "downward_volume": 'test="checker"' in open("/tmp/sluice-nodeagent-test/podinfo/labels").read(),
        "sa_namespace": open(sa + "/namespace").read() == os.environ["EXPECT_NS"],
        "sa_ca": "BEGIN CERTIFICATE" in open(sa + "/ca.crt").read(),
        "in_cluster_env": os.environ["KUBERNETES_SERVICE_HOST"] == "127.0.0.1",
        "no_admin_kubeconfig": "KUBECONFIG" not in os.environ,
    }
    token = open(sa + "/token").read()
    ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
    base = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
    def call(method, path):
        req = urllib.request.Request(base + path, method=method, headers={"Authorization": "Bearer " + token})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
    cm = f"/api/v1/namespaces/{os.environ['EXPECT_NS']}/configmaps/settings"
    checks["rbac_get_allowed"] = call("GET", cm) == 200
    checks["rbac_delete_forbidden"] = call("DELETE", cm) == 403
    secrets = f"/api/v1/namespaces/{os.environ['EXPECT_NS']}/secrets"
    checks["rbac_other_resource_forbidden"] = call("GET", secrets) == 403
    print(json.dumps(checks), flush=True)
    sys.exit(0 if all(checks.values()) else 1)
""")


def test_env_volumes_and_service_account_token_with_real_rbac(agent: Agent, namespace: str) -> None:
    agent.create(namespace, "configmaps", {"metadata": {"name": "settings"}, "data": {"greeting": "hello"}})
    agent.create(namespace, "secrets", {"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}})
    agent.create(namespace, "serviceaccounts", {"metadata": {"name": "reader"}})
    agent.create(
        namespace,
        "roles",
        {
            "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        },
    )
    agent.create(
        namespace,
        "rolebindings",
        {
            "metadata": {"name": "cm-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    eventually(
        lambda: agent.api.get_or_none(f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt"),
        timeout=30,
        what="kube-root-ca.crt is published",
    )
    container = {
        "name": "check",
        "image": "python:3.11",
        "args": ["-c", CHECKER, "$(POD_NAME)"],  # image entry point
        "env": [
            *POD_ENV,
            {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "EXPECT_NS", "value": namespace},
            {"name": "URL", "value": "http://$(POD_IP):8080"},
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        ],
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
        "volumeMounts": [
            {"name": "config", "mountPath": "/tmp/sluice-nodeagent-test/config"},
            {"name": "items", "mountPath": "/tmp/sluice-nodeagent-test/items"},
            {"name": "secret", "mountPath": "/tmp/sluice-nodeagent-test/secret"},
            {"name": "podinfo", "mountPath": "/tmp/sluice-nodeagent-test/podinfo"},
        ],
    }
    agent.run_pod(
        namespace,
        "checker",
        [container],
        restartPolicy="Never",
        serviceAccountName="reader",
        volumes=[
            {"name": "config", "configMap": {"name": "settings"}},
            {
                "name": "items",
                "configMap": {"name": "settings", "items": [{"key": "greeting", "path": "renamed.txt"}]},
            },
            {"name": "secret", "secret": {"secretName": "creds"}},
            {
                "name": "podinfo",
                "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            },
        ],
    )
    pod = agent.wait_phase(namespace, "checker", "Succeeded", timeout=60)
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 0
    assert status["state"]["terminated"]["reason"] == "Completed"
    assert '"rbac_delete_forbidden": true' in agent.log(pod, "check")


PERSISTENT = textwrap.dedent("""
    import os, sys, time
    with open("/tmp/sluice-nodeagent-test/data/boots", "a") as f:
        f.write(os.environ["POD_NAME"] + "\\n")
    if len(open("/tmp/sluice-nodeagent-test/data/boots").read().splitlines()) < 2:
        sys.exit(3)  # crash once: the restarted container must see the first write
    time.sleep(3600)
""")


def test_pvc_of_the_default_class_is_provisioned_and_survives_a_container_restart(
    agent: Agent,
    namespace: str,
) -> None:
    agent.create(
        namespace,
        "persistentvolumeclaims",
        {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    pvc_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data"
    pvc = eventually(
        lambda: (p := agent.api.get(pvc_path))["status"].get("phase") == "Bound" and p,
        timeout=60,
        what="the claim is bound",
    )
    assert pvc["spec"]["storageClassName"] == "sluice-local"
    pv = agent.api.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    host_dir = Path(pv["spec"]["hostPath"]["path"])
    assert host_dir.is_dir() and host_dir.is_relative_to(agent.state)
    agent.run_pod(
        namespace,
        "writer",
        [
            {
                "name": "w",
                "image": "python:3.11",
                "command": [PY, "-c", PERSISTENT],
                "env": POD_ENV,
                "volumeMounts": [{"name": "data", "mountPath": "/tmp/sluice-nodeagent-test/data"}],
            }
        ],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )

    def restarted_and_running() -> Obj | None:
        pod = agent.pod(namespace, "writer")
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        return (
            pod
            if statuses[0].get("restartCount", 0) >= 1 and "running" in statuses[0].get("state", {})
            else None
        )

    pod = eventually(restarted_and_running, timeout=60, what="the writer restarted once and runs")
    status = pod["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 3
    boots = host_dir / "boots"
    eventually(
        lambda: len(boots.read_text().splitlines()) >= 2, timeout=30, what="the second boot is recorded"
    )
    assert boots.read_text().splitlines() == ["writer", "writer"]
    agent.api.delete(f"/api/v1/namespaces/{namespace}/pods/writer")
    eventually(lambda: agent.pod(namespace, "writer") is None, timeout=30, what="the writer is gone")
    agent.api.delete(pvc_path)
    eventually(
        lambda: agent.api.get_or_none(f"/api/v1/persistentvolumes/{pv['metadata']['name']}") is None,
        timeout=60,
        what="the released volume is deleted (reclaimPolicy Delete)",
    )
    assert not host_dir.exists()


FLAKY = textwrap.dedent("""
    import http.server, os, time
    started = time.time()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if time.time() - started < 2 else 500); self.end_headers()
        def log_message(self, *a): pass
    http.server.HTTPServer((os.environ["POD_IP"], 8080), H).serve_forever()
""")


def test_liveness_failure_restarts_the_container_and_exit_codes_land_in_last_state(
    agent: Agent,
    namespace: str,
) -> None:
    agent.run_pod(
        namespace,
        "flaky",
        [
            {
                "name": "web",
                "image": "python:3.11",
                "command": [PY, "-c", FLAKY],
                "env": POD_ENV,
                "livenessProbe": {
                    "httpGet": {"path": "/", "port": 8080},
                    "periodSeconds": 1,
                    "failureThreshold": 2,
                    "initialDelaySeconds": 1,
                },
            },
            {
                "name": "crasher",
                "image": "python:3.11",
                "command": ["sh", "-c", "echo crashing; sleep 0.5; exit 7"],
            },
        ],
        terminationGracePeriodSeconds=2,
    )

    def restarted() -> dict[str, Obj] | None:
        pod = agent.pod(namespace, "flaky")
        statuses = {s["name"]: s for s in (pod or {}).get("status", {}).get("containerStatuses") or []}
        if all(statuses.get(n, {}).get("restartCount", 0) >= 2 for n in ("web", "crasher")):
            return statuses
        return None

    statuses = eventually(restarted, timeout=60, what="both containers restarted twice")
    web = statuses["web"]["lastState"]["terminated"]
    assert web["exitCode"] == 143 and web["reason"] == "Error"  # SIGTERM from the liveness kill
    assert "liveness probe failed" in web.get("message", "")
    crasher = statuses["crasher"]["lastState"]["terminated"]
    assert crasher["exitCode"] == 7 and crasher["reason"] == "Error"
    # `kubectl logs` goes API server -> the agent's kubelet API (serving cert issued through a CSR)
    logs_path = f"/api/v1/namespaces/{namespace}/pods/flaky/log"
    eventually(
        lambda: agent.api.request_text(logs_path, container="crasher") == "crashing\n",
        timeout=20,
        what="kubectl logs shows the crasher's output",
    )
    pod = agent.pod(namespace, "flaky")
    assert pod is not None and pod["status"]["phase"] == "Running"


GRACEFUL = textwrap.dedent("""
    import os, signal, sys, time
    marker = "/tmp/sluice-nodeagent-test/marker/" + os.environ["POD_NAME"]
    def on_term(signum, frame):
        with open(marker, "w") as f:
            f.write(f"SIGTERM {time.time()}")
        if os.environ.get("IGNORE") != "1":
            sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    open("/tmp/sluice-nodeagent-test/marker/" + os.environ["POD_NAME"] + ".up", "w").close()
    while True:
        time.sleep(0.1)
""")


def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(
    agent: Agent,
    namespace: str,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    marker.mkdir()
    for name, ignore, grace in (("polite", "0", 20), ("stubborn", "1", 2)):
        agent.run_pod(
            namespace,
            name,
            [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": [PY, "-c", GRACEFUL],
                    "env": [*POD_ENV, {"name": "IGNORE", "value": ignore}],
                    "volumeMounts": [{"name": "marker", "mountPath": "/tmp/sluice-nodeagent-test/marker"}],
                }
            ],
            terminationGracePeriodSeconds=grace,
            volumes=[{"name": "marker", "hostPath": {"path": str(marker), "type": "Directory"}}],
        )
    for name in ("polite", "stubborn"):
        agent.wait_phase(namespace, name, "Running")
        up = marker / f"{name}.up"
        eventually(up.exists, timeout=30, what=f"{name} is up")
    t0 = time.monotonic()
    for name in ("polite", "stubborn"):
        agent.api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    eventually(lambda: agent.pod(namespace, "polite") is None, timeout=15, what="polite is gone")
    polite_gone = time.monotonic() - t0
    eventually(lambda: agent.pod(namespace, "stubborn") is None, timeout=15, what="stubborn is gone")
    stubborn_gone = time.monotonic() - t0
    assert (marker / "polite").read_text().startswith("SIGTERM")
    assert (marker / "stubborn").read_text().startswith("SIGTERM")
    assert polite_gone < 10, polite_gone  # exited on SIGTERM, long before its 20 s grace period
    assert 2 <= stubborn_gone < 10, stubborn_gone  # SIGKILLed after its 2 s grace period


PIDFILE = (
    "import os, time; "
    "open('/tmp/sluice-nodeagent-test/marker/' + os.environ['POD_NAME'], 'w').write(str(os.getpid())); "
    "time.sleep(999)"
)


def test_a_restarted_agent_kills_orphans_finishes_deletions_and_restarts_survivors(
    agent: Agent,
    kube: Any,
    namespace: str,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    marker.mkdir()
    for name in ("survivor", "doomed"):
        agent.run_pod(
            namespace,
            name,
            [
                {
                    "name": "main",
                    "image": "python:3.11",
                    "command": [PY, "-c", PIDFILE],
                    "env": POD_ENV,
                    "volumeMounts": [{"name": "marker", "mountPath": "/tmp/sluice-nodeagent-test/marker"}],
                }
            ],
            volumes=[{"name": "marker", "hostPath": {"path": str(marker), "type": "Directory"}}],
        )
    for name in ("survivor", "doomed"):
        agent.wait_phase(namespace, name, "Running")
        eventually((marker / name).exists, timeout=30, what=f"{name} wrote its pid")
    old = {name: int((marker / name).read_text()) for name in ("survivor", "doomed")}
    state_dir = agent.state.parent
    pid = common.read_pid(agent.state / "nodeagent.pid")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # a crash: containers stay behind
    eventually(lambda: not common.pid_alive(pid), timeout=10, what="the agent died")
    assert common.pid_alive(old["survivor"]) and common.pid_alive(old["doomed"])
    (marker / "survivor").unlink()
    agent.api.delete(f"/api/v1/namespaces/{namespace}/pods/doomed")
    assert agent.pod(namespace, "doomed") is not None  # no node agent to finish the deletion
    nodeagent_component.start(state_dir, kube.kubeconfig, node_name=NODE, extra_args=AGENT_ARGS)
    eventually(lambda: agent.pod(namespace, "doomed") is None, timeout=30, what="doomed is gone")
    assert not common.pid_alive(old["doomed"]) and not common.pid_alive(old["survivor"])
    eventually((marker / "survivor").exists, timeout=30, what="the survivor started again")
    pod = agent.wait_phase(namespace, "survivor", "Running")
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1 and "running" in status["state"]
    assert status["lastState"]["terminated"]["exitCode"] == 137
