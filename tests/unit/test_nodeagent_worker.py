"""Node agent: one pod worker driving real processes against an in-memory API (no cluster)."""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sluice_dev.nodeagent.backoff import Backoff
from sluice_dev.nodeagent.images import Catalog
from sluice_dev.nodeagent.ipam import Allocator
from sluice_dev.nodeagent.kubeapi import ApiError
from sluice_dev.nodeagent.podworker import NodeContext, PodWorker

Obj = dict[str, Any]
PY = sys.executable


class FakeApi:
    """Just enough of the API for a pod worker: objects by path, status patches, deletes."""

    port = 6443

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.deleted: list[tuple[str, Obj | None]] = []
        self.tokens = 0

    def get_or_none(self, path: str) -> Obj | None:
        return self.objects.get(path)

    def get(self, path: str) -> Obj:
        if path not in self.objects:
            raise ApiError(404, "not found", "GET", path)
        return self.objects[path]

    def create(self, path: str, body: Obj) -> Obj:
        if path.endswith("/token"):
            self.tokens += 1
            return {"status": {"token": f"token-{self.tokens}"}}
        raise AssertionError(path)

    def patch(self, path: str, body: Obj, *, strategic: bool = False) -> Obj:
        pod = self.objects[path.removesuffix("/status")]
        pod["status"] = body["status"]
        return pod

    def delete(self, path: str, body: Obj | None = None) -> Obj | None:
        self.deleted.append((path, body))
        return self.objects.pop(path, None)


def pod(name: str, containers: list[Obj], **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"nodeName": "n", "containers": containers, "terminationGracePeriodSeconds": 2, **spec},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }


@pytest.fixture
def ctx(tmp_path: Path) -> NodeContext:
    return NodeContext(
        api=FakeApi(),  # type: ignore[arg-type]
        node_name="n",
        state_dir=tmp_path,
        allocator=Allocator("127.11.0.0/24"),
        catalog=Catalog.load(),
        backoff=Backoff(0.5, 1.0),
        use_namespace=False,
    )


@pytest.fixture
def run(ctx: NodeContext) -> Iterator[Callable[[Obj], PodWorker]]:
    workers: list[PodWorker] = []

    def start(obj: Obj) -> PodWorker:
        path = f"/api/v1/namespaces/ns/pods/{obj['metadata']['name']}"
        ctx.api.objects[path] = obj  # type: ignore[attr-defined]
        worker = PodWorker(ctx, obj)
        workers.append(worker)
        worker.start()
        return worker

    yield start
    for worker in workers:
        worker.deleted()
        worker.join(10)


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("timed out")


def status(worker: PodWorker) -> Obj:
    return worker.ctx.api.objects.get(f"/api/v1/namespaces/ns/pods/{worker.pod_name}", {}).get("status", {})  # type: ignore[attr-defined]


def test_completed_pod_with_env_and_volumes(run: Callable[[Obj], PodWorker], ctx: NodeContext) -> None:
    ctx.api.objects["/api/v1/namespaces/ns/configmaps/cm"] = {"data": {"k": "v"}}  # type: ignore[attr-defined]
    script = 'import os; print(os.environ["IP"], os.environ["K"], os.environ["ECHO"]); raise SystemExit(0)'
    worker = run(
        pod(
            "done",
            [
                {
                    "name": "c",
                    "image": "python:3.11",
                    "args": ["-c", script],
                    "env": [
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                        {"name": "ECHO", "value": "$(K)-$(IP)"},
                    ],
                    "volumeMounts": [{"name": "cfg", "mountPath": str(ctx.state_dir / "mnt" / "cfg")}],
                }
            ],
            restartPolicy="Never",
            volumes=[{"name": "cfg", "configMap": {"name": "cm"}}],
        )
    )
    final = wait_for(lambda: status(worker).get("phase") == "Succeeded" and status(worker))
    ip = final["podIP"]
    assert ip.startswith("127.11.0.")
    assert final["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    log = (ctx.pod_dir("uid-done") / "logs" / "c.log").read_text()
    assert f"{ip} v v-{ip}" in log
    # without mount namespaces (this test): a symlink at the free mountPath, and $SLUICE_VOLUME_MOUNTS
    assert (ctx.state_dir / "mnt" / "cfg" / "k").read_text() == "v"


def test_crash_loop_back_off_and_last_state(run: Callable[[Obj], PodWorker]) -> None:
    worker = run(pod("crash", [{"name": "c", "command": ["sh", "-c", "exit 5"]}]))
    final = wait_for(
        lambda: (s := status(worker)).get("containerStatuses", [{}])[0].get("restartCount", 0) >= 3 and s
    )
    cs = final["containerStatuses"][0]
    assert (
        cs["lastState"]["terminated"]["exitCode"] == 5 and cs["lastState"]["terminated"]["reason"] == "Error"
    )
    assert final["phase"] == "Running"
    wait_for(lambda: "CrashLoopBackOff" in str(status(worker)["containerStatuses"][0]["state"]))


def test_readiness_and_liveness(run: Callable[[Obj], PodWorker]) -> None:
    server = textwrap.dedent("""
        import http.server, os, time
        t0 = time.time()
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/ready" or time.time() - t0 < 1.5 else 500)
                self.end_headers()
            def log_message(self, *a): pass
        http.server.HTTPServer((os.environ["IP"], 8080), H).serve_forever()
    """)
    worker = run(
        pod(
            "web",
            [
                {
                    "name": "w",
                    "command": [PY, "-c", server],
                    "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1},
                    "livenessProbe": {
                        "httpGet": {"path": "/live", "port": 8080},
                        "periodSeconds": 1,
                        "failureThreshold": 2,
                    },
                }
            ],
        )
    )
    wait_for(
        lambda: {c["type"]: c["status"] for c in status(worker).get("conditions", [])}.get("Ready") == "True"
    )
    final = wait_for(lambda: (s := status(worker))["containerStatuses"][0]["restartCount"] >= 1 and s)
    last = final["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 143 and "liveness probe failed" in last["message"]


def test_deletion_sigterm_then_delete_with_zero_grace(
    run: Callable[[Obj], PodWorker], ctx: NodeContext
) -> None:
    worker = run(
        pod(
            "term",
            [
                {
                    "name": "c",
                    "command": [
                        "sh",
                        "-c",
                        "trap 'echo got-term; exit 0' TERM; while true; do sleep 0.1; done",
                    ],
                }
            ],
        )
    )
    wait_for(lambda: status(worker).get("phase") == "Running")
    obj = dict(worker.pod)
    obj["metadata"] = dict(obj["metadata"], deletionTimestamp="now", deletionGracePeriodSeconds=5)
    t0 = time.monotonic()
    worker.update(obj)
    worker.join(10)
    assert time.monotonic() - t0 < 3
    path, body = ctx.api.deleted[-1]  # type: ignore[attr-defined]
    assert path == "/api/v1/namespaces/ns/pods/term"
    assert body == {"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-term"}}
    assert not ctx.pod_dir("uid-term").exists()
    assert "uid-term" not in ctx.allocator.known()


def test_missing_configmap_waits_with_a_config_error(run: Callable[[Obj], PodWorker]) -> None:
    worker = run(
        pod(
            "cfg",
            [
                {
                    "name": "c",
                    "command": ["true"],
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}],
                }
            ],
        )
    )
    waiting = wait_for(
        lambda: (
            status(worker).get("containerStatuses", [{}])[0].get("state", {}).get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
        )
    )
    assert waiting
    assert status(worker)["phase"] == "Pending"


def test_init_container_runs_first_and_startup_probe_gates_readiness(
    run: Callable[[Obj], PodWorker], ctx: NodeContext
) -> None:
    work = ctx.state_dir / "mnt" / "work"
    mount = [{"name": "work", "mountPath": str(work)}]
    worker = run(
        pod(
            "init",
            [
                {
                    "name": "main",
                    "command": ["sh", "-c", f"cat {work}/seed; sleep 1; touch {work}/started; sleep 60"],
                    "volumeMounts": mount,
                    "startupProbe": {
                        "exec": {"command": ["test", "-f", f"{work}/started"]},
                        "periodSeconds": 1,
                        "failureThreshold": 10,
                    },
                    "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                }
            ],
            initContainers=[
                {"name": "seed", "command": ["sh", "-c", f"echo seeded > {work}/seed"], "volumeMounts": mount}
            ],
            volumes=[{"name": "work", "emptyDir": {}}],
        )
    )
    first = wait_for(lambda: (s := status(worker)).get("phase") == "Running" and s)
    assert first["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert first["containerStatuses"][0]["started"] is False  # startup probe not passed yet
    ready = wait_for(lambda: (s := status(worker))["containerStatuses"][0]["ready"] and s)
    assert ready["containerStatuses"][0]["started"] is True
    assert "seeded" in (ctx.pod_dir("uid-init") / "logs" / "main.log").read_text()
