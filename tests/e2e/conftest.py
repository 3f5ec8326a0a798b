"""End-to-end fixtures: the operator from the chart on the real node (or on kind)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster import E2ECluster
from sluice_dev.platform import common


@pytest.fixture(scope="package")
def cluster(request: pytest.FixtureRequest) -> Iterator[E2ECluster]:
    """A cluster with the operator running, from the first e2e test to the last one.

    ``E2E_CLUSTER=kind``: the current kubeconfig's kind cluster; otherwise the real node (root).
    The e2e tests run together (``tests/conftest.py`` sorts them so), the real node's tests in
    the same xdist work unit: one real node runs per machine. Leaving the package stops it."""
    if os.environ.get("E2E_CLUSTER", "node") == "kind":
        kind = E2ECluster(
            kubeconfig=Path(os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config"))),
            kubectl_bin=Path(os.environ.get("KUBECTL", "kubectl")),
            bootstrap=os.environ["E2E_KAFKA_BOOTSTRAP"],
            kind="kind",
        )

        def scale(replicas: int) -> None:
            kind.kubectl("scale", "deployment", "-n", "sluice-system", "-l", "app.kubernetes.io/name=sluice",
                         f"--replicas={replicas}")

        def tag(image: str, alias: str) -> None:
            for node_name in kind.kubectl("get", "nodes", "-o", "name").split():
                names = (f"docker.io/library/{image}", f"docker.io/library/{alias}")
                node_id = node_name.removeprefix("node/")
                subprocess.run(["docker", "exec", node_id, "ctr", "-n", "k8s.io", "images", "tag", "--force",
                                *names], check=True, capture_output=True, timeout=60)

        def move_apiserver_manifest(source: str, target: str) -> None:
            """The kubelet of kind's control-plane node stops (starts) the static kube-apiserver pod
            when its manifest leaves (comes back to) the manifests directory."""
            nodes = subprocess.run(["docker", "ps", "--filter", "label=io.x-k8s.kind.role=control-plane",
                                    "--format", "{{.Names}}"], check=True, capture_output=True, text=True,
                                   timeout=60).stdout  # not kubectl: the API server may be down
            node_id = nodes.split()[0]
            subprocess.run(["docker", "exec", node_id, "mv", source, target], check=True, capture_output=True,
                           timeout=60)

        manifest = "/etc/kubernetes/manifests/kube-apiserver.yaml"
        parked = "/etc/kubernetes/kube-apiserver.yaml"

        def start_apiserver() -> None:
            move_apiserver_manifest(parked, manifest)
            kind.wait_for("the API server", lambda: kind.kubectl_result("get", "--raw", "/readyz").returncode
                          == 0, 180)

        kind.stop_operator = lambda: scale(0)
        kind.start_operator = lambda: scale(1)
        kind.tag_image = tag
        kind.stop_apiserver = lambda: move_apiserver_manifest(manifest, parked)
        kind.start_apiserver = start_apiserver
        yield kind
        return
    yield from _on_the_real_node(request.getfixturevalue("tmp_path_factory").mktemp("e2e-node"))


def _on_the_real_node(state: Path, nodes: int = 1) -> Iterator[E2ECluster]:
    """The real node (``nodes=2``: and ``sluice-node-2``) with the project's images loaded and
    the operator installed by the chart (two replicas, leader election); test namespaces enforce
    ``restricted``."""
    from sluice_dev.images import build
    from sluice_dev.platform import chart, kube, node

    from tests.support.realnode import running_node

    with running_node(state, nodes=nodes) as real:
        try:
            node.load_images(state, build.by_reference(build.build([])))
            chart.install(real.kubeconfig, real.bin_dir, state / "operator" / "helm.log")
        except common.PlatformError as exc:
            pytest.fail(str(exc), pytrace=False)
        apiserver: list[str] = []
        server = yaml.safe_load(real.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        prefixes = ["", *(f"node_{index}_" for index in range(2, nodes + 1))]
        runc_roots = {real.info[f"{p}node"]: str(Path(real.info[f"{p}runc_root"]) / "k8s.io")
                      for p in prefixes}

        def stop_apiserver() -> None:
            apiserver[:] = kube.stop_apiserver(state)

        def power_on(name: str) -> None:
            node.power_on(state, name)

        yield E2ECluster(
            stop_apiserver=stop_apiserver,
            start_apiserver=lambda: kube.start_apiserver(state, apiserver, server),
            kubeconfig=real.kubeconfig, kubectl_bin=real.bin_dir / "kubectl", bootstrap=real.kafka,
            kind="node", runc_roots=runc_roots,
            namespace_labels=dict(chart.RESTRICTED),
            stop_operator=lambda: chart.scale(real.kubeconfig, real.bin_dir, 0),
            start_operator=lambda: chart.scale(real.kubeconfig, real.bin_dir, 2),
            tag_image=lambda image, alias: node.tag_image(state, image, alias),
            power_off=lambda name: node.power_off(state, name),
            power_on=power_on,
        )


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    """The real platform on two nodes, ``sluice-node`` and ``sluice-node-2``, with the operator, for
    the node-loss tests of one module: one real platform runs per machine, so it starts and stops
    before the ``cluster`` of the other e2e tests (``tests/conftest.py`` sorts the node-loss
    module first among them)."""
    if os.environ.get("E2E_CLUSTER", "node") == "kind":
        pytest.fail("the node-loss tests power nodes off and on: they run on the local platform's two "
                    "nodes (E2E_CLUSTER=node), not on kind", pytrace=False)
    yield from _on_the_real_node(tmp_path_factory.mktemp("e2e-two-nodes"), nodes=2)


@pytest.fixture
def ns(cluster: E2ECluster) -> Iterator[str]:
    """A fresh namespace per test; its queries and the namespace are deleted afterwards."""
    yield from _namespace(cluster)


@pytest.fixture
def two_nodes_ns(two_nodes: E2ECluster) -> Iterator[str]:
    """``ns`` on the two-node platform."""
    yield from _namespace(two_nodes)


def _namespace(cluster: E2ECluster) -> Iterator[str]:
    name = cluster.new_namespace()
    yield name
    cluster.clear_namespace(name)
