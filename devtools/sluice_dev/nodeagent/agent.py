"""The agent: node registration, pod watch, one worker per pod, provisioner, health endpoint."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sluice_dev.nodeagent.backoff import Backoff
from sluice_dev.nodeagent.containers import process_start_time
from sluice_dev.nodeagent.images import Catalog
from sluice_dev.nodeagent.ipam import Allocator
from sluice_dev.nodeagent.kubeapi import Api, list_watch
from sluice_dev.nodeagent.kubeletapi import issue_serving_cert, serve
from sluice_dev.nodeagent.node import NodeHeartbeat
from sluice_dev.nodeagent.podworker import NodeContext, PodWorker
from sluice_dev.nodeagent.provisioner import Provisioner

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass
class Config:
    kubeconfig: Path
    node_name: str
    state_dir: Path
    image_catalog: Path | None = None
    pod_cidr: str = "127.10.0.0/16"
    cpu: str = "32"
    memory: str = "64Gi"
    pods: str = "110"
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    health_port: int = 0
    heartbeat: float = 10.0
    provisioner: bool = True
    delete_node_on_exit: bool = False
    mount_namespaces: str = "auto"  # auto | on | off


def mount_namespaces_work() -> bool:
    """Can this process create a private mount namespace and bind-mount in it?"""
    probe = (
        "import ctypes, os, tempfile; d = tempfile.mkdtemp(); "
        "libc = ctypes.CDLL('libc.so.6', use_errno=True); "
        "r = libc.mount(d.encode(), d.encode(), None, 4096, None); os.rmdir(d) if r else None; "
        "raise SystemExit(0 if r == 0 else 1)"
    )
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--uts", "--propagation", "private", "--", "python3", "-c", probe],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def kill_orphans(pods_dir: Path) -> list[str]:
    """SIGKILL container processes recorded by a previous agent run; returns the pod uids seen."""
    uids = []
    for pod_dir in sorted(pods_dir.glob("*")):
        uids.append(pod_dir.name)
        for pid_file in (pod_dir / "run").glob("*.pid"):
            try:
                pid_text, _, started = pid_file.read_text().partition(" ")
                pid = int(pid_text)
            except (OSError, ValueError):
                continue
            if started and process_start_time(pid) == started.strip():
                log.info("killing orphaned container process group %s (%s)", pid, pod_dir.name)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            pid_file.unlink(missing_ok=True)
    return uids


class Agent:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.api = Api(cfg.kubeconfig)
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        (cfg.state_dir / "pods").mkdir(exist_ok=True)
        if cfg.mount_namespaces == "auto":
            use_ns = mount_namespaces_work()
        else:
            use_ns = cfg.mount_namespaces == "on"
        if not use_ns:
            log.warning(
                "private mount namespaces unavailable: volumes are symlinked at free mountPaths "
                "and listed in $SLUICE_VOLUME_MOUNTS instead of bind-mounted"
            )
        capacity = {"cpu": cfg.cpu, "memory": cfg.memory, "pods": cfg.pods, "ephemeral-storage": "100Gi"}
        self.ctx = NodeContext(
            api=self.api,
            node_name=cfg.node_name,
            state_dir=cfg.state_dir,
            allocator=Allocator(cfg.pod_cidr, cfg.state_dir / "ipam.json"),
            catalog=Catalog.load(cfg.image_catalog),
            backoff=Backoff(cfg.backoff_initial, cfg.backoff_max),
            use_namespace=use_ns,
            allocatable=capacity,
        )
        self.stop = threading.Event()
        self.workers: dict[str, PodWorker] = {}
        self.lock = threading.Lock()
        self.health = ThreadingHTTPServer(("127.0.0.1", cfg.health_port), _health_handler(self))
        self.heartbeat = NodeHeartbeat(self.api, cfg.node_name, capacity, 0, cfg.heartbeat)
        self.kubelet_api: ThreadingHTTPServer | None = None
        self.provisioner = Provisioner(self.api, cfg.state_dir / "pv") if cfg.provisioner else None
        self.known_dirs: set[str] = set()

    # -- pods ----------------------------------------------------------------------------------

    def on_event(self, kind: str, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            if kind == "DELETED":
                if worker is not None:
                    worker.deleted()
                return
            if pod.get("spec", {}).get("nodeName") != self.cfg.node_name:
                return
            if worker is None:
                worker = PodWorker(self.ctx, pod)
                self.workers[uid] = worker
                worker.start()
            elif not worker.done.is_set():
                worker.update(pod)

    def on_list(self, pods: list[Obj]) -> None:
        """After a (re)list: pods that vanished meanwhile are gone; stale pod dirs are removed."""
        present = {p["metadata"]["uid"] for p in pods}
        with self.lock:
            for uid, worker in list(self.workers.items()):
                if uid not in present:
                    worker.deleted()
                if worker.done.is_set():
                    del self.workers[uid]
            for uid in list(self.known_dirs):
                if uid not in present and uid not in self.workers:
                    shutil.rmtree(self.ctx.pod_dir(uid), ignore_errors=True)
                    self.ctx.allocator.release(uid)
                self.known_dirs.discard(uid)

    def _reap(self) -> None:
        while not self.stop.wait(5.0):
            with self.lock:
                for uid, worker in list(self.workers.items()):
                    if worker.done.is_set():
                        del self.workers[uid]

    # -- lifecycle -----------------------------------------------------------------------------

    def run(self) -> None:
        self.known_dirs = set(kill_orphans(self.cfg.state_dir / "pods"))
        self.heartbeat.register()
        self.heartbeat.start()
        if self.provisioner is not None:
            self.provisioner.start()
        threading.Thread(target=self.health.serve_forever, name="health", daemon=True).start()
        threading.Thread(target=self._reap, name="reaper", daemon=True).start()
        threading.Thread(target=self._start_kubelet_api, name="kubelet-api-setup", daemon=True).start()
        (self.cfg.state_dir / "agent.json").write_text(
            json.dumps(
                {
                    "node": self.cfg.node_name,
                    "health": f"127.0.0.1:{self.health.server_address[1]}",
                    "mountNamespaces": self.ctx.use_namespace,
                }
            )
        )
        log.info(
            "node %s registered; health on 127.0.0.1:%s; mount namespaces: %s",
            self.cfg.node_name,
            self.health.server_address[1],
            self.ctx.use_namespace,
        )
        list_watch(
            self.api,
            "/api/v1/pods",
            self.on_event,
            self.stop,
            on_list=self.on_list,
            fieldSelector=f"spec.nodeName={self.cfg.node_name}",
        )

    def _start_kubelet_api(self) -> None:
        """Serve ``/containerLogs`` (``kubectl logs``) once the cluster signed a serving cert."""
        try:
            key, crt = issue_serving_cert(self.api, self.cfg.node_name, self.cfg.state_dir / "kubelet-pki")
            self.kubelet_api = serve(self.api, key, crt, self.locate_log)
            self.heartbeat.kubelet_port = self.kubelet_api.server_address[1]
            self.heartbeat.post_status()
            log.info("kubelet API (container logs) on https://127.0.0.1:%s", self.heartbeat.kubelet_port)
        except Exception as exc:
            log.warning("no kubelet API, `kubectl logs` will not work: %s", exc)

    def locate_log(self, namespace: str, name: str, container: str) -> tuple[Path, Callable[[], bool]] | None:
        with self.lock:
            worker = next((w for w in self.workers.values() if (w.ns, w.pod_name) == (namespace, name)), None)
        if worker is None:
            return None
        found = next((c for c in worker.containers + worker.init_containers if c.name == container), None)
        if found is None:
            return None
        return worker.dir / "logs" / f"{container}.log", lambda: not worker.done.is_set() and found.alive()

    def shutdown(self) -> None:
        """Stop watching; kill containers at once (a node going away) and optionally the Node."""
        self.stop.set()
        self.heartbeat.stop.set()
        if self.provisioner is not None:
            self.provisioner.stop.set()
        self.health.shutdown()
        if self.kubelet_api is not None:
            self.kubelet_api.shutdown()
        with self.lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker._kill_all(0)
        if self.cfg.delete_node_on_exit:
            with contextlib.suppress(Exception):
                self.heartbeat.delete_node()


def _health_handler(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/healthz"):
                body = b"ok"
            elif self.path.startswith("/pods"):
                with agent.lock:
                    body = json.dumps(
                        {
                            uid: {"namespace": w.ns, "name": w.pod_name, "ip": w.ip}
                            for uid, w in agent.workers.items()
                        }
                    ).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
