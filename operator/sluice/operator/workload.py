"""The query's workload objects on the API server: converge them onto a plan (create-or-get,
replace on a changed spec hash), the pinned plan ConfigMap, the identity written to the status."""

from __future__ import annotations

from typing import Any

from sluice.core.status import EventReason
from sluice.operator import builders
from sluice.operator.builders.context import QueryContext
from sluice.operator.builders.rbac import service_account_patch
from sluice.operator.builders.storage import owner_patch
from sluice.operator.env import QueryRun
from sluice.operator.lease import active_ready, adopt, forward_handoff


def _identity_status(ctx: QueryContext) -> dict[str, Any]:
    ident = ctx.identity
    return {
        "serviceId": ident.service_id,
        "queryId": ident.query_id,
        "consumerGroup": ident.consumer_group,
        "transactionalId": ident.transactional_id,
        "checkpointPath": ident.checkpoint_path,
    }


def _ensure_plan_config_map(run: QueryRun, ctx: QueryContext, plan_hash: str, plan_json: str) -> str:
    cm = builders.plan_config_map(ctx, plan_hash, plan_json)
    run.env.kube.ensure(cm, probe_first=True)
    return str(cm["metadata"]["name"])


def _converge(run: QueryRun, ctx: QueryContext, plan_hash: str, config_map: str, fresh: bool = False) -> bool:
    """Create-or-converge every workload object; returns whether the active driver is ready."""
    kube = run.env.kube
    lease: dict[str, Any] | None = None
    for obj in builders.workload_objects(ctx, plan_hash, config_map):
        kind = obj["kind"]
        frozen = ctx.freeze_driver and kind == "Deployment"
        existing, outcome = kube.ensure(obj, probe_first=not fresh, replace=not frozen)
        if frozen and (existing.get("spec") or {}).get("replicas") != obj["spec"]["replicas"]:
            kube.patch("Deployment", ctx.namespace, obj["metadata"]["name"],
                       {"spec": {"replicas": obj["spec"]["replicas"]}})
        if kind == "PersistentVolumeClaim" and outcome == "unchanged":
            owners = existing["metadata"].get("ownerReferences") or []
            wants_owner = not ctx.retain_state
            if bool(owners) != wants_owner:
                kube.patch("PersistentVolumeClaim", ctx.namespace, ctx.names.state_claim, owner_patch(ctx))
        if kind == "ServiceAccount" and outcome == "unchanged":
            sa_patch = service_account_patch(ctx, existing)  # workload identity's annotations
            if sa_patch is not None:
                kube.patch("ServiceAccount", ctx.namespace, ctx.names.service_account, sa_patch)
        if kind == "Lease":
            lease = adopt(kube, ctx, existing)
            lease = forward_handoff(kube, run.body, lease)
        if kind == "Deployment":
            replicas = obj["spec"]["replicas"]
            was_suspended = run.status.get("phase") == "Suspended"
            if replicas == 0 and not was_suspended and not fresh:
                run.event("Normal", EventReason.SUSPENDED, "drivers scaled to 0 (draining); state kept")
            elif replicas >= 1 and was_suspended:
                run.event("Normal", EventReason.RESUMED, f"drivers scaled to {replicas}")
    if ctx.driver_replicas == 0:
        return False
    return active_ready(kube, ctx.namespace, lease)


def converge_pinned(run: QueryRun, ctx: QueryContext) -> bool:
    """Keep the workload on the pinned plan; returns whether the active driver is ready."""
    pinned = run.records.plan
    assert pinned is not None  # only called once a plan is pinned
    return _converge(run, ctx, pinned.hash, pinned.config_map)
