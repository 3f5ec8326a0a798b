"""Fixtures of the real-node tests: a private control plane advertising the node IP, and the node.

The real node is machine-wide (its bridge, iptables chains): one runs per machine, as root.
A component that cannot be provisioned or started fails the tests loudly with its name and log
path (``PlatformError``); nothing skips.
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


@dataclass
class Node:
    state_dir: Path
    kubeconfig: Path
    api: Any  # kubernetes.client.ApiClient
    bin_dir: Path
    info: dict[str, str]

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}",
        }


@pytest.fixture(scope="session")
def node_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("realnode")


@pytest.fixture(scope="session")
def real_node(node_state: Path) -> Iterator[Node]:
    """Control plane + real node (containerd, kubelet, kube-proxy), stopped at the end."""
    from kubernetes import config
    from sluice_dev.platform import kube, node

    try:
        bin_dir = kube.provision()
        node.provision()
        started_kube = kube.start(node_state, advertise_address=node.node_ip())
        started_node = node.start(node_state)
    except common.PlatformError as exc:
        node.stop(node_state)
        kube.stop(node_state)
        pytest.fail(str(exc), pytrace=False)
    kubeconfig = Path(started_kube.env["KUBECONFIG"])
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield Node(node_state, kubeconfig, api, bin_dir, started_node.info)
    finally:
        api.close()
        node.stop(node_state)
        kube.stop(node_state)


@pytest.fixture
def node_namespace(real_node: Node) -> Iterator[str]:
    with fresh_namespace(real_node.api, "n") as name:
        yield name
