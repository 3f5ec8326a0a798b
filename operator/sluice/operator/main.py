"""kopf registration: which handler module answers which resource and cause (nothing else here)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from sluice.core.election import QUERY_LABEL
from sluice.core.rollback import ROLLBACK_REQUEST
from sluice.crd.base import GROUP, VERSION
from sluice.operator.handlers import admission as webhooks
from sluice.operator.handlers import cluster, driver_lease, query_delete, query_driver, query_reconcile

SQ = (GROUP, VERSION, "streamingqueries")
QC = (GROUP, VERSION, "queryclusters")
MANAGED = {"app.kubernetes.io/managed-by": "sluice-operator", "app.kubernetes.io/component": "driver"}
#: watched server-side by label: only the operator's driver Deployments and Leases reach it (not
#: every node lease renewal of the cluster)
DRIVER_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED.items())
LEASE_SELECTOR = f"{QUERY_LABEL},{DRIVER_SELECTOR}"
FINALIZER = "sluice.dev/finalizer"
KOPF_PREFIX = f"kopf.{GROUP}"


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """kopf's progress and diff-base live in ``kopf.sluice.dev/*`` annotations, not in status.

    (Not under ``sluice.dev/``: kopf leaves every annotation under its prefix out of the object's
    essence, and ``sluice.dev/cluster-revision`` must count as a change.)
    """
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.queueing.error_delays = [1, 2, 5, 10, 30, 60]
    settings.execution.max_workers = 16
    settings.watching.label_selectors["apps", "deployments"] = DRIVER_SELECTOR
    settings.watching.label_selectors["coordination.k8s.io", "leases"] = LEASE_SELECTOR


def build_registry(login: Any = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)  # type: ignore[misc]
    def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_settings(settings)

    if login is not None:
        kopf.on.login(registry=registry)(login)

    kopf.on.create(*SQ, registry=registry, id="reconcile-create", backoff=10)(query_reconcile.handle)
    # spec edits, and the cluster-revision annotation a QueryCluster change sets (see cluster.fan_out)
    kopf.on.update(*SQ, registry=registry, id="reconcile-update", backoff=10)(query_reconcile.handle)
    kopf.on.resume(*SQ, registry=registry, id="reconcile-resume", backoff=10)(query_reconcile.handle)
    # a rollback request (the Argo CD action's annotation) is answered by a handler of its own: a
    # reconcile waiting out a retry's back-off does not hold it up
    kopf.on.update(*SQ, registry=registry, id="rollback-request", backoff=10,
                   field=("metadata", "annotations", ROLLBACK_REQUEST))(query_reconcile.rollback_request)
    # the health gate of a rollout in flight is evaluated on a timer (it waits on the drivers)
    kopf.on.timer(*SQ, registry=registry, id="rollout-gate", interval=query_reconcile.GATE_INTERVAL,
                  when=query_reconcile.rollout_in_flight)(query_reconcile.handle)
    # retired plan versions are cleaned up once their retention has passed
    kopf.on.timer(*SQ, registry=registry, id="cleanup", interval=query_reconcile.CLEANUP_INTERVAL,
                  when=query_reconcile.cleanup_pending)(query_reconcile.cleanup_tick)
    kopf.on.delete(*SQ, registry=registry, id="finalize", backoff=5)(query_delete.handle)
    kopf.on.event("apps", "v1", "deployments", registry=registry, id="driver-readiness",
                  labels=MANAGED)(query_driver.handle)  # type: ignore[arg-type]
    kopf.on.event("coordination.k8s.io", "v1", "leases", registry=registry, id="driver-lease",
                  labels={**MANAGED, QUERY_LABEL: kopf.PRESENT})(driver_lease.handle)  # type: ignore[arg-type]

    kopf.on.create(*QC, registry=registry, id="cluster-create")(cluster.handle)
    kopf.on.update(*QC, registry=registry, id="cluster-update", field="spec")(cluster.handle)
    kopf.on.resume(*QC, registry=registry, id="cluster-resume")(cluster.handle)
    kopf.on.create(*QC, registry=registry, id="cluster-fan-out-create")(cluster.fan_out)
    kopf.on.update(*QC, registry=registry, id="cluster-fan-out-update", field="spec")(cluster.fan_out)
    # a change of the cluster reaches its queries in waves: the next ones are admitted on a timer
    kopf.on.timer(*QC, registry=registry, id="cluster-rollout", interval=cluster.ROLLOUT_INTERVAL,
                  when=cluster.rollout_in_progress)(cluster.rollout_tick)
    return registry


def register_admission(registry: kopf.OperatorRegistry, server: kopf.WebhookServer) -> None:
    """The validating admission webhook (``sluice operator --webhook-port``), served by ``server``."""

    @kopf.on.startup(registry=registry)  # type: ignore[misc]
    def _serve(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.admission.server = server

    kopf.on.validate(*SQ, registry=registry, id=webhooks.QUERY_HANDLER,
                     operations=["CREATE", "UPDATE"])(webhooks.validate_query)
    kopf.on.validate(*QC, registry=registry, id=webhooks.CLUSTER_HANDLER,
                     operations=["CREATE", "UPDATE"])(webhooks.validate_cluster)
