"""What the end-to-end tests need from a cluster, for the local platform and for kind.

``E2E_CLUSTER`` unset (or ``node``): the tests start the local platform themselves: real Kafka, a
real control plane and the real node (containerd, kubelet, kube-proxy, CoreDNS; root), load the
images built from the project's Dockerfiles into it and install the operator with
``charts/sluice``: driver pods run the runtime image in namespaces enforcing the ``restricted``
Pod Security Standard. ``E2E_CLUSTER=kind``: the tests use the current
``KUBECONFIG`` (a kind cluster with the runtime image loaded and the operator installed from
``charts/sluice``) and a Kafka broker at ``E2E_KAFKA_BOOTSTRAP`` reachable both from the pods and
from the test process (see docs/e2e.md).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.crd.base import GROUP, VERSION
from sluice.crd.querycluster import QueryCluster
from sluice.crd.streamingquery import StreamingQuery

log = logging.getLogger(__name__)

#: the API paths of the kinds the tests read one by one (``E2ECluster.get``): read through one
#: client connection instead of a kubectl process per read (the tests poll them every second, and
#: on the 2-core CI machine each kubectl process costs about a tenth of a CPU-second); other kinds
#: through kubectl
PATHS = {
    "streamingquery": f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{StreamingQuery.plural}/{{name}}",
    "querycluster": f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{QueryCluster.plural}/{{name}}",
    "deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
    "pvc": "/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
    "configmap": "/api/v1/namespaces/{ns}/configmaps/{name}",
    "pod": "/api/v1/namespaces/{ns}/pods/{name}",
    "node": "/api/v1/nodes/{name}",
}


def _command(pid: int) -> str:
    """A host process' command name ("" when it has ended)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@dataclass
class E2ECluster:
    kubeconfig: Path
    kubectl_bin: Path
    bootstrap: str
    kind: str = "node"
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    #: stop and start the operator (fail-over must not need it)
    stop_operator: Callable[[], None] | None = None
    start_operator: Callable[[], None] | None = None
    #: each real node's runc state root for containerd's CRI namespace, by node name (``kind == "node"``)
    runc_roots: dict[str, str] = field(default_factory=dict)
    #: labels of every test namespace (the real node's enforce ``restricted``)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    #: give a local image on every node another name (``tag_image("sluice-runtime:0.1.0", alias)``):
    #: a runtime image "of another version" with the same content, for engine upgrades
    tag_image: Callable[[str, str], None] | None = None
    #: stop the API server (returns at once) and start it again (returns once it is ready): an outage
    stop_apiserver: Callable[[], None] | None = None
    start_apiserver: Callable[[], None] | None = None
    #: a power loss of a node by name, and its power back (returns once it is Ready): the real
    #: platform's ``sluice-dev node stop/start``
    power_off: Callable[[str], None] | None = None
    power_on: Callable[[str], None] | None = None
    #: the client of :meth:`read` (made at the first read)
    _api: Any = field(default=None, repr=False)

    # -- kubectl ---------------------------------------------------------------------------------
    def kubectl_result(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``kubectl ARGS`` without raising: what it printed (warnings and refusals on stderr)."""
        return subprocess.run(
            [str(self.kubectl_bin), *args], input=stdin, capture_output=True, text=True, check=False,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)}, timeout=120,
        )

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = self.kubectl_result(*args, stdin=stdin)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def apply_result(self, *docs: dict[str, Any], dry_run: bool = False) -> subprocess.CompletedProcess[str]:
        """``kubectl apply`` without raising (``kubectl_result``)."""
        # JSON, not YAML: kubectl reads YAML 1.1, where a bare `n` or `y` is a boolean
        items = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)})
        dry = ["--dry-run=server"] if dry_run else []
        return self.kubectl_result("apply", "-f", "-", *dry, stdin=items)

    def apply(self, *docs: dict[str, Any]) -> None:
        result = self.apply_result(*docs)
        if result.returncode != 0:
            raise AssertionError(f"kubectl apply -f - failed: {result.stderr.strip()}")

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist or the API server does not answer."""
        path = PATHS.get(kind.lower())
        if path is None:
            out = self.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
            return json.loads(out) if out.strip() else None
        return self.read(path.format(ns=namespace, name=name))

    def read(self, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any] | None:
        """GET ``path`` of the API server with the kubeconfig's credentials: the object, or None
        (not found, or no answer within 10 s: an outage, as ``kubectl get`` gives nothing)."""
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        try:
            method, url, headers, body, post = self._api.param_serialize(
                "GET", path, query_params=query or [], header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"])
            response = self._api.call_api(method, url, header_params=headers, body=body, post_params=post,
                                          _request_timeout=10)
            response.read()
        except Exception as exc:  # the API server away
            log.debug("GET %s: %s", path, exc)
            return None
        if response.status != 200:  # 404 above all
            return None
        data = json.loads(response.data)
        return data if isinstance(data, dict) else None

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 240.0) -> Any:
        start = time.monotonic()
        deadline = start + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                log.info("waited %.1fs for %s", time.monotonic() - start, what)
                return last
            time.sleep(1.0)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")

    def query_condition(self, namespace: str, name: str, cond: str) -> str | None:
        obj = self.get("streamingquery", namespace, name)
        for c in ((obj or {}).get("status") or {}).get("conditions", []):
            if c["type"] == cond:
                return str(c["status"])
        return None

    def driver_pod(self, namespace: str, query: str) -> dict[str, Any] | None:
        pods = self.driver_pods(namespace, query)
        return pods[0] if pods else None

    def kill_driver(self, namespace: str, query: str) -> str:
        """kill -9 the driver's runtime process; returns the pod uid it killed in."""
        pod = self.driver_pod(namespace, query)
        assert pod is not None, "no driver pod"
        if self.kind == "kind":
            # the runtime is the container's PID 1, which ignores a SIGKILL sent from inside its
            # own PID namespace: kill it from the kind node (a container of the Docker engine)
            node = pod["spec"]["nodeName"]
            subprocess.run(["docker", "exec", node, "pkill", "-9", "-f", "sluice-runtime run"],
                           check=True, capture_output=True, timeout=60)
        else:
            self.signal_pod(pod, signal.SIGKILL)
        return str(pod["metadata"]["uid"])

    def driver_pods(self, namespace: str, query: str) -> list[dict[str, Any]]:
        selector = f"sluice.dev/query={query},app.kubernetes.io/component=driver"
        listed = self.read(f"/api/v1/namespaces/{namespace}/pods", [("labelSelector", selector)])
        return list((listed or {}).get("items", []))

    def lease_holder(self, namespace: str, query: str) -> str | None:
        """The pod holding the query's driver Lease (``<pod>/<incarnation>`` -> pod)."""
        lease = self.get("lease", namespace, f"{query}-driver")
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        return str(holder).split("/", 1)[0] if holder else None

    def active_pod(self, namespace: str, query: str) -> dict[str, Any] | None:
        """The driver pod that holds the Lease and labels itself active."""
        holder = self.lease_holder(namespace, query)
        for pod in self.driver_pods(namespace, query):
            labels = pod["metadata"].get("labels") or {}
            if pod["metadata"]["name"] == holder and labels.get("sluice.dev/role") == "active":
                return pod
        return None

    def runc_root(self, pod: dict[str, Any]) -> str:
        """The runc state root of the real node ``pod`` runs on."""
        node = pod["spec"].get("nodeName")
        assert node in self.runc_roots, f"{pod['metadata']['name']} is on {node}, none of {self.runc_roots}"
        return self.runc_roots[node]

    def signal_pod(self, pod: dict[str, Any], sig: int) -> None:
        """Send ``sig`` to a driver pod's runtime process (and its JVM) from outside the pod
        (the pod is read again first: its container may have restarted since)."""
        fresh = self.get("pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
        assert fresh is not None, f"pod {pod['metadata']['name']} is gone"
        status = fresh["status"]["containerStatuses"][0]
        assert status.get("state", {}).get("running"), f"container not running: {status}"
        if self.kind == "kind":
            cid = status["containerID"].split("://", 1)[1]
            node = pod["spec"]["nodeName"]
            template = "'{{.info.pid}}'"
            script = f"kill -{int(sig)} $(crictl inspect --output go-template --template {template} {cid})"
            subprocess.run(["docker", "exec", node, "sh", "-c", script], check=True, capture_output=True,
                           timeout=60)
        else:
            from tests.support.realnode import signal_container

            signal_container(self.runc_root(fresh), status["containerID"], sig)

    def signal_jvm(self, pod: dict[str, Any], sig: int) -> None:
        """Send ``sig`` (SIGSTOP, SIGCONT) to a driver pod's JVM alone, from outside the pod: the
        runtime's Python process goes on (its HTTP endpoint, the Lease renewals), as beside a JVM
        that hangs (a GC pause, a call that never returns)."""
        fresh = self.get("pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
        assert fresh is not None, f"pod {pod['metadata']['name']} is gone"
        status = fresh["status"]["containerStatuses"][0]
        assert status.get("state", {}).get("running"), f"container not running: {status}"
        if self.kind == "kind":
            cid = status["containerID"].split("://", 1)[1]
            template = "'{{.info.pid}}'"
            script = (f"kill -{int(sig)} $(pgrep -x java -P "
                      f"$(crictl inspect --output go-template --template {template} {cid}))")
            subprocess.run(["docker", "exec", pod["spec"]["nodeName"], "sh", "-c", script], check=True,
                           capture_output=True, timeout=60)
            return
        from tests.support.realnode import container_pids

        container = status["containerID"].split("://", 1)[-1]
        pids = container_pids(self.runc_root(fresh), container, init_only=False)
        jvms = [pid for pid in pids if _command(pid) == "java"]
        assert jvms, f"no JVM among the processes {pids} of pod {pod['metadata']['name']}"
        for pid in jvms:
            os.kill(pid, sig)

    def restart_count(self, namespace: str, query: str) -> int:
        pod = self.driver_pod(namespace, query)
        if not pod:
            return -1
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return int(statuses[0].get("restartCount", 0)) if statuses else -1

    def diagnostics(self, namespace: str) -> str:
        """What a failing test prints: the queries' status, the pods and the driver's last log lines."""
        parts = [
            self.kubectl("get", "sq,pods,pvc", "-n", namespace, "-o", "wide", check=False),
            self.kubectl("get", "sq", "-n", namespace, "-o", "jsonpath={.items[*].status.conditions}",
                         check=False),
        ]
        out = self.kubectl("get", "pods", "-n", namespace, "-o", "name", check=False)
        for pod in out.split():
            parts.append(f"--- logs of {pod} (last 40 lines)")
            parts.append(self.kubectl("logs", "-n", namespace, pod, "--tail=40", check=False))
            previous = self.kubectl("logs", "-n", namespace, pod, "--previous", "--tail=20", check=False)
            if previous.strip():
                parts.append(f"--- previous container of {pod} (last 20 lines)\n{previous}")
        parts.append(self.kubectl("get", "leases", "-n", namespace, "-o", "yaml", check=False))
        return "\n".join(parts)

    def new_namespace(self) -> str:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        self.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": self.namespace_labels}})
        return name

    def clear_namespace(self, namespace: str, timeout: float = 120.0) -> None:
        """Delete a test's queries without waiting out their drivers' drain, then its namespace.

        The operator's finalizer scales the drivers to zero and waits for their pods to end (a
        drain: the batch in flight committed, the Lease released) before it applies the deletion
        policy. A test that checks a deletion does it itself; after the test the drain only costs
        time, so the driver, backfill and executor pods are force-deleted as soon as nothing
        recreates them (every Deployment of the namespace at zero replicas or being deleted)."""
        self.kubectl("delete", "streamingqueries", "--all", "-n", namespace, "--wait=false", check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.kubectl("get", "streamingqueries", "-n", namespace, "-o", "name", check=False)
            if not left.strip():
                break
            out = self.kubectl("get", "deployments", "-n", namespace, "-o", "json", check=False)
            deployments = json.loads(out).get("items", []) if out.strip() else []
            if all(d["spec"].get("replicas", 1) == 0 or d["metadata"].get("deletionTimestamp")
                   for d in deployments):
                self.kubectl("delete", "pods", "-n", namespace, "--grace-period=0", "--force", "--wait=false",
                             "-l", "app.kubernetes.io/component in (driver,backfill,executor)", check=False)
            time.sleep(1.0)
        self.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
