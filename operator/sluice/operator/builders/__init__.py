"""Pure builders: desired Kubernetes objects as plain dicts, unit-tested without a cluster."""

from sluice.operator.builders.context import QueryContext, default_image
from sluice.operator.builders.driver import disruption_budget, driver_deployment, driver_lease
from sluice.operator.builders.network import metrics_service
from sluice.operator.builders.plan import plan_config_map
from sluice.operator.builders.rbac import role, role_binding, service_account
from sluice.operator.builders.storage import (
    executor_storage_problem,
    node_loss,
    standby_storage_problem,
    state_claim,
)


def workload_objects(ctx: QueryContext, plan_hash: str, config_map: str) -> list[dict]:
    """Everything but the plan ConfigMap, in creation order (the Lease before the drivers that
    compete for it, the driver last); no state claim when the checkpoint is in an object store."""
    return [
        *([state_claim(ctx)] if ctx.uses_claim else []),
        service_account(ctx),
        role(ctx),
        role_binding(ctx),
        metrics_service(ctx),
        disruption_budget(ctx),
        driver_lease(ctx),
        driver_deployment(ctx, plan_hash, config_map),
    ]


__all__ = [
    "QueryContext", "default_image", "disruption_budget", "driver_deployment", "driver_lease",
    "executor_storage_problem", "metrics_service", "node_loss", "plan_config_map", "role", "role_binding",
    "service_account", "standby_storage_problem", "state_claim", "workload_objects",
]
