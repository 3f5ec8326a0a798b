"""Shared fixtures: real Kafka, real Kubernetes control plane, Spark connector jars.

Session-scoped components start once per test run on free loopback ports in a temporary state
directory and stop when the run ends. A component that cannot start fails the tests that need it
with a message naming the component and its log; nothing is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sluice_dev.platform import common

from tests.support.namespaces import fresh_namespace

REPO = Path(__file__).resolve().parent.parent

# Spark binds its driver to loopback in tests (not to the address the host name resolves to).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


#: the folders whose tests need the machine's one real node (its bridge and iptables chains)
NODE_FOLDERS = ("tests/e2e/", "tests/platform/")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n``: a test file per work unit, the real node's tests one unit, handed out in the
    order of ``pytest_collection_modifyitems`` (``tests/support/scheduling.py``): an e2e file
    never starts on one worker while the real node's tests run on another (the e2e files share
    one cluster on the real node, ``tests/e2e/shared.py``, and one real node runs per machine).
    A worker gets its next unit when it starts the last test of the current one (xdist's default
    takes more ahead, which leaves one worker with two long e2e files and the other idle)."""
    from xdist.scheduler import LoadScopeScheduling

    from tests.support.scheduling import NODE_UNIT, pick, unit_of

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _node_tests_elsewhere(self, node: Any) -> bool:
            for other, work in self.assigned_work.items():
                unit = work.get(NODE_UNIT)
                if other is not node and unit is not None and not all(unit.values()):
                    return True
            return False

        def _assign_work_unit(self, node: Any) -> None:
            unit = pick(list(self.workqueue), self._node_tests_elsewhere(node))
            if unit is None:
                return  # nothing may start here now: asked again when another worker completes a test
            self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work.get(node, {})) > 1:
                return
            self._assign_work_unit(node)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            for other in self.nodes:  # a worker left waiting may start now
                if other is not node:
                    self._reschedule(other)

    config.option.loadscopereorder = False
    return Scheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order of the tests, and every SparkSession of the run gets the connector jars.

    Under xdist (``tests/support/scheduling.py``): the real node's tests, the e2e files longest
    first, then the rest. In a plain run: the unit and integration tests, the real node's tests
    (their node, a package fixture, is gone when the e2e cluster starts), then the e2e tests (their
    cluster lives until the session ends).

    Jars load only when the JVM starts, i.e. with the first SparkSession of the process, whichever
    test module creates it; PYSPARK_SUBMIT_ARGS reaches that first launch.
    """
    from tests.support import scheduling

    def plain(item: pytest.Item) -> int:
        if item.nodeid.startswith(NODE_FOLDERS[1]):
            return 1
        if item.get_closest_marker("e2e") is not None:
            return 2
        return 0

    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: scheduling.rank(item.nodeid))
    else:
        items.sort(key=plain)  # stable: the rest keeps its order
    if not any(i.get_closest_marker("integration") or i.get_closest_marker("e2e") for i in items):
        return
    from sluice_dev.platform import sparkjars

    try:
        jars = ",".join(str(p) for p in sparkjars.jar_paths())
    except common.PlatformError:
        return  # the spark_jars fixture reports it, naming the log, in the tests that need it
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--jars {jars} pyspark-shell")


@pytest.fixture(scope="session")
def platform_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """State directory of the test run's platform (pid files, logs, data)."""
    return tmp_path_factory.mktemp("platform")


@pytest.fixture(scope="session")
def kafka(platform_state: Path) -> Iterator[str]:
    """Bootstrap address ``127.0.0.1:PORT`` of a real single-node KRaft broker."""
    from sluice_dev.platform import kafka as kafka_component

    kafka_component.provision()
    try:
        started = kafka_component.start(platform_state)
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield started.env["SLUICE_KAFKA_BOOTSTRAP"]
    finally:
        kafka_component.stop(platform_state)


@pytest.fixture(scope="session")
def spark_jars() -> list[Path]:
    """Paths of the cached Spark Kafka connector jars (resolved from Maven Central once)."""
    from sluice_dev.platform import sparkjars

    try:
        return sparkjars.jar_paths()
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)


@dataclass
class Kube:
    kubeconfig: Path
    api: Any  # kubernetes.client.ApiClient
    bin_dir: Path
    server: str

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}",
        }


@pytest.fixture(scope="session")
def kube(platform_state: Path) -> Iterator[Kube]:
    """A real etcd + kube-apiserver + controller-manager + scheduler on loopback."""
    from kubernetes import client, config
    from sluice_dev.platform import kube as kube_component

    try:
        bin_dir = kube_component.provision()
        started = kube_component.start(platform_state)
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        kubeconfig = Path(started.env["KUBECONFIG"])
        api = config.new_client_from_config(config_file=str(kubeconfig))
        yield Kube(kubeconfig=kubeconfig, api=api, bin_dir=bin_dir, server=started.info["server"])
        api.close()
        del client
    finally:
        kube_component.stop(platform_state)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    with fresh_namespace(kube.api, "t") as name:
        yield name
