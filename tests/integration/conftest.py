"""Fixtures of the integration tests that talk to the operator's API objects, and the object store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sluice_dev.platform import common

from tests.support.registry_fixture import schema_registry  # noqa: F401
from tests.support.world import World, apply_crds


@pytest.fixture(scope="module")
def crds(kube: Any) -> None:
    """The CRDs applied (server-side) and Established on the test run's API server."""
    apply_crds(kube)


@pytest.fixture
def world(kube: Any, namespace: str, kafka: str, crds: None) -> World:
    return World(kube, namespace, kafka)


@dataclass
class ObjectStore:
    """The test run's s3proxy: its endpoint, bucket and keys, and a signed client of it."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    client: Any  # sluice_dev.platform.objectstore.S3
    env: dict[str, str]


@pytest.fixture(scope="session")
def objectstore(platform_state: Path) -> Iterator[ObjectStore]:
    """A real s3proxy (filesystem backend, SigV4 auth, bucket ``sluice``) on loopback, started on
    demand: only the sessions (xdist workers) whose tests ask for it pay its start (about 1 s)."""
    from sluice_dev.platform import objectstore as component

    try:
        started = component.start(platform_state)
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        env = started.env
        yield ObjectStore(
            endpoint=env["SLUICE_S3_ENDPOINT"], bucket=env["SLUICE_S3_BUCKET"],
            access_key=env["SLUICE_S3_ACCESS_KEY"], secret_key=env["SLUICE_S3_SECRET_KEY"],
            client=component.S3(env["SLUICE_S3_ENDPOINT"], env["SLUICE_S3_ACCESS_KEY"],
                                env["SLUICE_S3_SECRET_KEY"]),
            env=dict(env),
        )
    finally:
        component.stop(platform_state)


@pytest.fixture(scope="session")
def s3a_jars() -> list[Path]:
    """Paths of the cached S3A jars (hadoop-aws, the AWS SDK v2 modules, spark-hadoop-cloud)."""
    from sluice_dev.platform import objectstore as component

    try:
        return component.s3a_jar_paths()
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
