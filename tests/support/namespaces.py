"""A fresh namespace for a test, deleted afterwards (any Kubernetes API client)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def fresh_namespace(api: Any, prefix: str) -> Iterator[str]:
    """Create ``<prefix>-<random>`` through ``api`` (a ``kubernetes.client.ApiClient``); delete it
    when the block ends."""
    from kubernetes import client

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)
