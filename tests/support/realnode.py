"""The real node for tests: Kafka, a control plane and the node, started the way
``platform up --node kubelet`` starts them (the bridge first: Kafka's pod listener and the API
server are on the node IP), stopped at the end. Root only; one real node per machine.

A component that cannot be provisioned or started fails the test session with its name and log
path (``PlatformError``); nothing skips.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sluice_dev.platform import common


@dataclass
class Node:
    state_dir: Path
    kubeconfig: Path
    api: Any  # kubernetes.client.ApiClient
    bin_dir: Path
    info: dict[str, str]
    #: Kafka's pod listener on the node IP (what the platform exports with the real node)
    kafka: str
    #: how many nodes run: ``sluice-node``, and with 2 ``sluice-node-2`` (``node.topology``)
    nodes: int = 1

    def power_off(self, name: str) -> None:
        """A power loss of node ``name`` (SIGKILL of its kubelet, containerd, shims, containers;
        its pod network gone); its Node turns NotReady after the node-monitor grace period."""
        from sluice_dev.platform import node

        node.power_off(self.state_dir, name)

    def power_on(self, name: str) -> None:
        """Node ``name`` back after ``power_off``: returns once it is Ready again."""
        from sluice_dev.platform import node

        try:
            node.power_on(self.state_dir, name)
        except common.PlatformError as exc:
            pytest.fail(str(exc), pytrace=False)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}",
        }


@contextmanager
def running_node(state_dir: Path, nodes: int = 1) -> Iterator[Node]:
    """``nodes=2``: a second node, ``sluice-node-2``, and a control plane whose node-monitor
    grace period is short (``node.NODE_MONITOR_GRACE_PERIOD``), for node-loss tests."""
    from kubernetes import config
    from sluice_dev.platform import kafka, kube, node

    grace = node.NODE_MONITOR_GRACE_PERIOD if nodes > 1 else None
    try:
        bin_dir = kube.provision()
        node.provision()
        address = node.network_up(state_dir)
        started_kafka = kafka.start(state_dir, pod_address=address)
        if grace is None:
            started_kube = kube.start(state_dir, advertise_address=address)
        else:
            started_kube = kube.start(state_dir, advertise_address=address, node_monitor_grace_period=grace)
        started_node = node.start(state_dir) if nodes == 1 else node.start(state_dir, nodes=nodes)
    except common.PlatformError as exc:
        node.stop(state_dir)
        kube.stop(state_dir)
        kafka.stop(state_dir)
        pytest.fail(str(exc), pytrace=False)
    kubeconfig = Path(started_kube.env["KUBECONFIG"])
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        bootstrap = started_kafka.env["SLUICE_KAFKA_BOOTSTRAP"]
        yield Node(state_dir, kubeconfig, api, bin_dir, started_node.info, bootstrap, nodes)
    finally:
        api.close()
        node.stop(state_dir)
        kube.stop(state_dir)
        kafka.stop(state_dir)


def container_pids(runc_root: str, container_id: str, *, init_only: bool) -> list[int]:
    """Host PIDs of a container on the real node, as its runc knows them (``runc_root``: the
    node's runc state root for containerd's CRI namespace, ``<info runc_root>/k8s.io``)."""
    runc = ["runc", f"--root={runc_root}"]
    if init_only:
        state = subprocess.run([*runc, "state", container_id], capture_output=True, text=True,
                               check=True, timeout=30)
        return [int(json.loads(state.stdout)["pid"])]
    listed = subprocess.run([*runc, "ps", "--format", "json", container_id], capture_output=True,
                            text=True, check=True, timeout=30)
    return [int(pid) for pid in json.loads(listed.stdout or "[]")]


def signal_container(runc_root: str, container_id: str, sig: int) -> None:
    """Send ``sig`` from the host's PID namespace: SIGKILL and SIGTERM to the container's init (the
    driver's runtime, which ends the container or drains), any other signal (SIGSTOP, SIGCONT) to
    every process of it (the runtime and its JVM)."""
    init_only = sig in (signal.SIGKILL, signal.SIGTERM)
    pids = container_pids(runc_root, container_id.split("://", 1)[-1], init_only=init_only)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            if init_only:
                raise  # the container's init is gone: there was nothing to signal
            # a short-lived process of the container (a child the JVM or Python ran) ended
            # between the listing and the signal: the others still get it


def pod_ready(core: Any, namespace: str, name: str) -> Any:
    """The pod when every container of it is ready, else None (``core``: a CoreV1Api)."""
    pod = core.read_namespaced_pod(name, namespace)
    statuses = pod.status.container_statuses or []
    return pod if statuses and all(s.ready for s in statuses) else None


def succeeded_logs(core: Any, namespace: str, name: str) -> str | None:
    """A run-to-completion pod's log once it succeeded (None while it runs; a failure raises)."""
    pod = core.read_namespaced_pod(name, namespace)
    if pod.status.phase == "Failed":
        raise AssertionError(f"pod {name} failed: {core.read_namespaced_pod_log(name, namespace)}")
    if pod.status.phase != "Succeeded":
        return None
    return str(core.read_namespaced_pod_log(name, namespace))
