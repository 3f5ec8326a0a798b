"""The state PersistentVolumeClaim (checkpoints and state store), none with an object store, and
what the driver layout asks of the checkpoint storage."""

from __future__ import annotations

from typing import Any

from sluice.core import storage_review
from sluice.operator.builders.context import QueryContext


def state_claim(ctx: QueryContext) -> dict[str, Any]:
    """Owned by the query under ``deletionPolicy: Delete``; not owned (kept) under ``Retain``."""
    storage = ctx.cluster.storage
    spec: dict[str, Any] = {
        "accessModes": [storage.access_mode],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    meta = ctx.metadata(ctx.names.state_claim, "state", owned=not ctx.retain_state)
    meta["annotations"]["sluice.dev/deletion-policy"] = ctx.spec.deletion_policy
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def owner_patch(ctx: QueryContext) -> dict[str, Any]:
    """Merge patch that makes an existing claim follow the current deletion policy."""
    return {
        "metadata": {
            "ownerReferences": [] if ctx.retain_state else [ctx.owner_reference()],
            "annotations": {"sluice.dev/deletion-policy": ctx.spec.deletion_policy},
        }
    }


def standby_storage_problem(ctx: QueryContext, cluster_name: str) -> str | None:
    """Why the resolved driver layout cannot work with the state volume, or None.

    Standby drivers mount the active driver's state claim; a ReadWriteOncePod claim admits one pod.
    """
    standbys = ctx.standby_replicas
    mode = ctx.cluster.storage.access_mode
    if standbys == 0 or mode != "ReadWriteOncePod" or not ctx.uses_claim:
        return None
    field = ("spec.standbyReplicas" if ctx.spec.standby_replicas is not None
             else f"spec.standbyReplicas (QueryCluster {cluster_name!r} default)")
    drivers = "driver" if standbys == 1 else "drivers"
    return (f"{field}: {standbys} standby {drivers} need{'s' if standbys == 1 else ''} a volume that "
            f"{standbys + 1} pods can mount; QueryCluster storage.accessMode {mode} allows one pod")


def executor_storage_problem(ctx: QueryContext, cluster_name: str) -> str | None:
    """Why executors cannot work with the state claim, or None: executor pods mount the query's
    state claim (they write the state store files), and a ReadWriteOnce(Pod) claim's volume attaches
    to one node, so an executor scheduled elsewhere would wait for it for ever."""
    own = ctx.spec.resources is not None and ctx.spec.resources.executors is not None
    field = "spec.resources.executors" if own else f"spec.executors (QueryCluster {cluster_name!r})"
    return storage_review.executor_claim_problem(field, ctx.executors, ctx.cluster.storage.mode)


def node_loss(ctx: QueryContext) -> tuple[bool, str]:
    """Whether a node loss leaves the query a driver on another node, and why (the status's
    ``NodeLossTolerant`` condition; the webhook warns in the same words)."""
    return storage_review.node_loss(ctx.cluster.storage.mode, ctx.standby_replicas)
