"""The immutable ConfigMap that pins a plan, named after its hash.

It holds the plan (``plan.json``, what the drivers run) and the query part of the spec that
compiled into it (``spec.json``: sources, sql, sink, trigger, shufflePartitions, as
``StreamingQuerySpec.query()`` gives them), so that the SQL of an earlier plan can be brought back
(``kubectl sluice rollback``) while its ConfigMap is kept.
"""

from __future__ import annotations

import json
from typing import Any

from sluice.core.naming import PLAN_FILE, SPEC_FILE
from sluice.core.spec import QuerySpec
from sluice.core.status import SHORT_HASH_LENGTH
from sluice.operator.builders.context import QueryContext

#: the label (first 12 characters) and annotation (whole hash) that name a plan ConfigMap's plan
PLAN_HASH_KEY = "sluice.dev/plan-hash"


def query_spec_json(query: QuerySpec) -> str:
    """The query part of a spec as JSON: camelCase field names, unset optional fields left out,
    keys sorted (the same spec gives the same text)."""
    return json.dumps(query.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True,
                      indent=2) + "\n"


def plan_config_map(ctx: QueryContext, plan_hash: str, plan_json: str) -> dict[str, Any]:
    """The ConfigMap of ``plan_hash``; ``ctx.spec`` must be the spec that compiled into it (every
    caller pins the plan it just compiled from ``ctx.spec``)."""
    meta = ctx.metadata(
        ctx.names.plan_config_map(plan_hash), "plan",
        extra_labels={PLAN_HASH_KEY: plan_hash[:SHORT_HASH_LENGTH]},
    )
    meta["annotations"][PLAN_HASH_KEY] = plan_hash
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "immutable": True,
        "data": {PLAN_FILE: plan_json, SPEC_FILE: query_spec_json(ctx.spec.query())},
    }
