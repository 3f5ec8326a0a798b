"""Shared inputs for the operator's unit tests: manifests and builder contexts."""

from __future__ import annotations

import json
from typing import Any

from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.builders import QueryContext
from sluice.operator.kube import MUTABLE_KINDS, SPEC_HASH, spec_hash

SQL = """SELECT customer, count(*) AS orders, sum(amount) AS total
FROM orders GROUP BY customer"""


def query_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "sources": [{
            "name": "orders", "topic": "orders",
            "schema": [{"name": "order_id", "type": "string"}, {"name": "customer", "type": "string"},
                       {"name": "amount", "type": "double"}],
        }],
        "sql": SQL,
        "sink": {"topic": "totals", "key": ["customer"], "outputMode": "update"},
        "trigger": {"processingTime": "5 seconds"},
    }
    spec.update(overrides)
    return spec


def cluster_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceId": "shop", "kafka": {"bootstrapServers": "kafka:9092"}}
    spec.update(overrides)
    return spec


def context(name: str = "totals", spec: dict[str, Any] | None = None,
            cluster: dict[str, Any] | None = None, **kw: Any) -> QueryContext:
    return QueryContext(
        namespace="shop", name=name, uid="0123456789abcdef-uid",
        spec=StreamingQuerySpec.model_validate(spec or query_spec()),
        cluster=QueryClusterSpec.model_validate(cluster or cluster_spec()), **kw,
    )


__all__ = ["MUTABLE_KINDS", "SPEC_HASH", "cluster_spec", "context", "json", "query_spec", "spec_hash"]
