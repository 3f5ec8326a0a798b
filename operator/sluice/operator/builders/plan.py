"""The immutable ConfigMap that pins a plan, named after its hash."""

from __future__ import annotations

from typing import Any

from sluice.core.naming import PLAN_FILE
from sluice.operator.builders.context import QueryContext


def plan_config_map(ctx: QueryContext, plan_hash: str, plan_json: str) -> dict[str, Any]:
    meta = ctx.metadata(
        ctx.names.plan_config_map(plan_hash), "plan", extra_labels={"sluice.dev/plan-hash": plan_hash[:12]}
    )
    meta["annotations"]["sluice.dev/plan-hash"] = plan_hash
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "immutable": True,
        "data": {PLAN_FILE: plan_json},
    }
