"""Shared fixtures: real Kafka, real Kubernetes control plane, Spark connector jars.

Session-scoped components start once per test run on free loopback ports in a temporary state
directory and stop when the run ends. A component that cannot start fails the tests that need it
with a message naming the component and its log; nothing is skipped.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sluice_dev.platform import common
from sluice_runtime import classdata as runtime_classdata

from tests.support.jvm import TEST_JVM_OPTS
from tests.support.namespaces import fresh_namespace

REPO = Path(__file__).resolve().parent.parent

# Spark binds its driver to loopback in tests (not to the address the host name resolves to).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every Spark driver JVM the tests start (in the test process, or a runtime process it starts)
# compiles with C1 only: see tests/support/jvm.py.
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTS)


E2E_UNIT = "tests/e2e"
#: the folders whose tests form the e2e work unit: the e2e files and the real node's tests, which
#: both need the machine's one real node (its bridge and iptables chains), so never at once
NODE_FOLDERS = ("tests/e2e/", "tests/platform/")
#: the e2e module that starts a real platform of its own (two nodes), before the e2e cluster
OWN_PLATFORM_E2E = "tests/e2e/test_node_loss.py"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n``: a test file per work unit, except the e2e files and the real node's tests,
    which form one unit (the e2e cluster fixture is set up once per worker that runs them, and
    one real node runs per machine). No reordering by size: the collection order below decides,
    and it puts the e2e unit, the longest, first."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return E2E_UNIT if path.startswith(NODE_FOLDERS) else path

    config.option.loadscopereorder = False
    return Scheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """End-to-end tests run together, and every SparkSession of the run gets the connector jars.

    The e2e cluster (a cluster-wide operator and the real node) lives from the first e2e test to
    the end of the session (``tests/e2e`` is no package), so nothing else may run after them on
    their worker: they are sorted last in a plain run, after the real node's tests, and first
    under xdist (the real node's tests, then the e2e tests: one work unit), where the worker that
    takes them starts on them at once and so sets the suite's length as little as possible.

    Jars load only when the JVM starts, i.e. with the first SparkSession of the process, whichever
    test module creates it; PYSPARK_SUBMIT_ARGS reaches that first launch.
    """
    distributed = hasattr(config, "workerinput")

    def rank(item: pytest.Item) -> int:
        """The real node's tests before the e2e tests: their node (a package fixture) is gone when
        the e2e cluster starts, while the e2e cluster (``tests/e2e`` is no package: its fixture
        lives until the session ends) would still hold the machine's one real node. The node-loss
        module, with a two-node platform of its own (a module fixture), goes first among the e2e
        tests for the same reason."""
        if item.nodeid.startswith(NODE_FOLDERS[1]):
            return 0 if distributed else 1
        if item.nodeid.startswith(OWN_PLATFORM_E2E):
            return 1 if distributed else 2
        if item.get_closest_marker("e2e") is not None:
            return 2 if distributed else 3
        return 3 if distributed else 0

    items.sort(key=rank)  # stable: the rest keeps its order
    if not any(i.get_closest_marker("integration") or i.get_closest_marker("e2e") for i in items):
        return
    from sluice_dev.platform import sparkjars

    try:
        jars = ",".join(str(p) for p in sparkjars.jar_paths())
    except common.PlatformError:
        return  # the spark_jars fixture reports it, naming the log, in the tests that need it
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--jars {jars} pyspark-shell")
    use_class_data_archive()


def use_class_data_archive() -> None:
    """Every Spark driver JVM of the run maps the driver's class-data-sharing archive (written once
    per JDK and PySpark under the cache: ``sluice_dev.platform.classdata``), as the runtime image's
    drivers do: Spark's classes load about twice as fast (docs/runtime.md, "The driver's JVM").
    Options set by hand in ``SPARK_SUBMIT_OPTS`` that name an archive are left alone."""
    from sluice_dev.platform import classdata

    options = shlex.split(os.environ.get("SPARK_SUBMIT_OPTS", ""))
    if any(option.startswith(runtime_classdata.ARCHIVE_FLAGS) for option in options):
        return
    archive = classdata.provision(os.environ)
    os.environ["SPARK_SUBMIT_OPTS"] = shlex.join(
        [*options, *runtime_classdata.use_options(archive)])


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
