"""A fresh namespace for a test, deleted afterwards (any Kubernetes API client)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from sluice.crd.base import GROUP, VERSION
from sluice.crd.querycluster import QueryCluster
from sluice.crd.streamingquery import StreamingQuery

#: the project's custom resources (plurals) a test's operator may leave finalized
CUSTOM_RESOURCES = (StreamingQuery.plural, QueryCluster.plural)


@contextmanager
def fresh_namespace(api: Any, prefix: str) -> Iterator[str]:
    """Create ``<prefix>-<random>`` through ``api`` (a ``kubernetes.client.ApiClient``); delete it
    when the block ends, after releasing the finalizers of the project's objects in it
    (:func:`release_finalizers`)."""
    from kubernetes import client

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        release_finalizers(api, name)
        core.delete_namespace(name)


def release_finalizers(api: Any, namespace: str) -> None:
    """Remove the finalizers of the StreamingQueries and QueryClusters in ``namespace``. A test's
    operator has stopped by now, so nothing would remove the operator's finalizer: the namespace
    would stay Terminating to the end of the run, and Kubernetes' namespace controller would list
    and delete every resource type in it again and again. In a CI run before this (2026-11-28) the
    integration tests' API server answered 238,000 requests, most of them that loop, and spent a
    sixth of a CPU on them for the whole run."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api)
    for plural in CUSTOM_RESOURCES:
        try:
            listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
            items: list[dict[str, Any]] = cast(dict[str, Any], listed)["items"]
        except ApiException as exc:
            if exc.status == 404:  # the resource's CRD is not installed in this test
                continue
            raise
        for item in items:
            if item["metadata"].get("finalizers"):
                try:
                    custom.patch_namespaced_custom_object(
                        GROUP, VERSION, namespace, plural, item["metadata"]["name"],
                        {"metadata": {"finalizers": None}})
                except ApiException as exc:
                    if exc.status != 404:
                        raise
