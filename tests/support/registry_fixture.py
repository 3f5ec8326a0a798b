"""The ``schema_registry`` fixture: the platform's schema registry (Apicurio Registry, in memory,
Confluent-compatible API) on loopback, started on demand for the session.

Imported by ``tests/integration/conftest.py`` (so that only the sessions, xdist workers, whose tests
ask for it pay its start: about 3 s and 155 MiB, Apicurio 2.6.13.Final on Java 17)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sluice_dev.platform import common


@dataclass(frozen=True)
class SchemaRegistry:
    """The test run's registry: the base URL a Confluent client is given, and the environment the
    platform exports for it."""

    url: str
    env: dict[str, str]
    log: Path

    def client(self) -> Any:
        """confluent-kafka's own registry client on it."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient({"url": self.url, "timeout": 30})


def register_avro(client: Any, subject: str, schema: dict[str, Any] | str) -> Any:
    """Register an Avro schema under ``subject``: the plan's record of it (subject, text, id,
    version), as the compiler pins it."""
    from confluent_kafka.schema_registry import Schema
    from sluice.core.plan.model import RegistrySchema

    text = schema if isinstance(schema, str) else json.dumps(schema)
    client.register_schema(subject, Schema(text, "AVRO"))
    found = client.lookup_schema(subject, Schema(text, "AVRO"))
    return RegistrySchema.model_validate(
        {"subject": subject, "schema": text, "id": found.schema_id, "version": found.version})


@pytest.fixture(scope="session")
def schema_registry(platform_state: Path) -> Iterator[SchemaRegistry]:
    """A real Apicurio Registry (in-memory storage, global compatibility BACKWARD) on loopback."""
    from sluice_dev.platform import registry as component

    try:
        started = component.start(platform_state)
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield SchemaRegistry(url=started.env["SLUICE_SCHEMA_REGISTRY_URL"], env=dict(started.env),
                             log=started.logs[0])
    finally:
        component.stop(platform_state)
