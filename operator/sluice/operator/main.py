"""kopf registration: which handler module answers which resource and cause (nothing else here)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from sluice.crd.common import GROUP, VERSION
from sluice.operator.handlers import cluster, query_delete, query_driver, query_reconcile

SQ = (GROUP, VERSION, "streamingqueries")
QC = (GROUP, VERSION, "queryclusters")
MANAGED = {"app.kubernetes.io/managed-by": "sluice-operator", "app.kubernetes.io/component": "driver"}
FINALIZER = "sluice.dev/finalizer"


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """Progress and diff-base in annotations under sluice.dev (the status schema is ours)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    settings.execution.max_workers = 16


def build_registry(login: Any = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)  # type: ignore[misc]
    def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_settings(settings)

    if login is not None:
        kopf.on.login(registry=registry)(login)

    kopf.on.create(*SQ, registry=registry, id="reconcile-create")(query_reconcile.handle)
    kopf.on.update(*SQ, registry=registry, id="reconcile-update", field="spec")(query_reconcile.handle)
    kopf.on.resume(*SQ, registry=registry, id="reconcile-resume")(query_reconcile.handle)
    kopf.on.delete(*SQ, registry=registry, id="finalize")(query_delete.handle)
    kopf.on.event("apps", "v1", "statefulsets", registry=registry, id="driver-readiness",
                  labels=MANAGED)(query_driver.handle)  # type: ignore[arg-type]

    kopf.on.create(*QC, registry=registry, id="cluster-create")(cluster.handle)
    kopf.on.update(*QC, registry=registry, id="cluster-update", field="spec")(cluster.handle)
    kopf.on.resume(*QC, registry=registry, id="cluster-resume")(cluster.handle)
    return registry
