"""End to end: the chart as a cluster admin runs it, with a query running: ``helm test`` passes,
and ``helm upgrade`` of the operator (its pods roll) leaves the running driver alone (same pod,
no container restart, output going on) while the new operator pods reconcile. The project's
images, as loaded into the cluster, run as their own non-root user with a read-only root in a
namespace that enforces the ``restricted`` Pod Security Standard.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
import sluice
from cluster import E2ECluster
from sluice.operator.builders.context import RUN_AS_USER
from sluice.operator.builders.driver import CONTAINER_SECURITY_CONTEXT, pod_security_context
from sluice_dev.platform.chart import CHART, NAMESPACE, RELEASE
from test_queries import READY_TIMEOUT, cluster_doc, consume, create_topics, produce, query_doc, wait_ready

from tests.support import helm as support_helm

pytestmark = pytest.mark.e2e


def helm(cluster: E2ECluster, *args: str) -> subprocess.CompletedProcess[str]:
    return support_helm.helm(*args, env={"KUBECONFIG": str(cluster.kubeconfig)}, timeout=400)


def operator_pods(cluster: E2ECluster) -> set[str]:
    out = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator",
                          "-o", "jsonpath={.items[*].metadata.name}")
    return set(out.split())


def test_helm_test_passes_and_an_operator_upgrade_leaves_the_driver_running(
    cluster: E2ECluster, ns: str
) -> None:
    if cluster.kind != "node":
        pytest.fail("the chart's release is checked on the real node (E2E_CLUSTER unset or node)")
    src, out = f"{ns}-in", f"{ns}-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap), query_doc(ns, "echo", {
        "sources": [{"name": "events", "topic": src, "schema": [{"name": "id", "type": "int"}]}],
        "sql": "SELECT id FROM events",
        "sink": {"topic": out, "outputMode": "append"},
        "trigger": {"processingTime": "1 second"},
    }))
    produce(cluster.bootstrap, src, [{"id": i} for i in range(5)])
    assert len(consume(cluster.bootstrap, out, 5, READY_TIMEOUT)) == 5, cluster.diagnostics(ns)
    wait_ready(cluster, ns, "echo")
    driver = cluster.driver_pod(ns, "echo")
    assert driver is not None

    tested = helm(cluster, "test", RELEASE, "-n", NAMESPACE, "--timeout", "120s")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert re.search(r"Phase:\s+Succeeded", tested.stdout), tested.stdout

    before = operator_pods(cluster)
    upgraded = helm(cluster, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                    "--set-string", f"podAnnotations.sluice\\.dev/upgraded={int(time.time())}", "--wait",
                    "--timeout", "300s")
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    cluster.wait_for("the old operator pods gone", lambda: not (operator_pods(cluster) & before), 180)

    # the driver was never touched by the operator's upgrade, and the output goes on
    after = cluster.get("pod", ns, driver["metadata"]["name"])
    assert after is not None, cluster.diagnostics(ns)
    assert after["metadata"]["uid"] == driver["metadata"]["uid"], cluster.diagnostics(ns)
    statuses = after["status"]["containerStatuses"]
    assert statuses[0]["restartCount"] == driver["status"]["containerStatuses"][0]["restartCount"]
    produce(cluster.bootstrap, src, [{"id": i} for i in range(5, 10)])
    assert len(consume(cluster.bootstrap, out, 10, READY_TIMEOUT)) == 10, cluster.diagnostics(ns)
    # and the new operator reconciles (an edit of the clean-up policy, which moves no driver)
    cluster.kubectl("patch", "sq", "echo", "-n", ns, "--type=merge", "-p",
                    '{"spec":{"cleanup":{"retention":"2h"}}}')

    def observed() -> bool:
        obj = cluster.get("streamingquery", ns, "echo") or {}
        return bool((obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"])

    cluster.wait_for("the new operator to reconcile the edit", observed, 180)
    assert cluster.query_condition(ns, "echo", "Ready") == "True"


def test_the_project_s_images_run_as_their_own_user_read_only_in_a_restricted_namespace(
    cluster: E2ECluster, ns: str
) -> None:
    """Both images by their unqualified names (``IfNotPresent``: never pulled), as their own non-root
    user, with a read-only root, where ``restricted`` is enforced (a root pod is refused)."""
    version = sluice.__version__
    runs = {"runtime": (f"sluice-runtime:{version}", ["sluice-runtime", "--help"]),
            "operator": (f"sluice-operator:{version}", ["sluice", "--version"]),
            "whoami": (f"sluice-runtime:{version}", ["id", "-u"])}
    read_only = {**CONTAINER_SECURITY_CONTEXT, "readOnlyRootFilesystem": True}
    cluster.apply(*({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never", "securityContext": pod_security_context(),
            "containers": [{"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": args,
                            "securityContext": read_only}],
        },
    } for name, (image, args) in runs.items()))

    def output(name: str) -> str | None:
        pod = cluster.get("pod", ns, name) or {}
        phase = (pod.get("status") or {}).get("phase")
        assert phase != "Failed", cluster.kubectl("logs", "-n", ns, name, check=False)
        return cluster.kubectl("logs", "-n", ns, name) if phase == "Succeeded" else None

    assert "usage: sluice-runtime" in cluster.wait_for("sluice-runtime --help", lambda: output("runtime"))
    assert cluster.wait_for("sluice --version", lambda: output("operator")).strip() == f"sluice {version}"
    assert cluster.wait_for("id -u", lambda: output("whoami")).strip() == str(RUN_AS_USER)
    refused = cluster.apply_result({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": f"sluice-runtime:{version}",
                                 "securityContext": {"runAsUser": 0}}]},
    })
    assert refused.returncode != 0 and "restricted" in refused.stderr, refused
