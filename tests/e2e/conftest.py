"""End-to-end fixtures: the operator from the chart on the real node (or on kind)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cluster import E2ECluster, OperatorLock
from sluice_dev.platform import common

from tests.support.shared import SharedState, run_dir, shared


@pytest.fixture(scope="package")
def cluster(request: pytest.FixtureRequest) -> Iterator[E2ECluster]:
    """A cluster with the operator running, from the first e2e test to the last one.

    ``E2E_CLUSTER=kind``: the current kubeconfig's kind cluster; otherwise the real node (root),
    one for all the xdist workers of the run (``tests/support/shared.py``): the first worker that
    needs it starts it, the others attach, and it stops when every worker is done. One real node
    runs per machine: it waits for the real node's tests (``tests/support/realnode.py``)."""
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

        lock = OperatorLock(run_dir(request.getfixturevalue("tmp_path_factory")) / "e2e-operator.lock")
        kind.operator_lock = lock

        def stop() -> None:
            lock.acquire()
            scale(0)

        def start() -> None:
            try:
                scale(1)
            finally:
                lock.release()

        kind.stop_operator, kind.start_operator = stop, start
        yield kind
        return
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    directory = run_dir(factory)
    state = SharedState(directory, "e2e-cluster")
    for info in shared(state, lambda: _real_node(factory.mktemp("e2e-node")), "the e2e cluster"):
        yield _cluster(info, directory / "e2e-operator.lock")


@contextmanager
def _real_node(state: Path) -> Iterator[dict[str, Any]]:
    """The real node with the project's images loaded and the operator installed by the chart
    (two replicas, leader election); what the workers need to reach it."""
    from sluice_dev.images import build
    from sluice_dev.platform import chart, node

    from tests.support.realnode import running_node

    with running_node(state) as real:
        try:
            node.load_images(state, build.by_reference(build.build([])))
            chart.install(real.kubeconfig, real.bin_dir, state / "operator" / "helm.log")
        except common.PlatformError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield {"kubeconfig": str(real.kubeconfig), "bin_dir": str(real.bin_dir), "bootstrap": real.kafka,
               "runc_root": str(Path(real.info["runc_root"]) / "k8s.io")}


def _cluster(info: dict[str, Any], operator_lock: Path) -> E2ECluster:
    """The shared cluster as one worker's tests see it (test namespaces enforce ``restricted``).
    Stopping the operator takes the run's operator lock until it is started again (a test of
    another worker that stops it, or upgrades the chart, waits meanwhile)."""
    from sluice_dev.platform import chart

    kubeconfig, bin_dir = Path(info["kubeconfig"]), Path(info["bin_dir"])
    lock = OperatorLock(operator_lock)

    def stop() -> None:
        lock.acquire()
        chart.scale(kubeconfig, bin_dir, 0)

    def start() -> None:
        try:
            chart.scale(kubeconfig, bin_dir, 2)
        finally:
            lock.release()

    return E2ECluster(
        kubeconfig=kubeconfig, kubectl_bin=bin_dir / "kubectl", bootstrap=str(info["bootstrap"]),
        kind="node", runc_root=str(info["runc_root"]), namespace_labels=dict(chart.RESTRICTED),
        stop_operator=stop, start_operator=start, operator_lock=lock,
    )


@pytest.fixture
def ns(cluster: E2ECluster) -> Iterator[str]:
    """A fresh namespace per test; its queries and the namespace are deleted afterwards."""
    name = cluster.new_namespace()
    yield name
    cluster.kubectl("delete", "streamingqueries", "--all", "-n", name, "--wait=true", "--timeout=120s",
                    check=False)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
