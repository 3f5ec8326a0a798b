"""Fixtures of the real-node tests: Kafka, a private control plane on the node IP, and the node.

The real node is machine-wide (its bridge, iptables chains): one runs per machine, as root.
A component that cannot be provisioned or started fails the tests loudly with its name and log
path (``PlatformError``); nothing skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.namespaces import fresh_namespace
from tests.support.realnode import Node, running_node

__all__ = ["Node"]


@pytest.fixture(scope="session")
def node_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("realnode")


@pytest.fixture(scope="module")
def real_node(node_state: Path) -> Iterator[Node]:
    """Kafka, control plane and real node (containerd, kubelet, kube-proxy), stopped at the end of
    the module: the two-node tests (``test_two_nodes.py``, a fixture of their own) need the
    machine's bridge and iptables, so the two never run at once."""
    with running_node(node_state) as started:
        yield started


@pytest.fixture
def node_namespace(real_node: Node) -> Iterator[str]:
    with fresh_namespace(real_node.api, "n") as name:
        yield name
