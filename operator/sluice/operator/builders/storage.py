"""The state PersistentVolumeClaim (checkpoints and state store)."""

from __future__ import annotations

from typing import Any

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
