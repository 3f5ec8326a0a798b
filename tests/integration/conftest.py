"""Fixtures of the integration tests that talk to the operator's API objects."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.world import World, apply_crds


@pytest.fixture(scope="module")
def crds(kube: Any) -> None:
    """The CRDs applied (server-side) and Established on the test run's API server."""
    apply_crds(kube)


@pytest.fixture
def world(kube: Any, namespace: str, kafka: str, crds: None) -> World:
    return World(kube, namespace, kafka)
