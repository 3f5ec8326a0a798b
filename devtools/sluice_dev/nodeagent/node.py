"""The Node object and its heartbeats (Lease in ``kube-node-lease`` + status conditions)."""

from __future__ import annotations

import logging
import platform
import threading
import time
from typing import Any

from sluice_dev.nodeagent.kubeapi import Api, ApiError
from sluice_dev.nodeagent.status import micro_time, rfc3339

log = logging.getLogger(__name__)
Obj = dict[str, Any]
LEASE_SECONDS = 40
VERSION = "v0.1.0-sluice-nodeagent"


def conditions(now: float, since: float) -> list[Obj]:
    def cond(kind: str, state: str, reason: str, message: str) -> Obj:
        return {
            "type": kind,
            "status": state,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": rfc3339(since),
        }

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure (not measured)"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure (not measured)"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure (not measured)"),
        cond("Ready", "True", "KubeletReady", "sluice node agent is posting ready status"),
    ]


def node_status(capacity: dict[str, str], kubelet_port: int, now: float, since: float) -> Obj:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        "conditions": conditions(now, since),
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],  # no Hostname: the API server
        # prefers it for node connections (kubectl logs), and it must reach 127.0.0.1
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": platform.release(),
            "osImage": "sluice local node agent (processes)",
            "containerRuntimeVersion": "sluice-processes://0.1",
            "kubeletVersion": VERSION,
            "kubeProxyVersion": VERSION,
            "operatingSystem": "linux",
            "architecture": arch,
        },
    }


def node_object(name: str, capacity: dict[str, str], kubelet_port: int, now: float) -> Obj:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": arch,
                "node.sluice.dev/agent": "local",
            },
        },
        "spec": {},
        "status": node_status(capacity, kubelet_port, now, now),
    }


class NodeHeartbeat:
    """Registers the node, then renews its Lease and posts its status every ``interval`` s."""

    def __init__(
        self, api: Api, name: str, capacity: dict[str, str], kubelet_port: int, interval: float = 10.0
    ) -> None:
        self.api, self.name, self.capacity, self.kubelet_port = api, name, capacity, kubelet_port
        self.interval = interval
        self.since = time.time()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="node-heartbeat", daemon=True)

    def register(self) -> None:
        now = time.time()
        try:
            self.api.create("/api/v1/nodes", node_object(self.name, self.capacity, self.kubelet_port, now))
        except ApiError as exc:
            if exc.status != 409:
                raise
        self.post_status()
        self.renew_lease()

    def post_status(self) -> None:
        body = {"status": node_status(self.capacity, self.kubelet_port, time.time(), self.since)}
        self.api.patch(f"/api/v1/nodes/{self.name}/status", body, strategic=True)

    def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro_time()}
        try:
            self.api.patch(path, {"spec": spec})
        except ApiError as exc:
            if exc.status != 404:
                raise
            node = self.api.get(f"/api/v1/nodes/{self.name}")
            self.api.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": self.name,
                        "namespace": "kube-node-lease",
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Node",
                                "name": self.name,
                                "uid": node["metadata"]["uid"],
                            }
                        ],
                    },
                    "spec": spec,
                },
            )

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.renew_lease()
                self.post_status()
            except Exception as exc:
                log.warning("node heartbeat failed: %s", exc)
                if isinstance(exc, ApiError) and exc.status == 404:
                    try:
                        self.register()
                    except Exception as again:
                        log.warning("node re-registration failed: %s", again)

    def delete_node(self) -> None:
        self.stop.set()
        self.api.delete(f"/api/v1/nodes/{self.name}")
