"""The real node: a kubelet with containerd + runc, a CNI bridge and kube-proxy.

Pods run from a locally built image, readiness probes pass, ClusterIP Services (the
``kubernetes`` one included) work from the host and from pods, Kafka answers pods at the address
it advertises, a container killed with SIGKILL
through runc is restarted by the kubelet, a crashed node recovers on the next start, and a stopped
node leaves nothing on the machine. (The project's images under the kubelet in a namespace that
enforces the restricted Pod Security Standard: tests/e2e/test_helm.py, on the e2e cluster, where
they are loaded already.) Tests run in file order; the last one stops the node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sluice_dev.platform import common, node
from sluice_dev.platform.node import config, lifecycle, teardown

from tests.platform.conftest import Node
from tests.support import waiting
from tests.support.realnode import pod_ready, succeeded_logs

eventually = partial(waiting.eventually, timeout=120.0, interval=0.5, retry_on=(ApiException, OSError))
SA_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


def _core(real_node: Node) -> Any:
    """The core API, untyped: the tests read optional status fields that they wait for."""
    return client.CoreV1Api(real_node.api)


def _server_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "web",
                "image": node.TEST_IMAGE,
                "imagePullPolicy": "Never",
                "args": ["serve", ":8080"],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
            }],
        },
    }


def _client_pod(name: str, *args: str, mode: str = "get") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "get", "image": node.TEST_IMAGE, "imagePullPolicy": "Never", "args": [mode, *args],
            }],
        },
    }


def _serve(core: Any, namespace: str) -> tuple[Any, Any]:
    """A ready test server pod and a ClusterIP Service in front of it."""
    core.create_namespaced_pod(namespace, _server_pod("web", {"app": "web"}))
    service = core.create_namespaced_service(namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    })
    pod = eventually(lambda: pod_ready(core, namespace, "web"), what="the web pod passes its readiness probe")
    return pod, service


def _answer(logs: str) -> str:
    """The client's answer: its last line. A Service's rules reach kube-proxy a moment after the pod is
    ready, so the client may first print ``retrying ...`` lines (only those) while it is refused."""
    *before, last = logs.splitlines()
    assert all(line.startswith("retrying ") for line in before), logs
    return last


def _http(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as response:
        return str(response.read().decode())


def test_node_registers_ready(real_node: Node) -> None:
    found = _core(real_node).read_node(node.NODE_NAME)
    conditions = {c.type: c.status for c in found.status.conditions}
    assert conditions["Ready"] == "True"
    addresses = {a.type: a.address for a in found.status.addresses}
    assert addresses["InternalIP"] == node.node_ip()
    assert found.status.node_info.container_runtime_version.startswith("containerd://")
    # the pods, as a group, weigh as a node of the machine's size against the host's processes
    shares = teardown.CGROUP_ROOT / "cpu" / config.CONTAINERD_NAMESPACE / "cpu.shares"
    assert shares.read_text().strip() == str(teardown.CPU_SHARES_PER_CPU * (os.cpu_count() or 1))


def test_pod_runs_from_a_local_image_and_passes_its_readiness_probe(
    real_node: Node, node_namespace: str
) -> None:
    core = _core(real_node)
    pod, _ = _serve(core, node_namespace)
    assert pod.status.pod_ip.startswith(node.node_ip().rsplit(".", 1)[0] + ".")
    assert _http(f"http://{pod.status.pod_ip}:8080/") == "hello from web\n"


def test_cluster_ip_service_reaches_the_pod_from_the_host_and_from_a_pod(
    real_node: Node, node_namespace: str
) -> None:
    core = _core(real_node)
    _, service = _serve(core, node_namespace)
    url = f"http://{service.spec.cluster_ip}/"
    assert eventually(lambda: _http(url), what="the Service answers from the host") == "hello from web\n"
    core.create_namespaced_pod(node_namespace, _client_pod("client", url))
    logs = eventually(lambda: succeeded_logs(core, node_namespace, "client"), what="the client pod succeeds")
    assert _answer(logs) == "hello from web"


def test_kubernetes_service_reaches_the_api_server_from_a_pod(
    real_node: Node, node_namespace: str
) -> None:
    core = _core(real_node)
    eventually(
        lambda: core.read_namespaced_service_account("default", node_namespace),
        what="the default ServiceAccount exists",
    )
    core.create_namespaced_pod(node_namespace, _client_pod("api", "https://10.0.0.1/readyz", SA_CA))
    logs = eventually(
        lambda: succeeded_logs(core, node_namespace, "api"), what="the API client pod succeeds"
    )
    assert logs.strip() == "ok"


def test_kafka_answers_pods_and_the_host_at_the_address_it_advertises(
    real_node: Node, node_namespace: str
) -> None:
    from confluent_kafka.admin import AdminClient

    assert real_node.kafka.startswith(f"{node.node_ip()}:")  # the bridge's address, not loopback
    core = _core(real_node)
    # the Kafka protocol from a pod: metadata from the bootstrap, then from the advertised broker
    core.create_namespaced_pod(node_namespace, _client_pod("kafka", real_node.kafka, mode="kafka"))
    logs = eventually(
        lambda: succeeded_logs(core, node_namespace, "kafka"), what="the Kafka client pod succeeds"
    )
    assert logs == f"broker 1 at {real_node.kafka}\n"
    admin = AdminClient({"bootstrap.servers": real_node.kafka})
    brokers = admin.list_topics(timeout=10).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [real_node.kafka]


def test_cluster_dns_resolves_service_names_in_pods(real_node: Node, node_namespace: str) -> None:
    core = _core(real_node)
    _serve(core, node_namespace)
    for name, url in (("short", "http://web/"), ("full", f"http://web.{node_namespace}.svc.cluster.local/")):
        core.create_namespaced_pod(node_namespace, _client_pod(name, url))
        logs = eventually(
            partial(succeeded_logs, core, node_namespace, name), what=f"the client pod reaches {url} by name"
        )
        assert _answer(logs) == "hello from web"


def test_container_killed_with_sigkill_is_restarted(real_node: Node, node_namespace: str) -> None:
    core = _core(real_node)
    pod, _ = _serve(core, node_namespace)
    container_id = pod.status.container_statuses[0].container_id.removeprefix("containerd://")
    runc_root = Path(real_node.info["runc_root"]) / "k8s.io"
    subprocess.run(["runc", f"--root={runc_root}", "kill", container_id, "KILL"], check=True)

    def restarted() -> Any:
        current = pod_ready(core, node_namespace, "web")
        return current if current and current.status.container_statuses[0].restart_count >= 1 else None

    current = eventually(restarted, what="the kubelet restarts the killed container and it is ready again")
    assert current.status.container_statuses[0].container_id.removeprefix("containerd://") != container_id
    assert _http(f"http://{current.status.pod_ip}:8080/") == "hello from web\n"


def test_crashed_node_recovers_on_the_next_start(real_node: Node, node_namespace: str) -> None:
    core = _core(real_node)
    before, _ = _serve(core, node_namespace)
    old_id = before.status.container_statuses[0].container_id
    lay = lifecycle.layout(real_node.state_dir)
    containers = teardown.container_pids(lay)
    for pid in teardown.processes(lay):  # containerd, shims, kubelet, kube-proxy: not the containers
        if pid not in containers:
            os.kill(pid, signal.SIGKILL)
    time.sleep(1)
    try:
        node.start(real_node.state_dir)
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)

    def running_again() -> Any:
        pod = pod_ready(core, node_namespace, "web")
        return pod if pod and pod.status.container_statuses[0].container_id != old_id else None

    pod = eventually(running_again, what="the pod runs again (a new container) on the restarted node")
    url = f"http://{pod.status.pod_ip}:8080/"
    assert eventually(lambda: _http(url), what="the new container answers") == "hello from web\n"
    # the restart kept the bridge: Kafka's pod listener (bound to the node IP) still answers
    host, _, port = real_node.kafka.rpartition(":")
    assert common.port_open(host, int(port))


def test_stopped_node_leaves_nothing_behind(real_node: Node) -> None:
    # a pod with a projected token volume, shm and a network namespace at stop time
    core = _core(real_node)
    namespace = f"n-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    _serve(core, namespace)
    assert teardown.mounts_under(lifecycle.layout(real_node.state_dir).dir), "expected the pod's mounts"
    node.stop(real_node.state_dir)
    assert node.leftovers(real_node.state_dir) == []
