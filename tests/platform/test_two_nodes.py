"""Two real nodes: ``sluice-node`` on the host and ``sluice-node-2`` in a network namespace of its
own (``sluice_dev.platform.node.topology``).

Both register Ready with their pod CIDRs; pods reach each other across the nodes, directly and
through a ClusterIP Service; a pod on node 2 reaches Kafka, the API server and cluster DNS;
``kubectl logs/exec`` work for it; a local volume is pinned to node 1. Then the power: node 2
powered off turns NotReady within the node-monitor grace period, its pod unreachable, nothing of
it left on the machine, and powered on it is Ready and serves again; node 1 powered off keeps the
bridge (Kafka still answers) and node 2. The fixture is this module's own (one real platform per
machine: ``real_node`` of ``test_node.py`` is stopped before it starts); tests run in file order
and the last one stops the nodes.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sluice_dev.platform import common, node
from sluice_dev.platform.node import lifecycle, teardown, topology

from tests.support import waiting
from tests.support.namespaces import fresh_namespace
from tests.support.realnode import Node, pod_ready, running_node, succeeded_logs

eventually = partial(waiting.eventually, timeout=120.0, interval=0.5, retry_on=(ApiException, OSError))
NODE_1, NODE_2 = topology.node_spec(1), topology.node_spec(2)
SA_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
#: NotReady at the latest this long after the power is cut: the grace period, the monitor period
#: (2 s), the last lease renewal (every 5 s) and slack for a loaded machine
NOT_READY_WITHIN = 20.0 + 2.0 + 5.0 + 15.0


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with running_node(tmp_path_factory.mktemp("twonodes"), nodes=2) as started:
        yield started


@pytest.fixture
def namespace(two_nodes: Node) -> Iterator[str]:
    with fresh_namespace(two_nodes.api, "t") as name:
        yield name


def _core(two_nodes: Node) -> Any:
    return client.CoreV1Api(two_nodes.api)


def _on(node_name: str) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": node_name}, "terminationGracePeriodSeconds": 2}


def _server(name: str, node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            **_on(node_name),
            "containers": [{
                "name": "web", "image": node.TEST_IMAGE, "imagePullPolicy": "Never",
                "args": ["serve", ":8080"],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
            }],
        },
    }


def _client(name: str, node_name: str, *args: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            **_on(node_name), "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": node.TEST_IMAGE, "imagePullPolicy": "Never", "args": list(args)}
            ],
        },
    }


def _service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def _serve(core: Any, namespace: str, name: str, node_name: str) -> Any:
    core.create_namespaced_pod(namespace, _server(name, node_name))
    core.create_namespaced_service(namespace, _service(name))
    pod = eventually(lambda: pod_ready(core, namespace, name), what=f"{name} on {node_name} is ready")
    assert pod.spec.node_name == node_name
    return pod


def _run(core: Any, namespace: str, name: str, node_name: str, *args: str) -> str:
    core.create_namespaced_pod(namespace, _client(name, node_name, *args))
    logs = eventually(partial(succeeded_logs, core, namespace, name), what=f"{name} on {node_name} succeeds")
    assert core.read_namespaced_pod(name, namespace).spec.node_name == node_name
    return logs


def _http(url: str, timeout: float = 3.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode())


def _ready_condition(core: Any, name: str) -> str:
    conditions = {c.type: c.status for c in core.read_node(name).status.conditions or []}
    return str(conditions.get("Ready"))


def test_both_nodes_register_ready_with_their_pod_cidrs(two_nodes: Node) -> None:
    core = _core(two_nodes)
    for spec in (NODE_1, NODE_2):
        found = core.read_node(spec.name)
        assert _ready_condition(core, spec.name) == "True"
        assert {a.type: a.address for a in found.status.addresses}["InternalIP"] == spec.node_ip
        assert found.spec.pod_cidr == spec.pod_subnet
    assert (NODE_2.node_ip, NODE_2.pod_subnet) == ("10.242.0.2", "10.242.1.0/24")
    listed = subprocess.run(
        [str(two_nodes.bin_dir / "kubectl"), "get", "nodes", "--no-headers"], env=two_nodes.env(),
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    assert sorted(line.split()[:2] for line in listed.splitlines()) == [
        ["sluice-node", "Ready"], ["sluice-node-2", "Ready"]
    ]


def test_pods_reach_each_other_across_nodes_directly_and_through_services(
    two_nodes: Node, namespace: str
) -> None:
    core = _core(two_nodes)
    one = _serve(core, namespace, "one", NODE_1.name)
    two = _serve(core, namespace, "two", NODE_2.name)
    assert one.status.pod_ip.startswith("10.242.0.") and int(one.status.pod_ip.rsplit(".", 1)[1]) >= 10
    assert two.status.pod_ip.startswith("10.242.1.")
    ips = {name: core.read_namespaced_service(name, namespace).spec.cluster_ip for name in ("one", "two")}
    get = partial(_run, core, namespace)
    # node 1 -> node 2 and back, pod IP and ClusterIP
    assert get("c12", NODE_1.name, "get", f"http://{two.status.pod_ip}:8080/") == "hello from two\n"
    assert get("c12s", NODE_1.name, "get", f"http://{ips['two']}/") == "hello from two\n"
    assert get("c21", NODE_2.name, "get", f"http://{one.status.pod_ip}:8080/") == "hello from one\n"
    assert get("c21s", NODE_2.name, "get", f"http://{ips['one']}/") == "hello from one\n"
    # node 2 -> node 2 through a Service, by its DNS name (CoreDNS runs on node 1)
    assert _run(core, namespace, "c22", NODE_2.name, "get", "http://two/") == "hello from two\n"
    # and the host reaches node 2's pods (its route via 10.242.0.2)
    assert _http(f"http://{two.status.pod_ip}:8080/") == "hello from two\n"


def test_a_pod_on_node_2_reaches_kafka_and_the_api_server(two_nodes: Node, namespace: str) -> None:
    core = _core(two_nodes)
    logs = _run(core, namespace, "kafka", NODE_2.name, "kafka", two_nodes.kafka)
    assert logs == f"broker 1 at {two_nodes.kafka}\n"
    eventually(lambda: core.read_namespaced_service_account("default", namespace), what="the default SA")
    assert _run(core, namespace, "api", NODE_2.name, "get", "https://10.0.0.1/readyz", SA_CA).strip() == "ok"


def test_kubectl_logs_and_exec_reach_a_pod_on_node_2(two_nodes: Node, namespace: str) -> None:
    core = _core(two_nodes)
    _serve(core, namespace, "web", NODE_2.name)
    kubectl = [str(two_nodes.bin_dir / "kubectl"), "-n", namespace]
    exec_ = subprocess.run(
        [*kubectl, "exec", "web", "--", "/nodetest", "get", "http://127.0.0.1:8080/"], env=two_nodes.env(),
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert (exec_.returncode, exec_.stdout) == (0, "hello from web\n"), exec_.stderr
    logs = subprocess.run([*kubectl, "logs", "web"], env=two_nodes.env(), capture_output=True, text=True,
                          check=False, timeout=60)
    assert logs.returncode == 0, logs.stderr


def test_a_local_volume_is_pinned_to_node_1(two_nodes: Node, namespace: str) -> None:
    core = _core(two_nodes)
    core.create_namespaced_persistent_volume_claim(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    })

    def bound() -> Any:
        claim = core.read_namespaced_persistent_volume_claim("data", namespace)
        return claim.spec.volume_name if claim.status.phase == "Bound" else None

    pv = core.read_persistent_volume(eventually(bound, what="the claim is bound"))
    (term,) = pv.spec.node_affinity.required.node_selector_terms
    assert [(e.key, e.values) for e in term.match_expressions] == [("kubernetes.io/hostname", [NODE_1.name])]
    pod = _client("user", NODE_1.name, "serve")
    del pod["spec"]["nodeSelector"]  # the scheduler follows the volume
    pod["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "d", "mountPath": "/data"}]
    core.create_namespaced_pod(namespace, pod)
    scheduled = eventually(
        lambda: core.read_namespaced_pod("user", namespace).spec.node_name, what="the pod is scheduled"
    )
    assert scheduled == NODE_1.name


def _not_ready_after(core: Any, name: str, cut: float) -> float:
    eventually(lambda: _ready_condition(core, name) != "True", what=f"{name} is NotReady", timeout=90.0)
    return time.monotonic() - cut


def test_node_2_powered_off_goes_not_ready_and_comes_back(two_nodes: Node, namespace: str) -> None:
    core = _core(two_nodes)
    web = _serve(core, namespace, "web", NODE_2.name)
    url = f"http://{web.status.pod_ip}:8080/"
    assert _http(url) == "hello from web\n"
    lay = lifecycle.layout(two_nodes.state_dir, NODE_2)
    assert teardown.processes(lay), "node 2 runs processes"
    cut = time.monotonic()
    two_nodes.power_off(NODE_2.name)
    # everything of node 2 is gone from the machine at once: processes, mounts, its namespace
    assert teardown.isolated_leftovers(
        lay, host_link=NODE_2.host_veth, route=topology.host_route_command("del", NODE_2)
    ) == []
    with pytest.raises(OSError):
        _http(url, timeout=2.0)
    delay = _not_ready_after(core, NODE_2.name, cut)
    print(f"sluice-node-2 NotReady {delay:.1f}s after the power was cut")
    assert delay < NOT_READY_WITHIN
    assert _ready_condition(core, NODE_1.name) == "True"
    began = time.monotonic()
    two_nodes.power_on(NODE_2.name)
    print(f"sluice-node-2 Ready again {time.monotonic() - began:.1f}s after power_on")
    assert _ready_condition(core, NODE_2.name) == "True"
    # the kubelet runs the pod again in a new sandbox (the old one died with the power; its
    # address may be another: host-local IPAM kept the old one's allocation on disk)
    def answers() -> str:
        pod = core.read_namespaced_pod("web", namespace)
        ready = {c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True"
        return _http(f"http://{pod.status.pod_ip}:8080/") if ready and pod.status.pod_ip else ""

    assert eventually(answers, what="web runs and answers again on node 2") == "hello from web\n"


def test_node_1_powered_off_keeps_the_bridge_and_node_2(two_nodes: Node, namespace: str) -> None:
    core = _core(two_nodes)
    web = _serve(core, namespace, "web", NODE_2.name)
    cut = time.monotonic()
    two_nodes.power_off(NODE_1.name)
    lay = lifecycle.layout(two_nodes.state_dir)
    assert teardown.processes(lay, provisioner=False) == []
    assert teardown.mounts_under(lay.dir) == []
    assert teardown.cni_veths() == []
    host, _, port = two_nodes.kafka.rpartition(":")
    assert common.port_open(host, int(port))  # the bridge and its address stay
    assert _http(f"http://{web.status.pod_ip}:8080/") == "hello from web\n"  # node 2 is untouched
    delay = _not_ready_after(core, NODE_1.name, cut)
    print(f"sluice-node NotReady {delay:.1f}s after the power was cut")
    assert delay < NOT_READY_WITHIN
    assert _ready_condition(core, NODE_2.name) == "True"
    two_nodes.power_on(NODE_1.name)
    assert _ready_condition(core, NODE_1.name) == "True"
    after = _run(core, namespace, "after", NODE_1.name, "get", f"http://{web.status.pod_ip}:8080/")
    assert after == "hello from web\n"


def test_stopped_nodes_leave_nothing_behind(two_nodes: Node) -> None:
    # not the ``namespace`` fixture: once the nodes stop, the bridge and the API server's address
    # are gone, and deleting the namespace would hang
    core = _core(two_nodes)
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    _serve(core, namespace, "one", NODE_1.name)
    _serve(core, namespace, "two", NODE_2.name)
    assert teardown.mounts_under(lifecycle.layout(two_nodes.state_dir, NODE_2).dir)
    node.stop(two_nodes.state_dir)
    assert node.leftovers(two_nodes.state_dir) == []
    assert not Path(f"/sys/class/net/{NODE_2.host_veth}").exists()
