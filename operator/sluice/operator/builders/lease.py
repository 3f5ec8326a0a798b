"""The query's driver Lease: created once by the operator, then owned by the drivers."""

from __future__ import annotations

from typing import Any

from sluice.operator.builders.context import QueryContext
from sluice.operator.builders.driver import LEASE_SECONDS


def driver_lease(ctx: QueryContext) -> dict[str, Any]:
    """No holder: the first warm driver takes it. Owned by the query (garbage-collected with it).

    Create-only: the drivers write its spec and the holder's annotations, so the operator never
    replaces it (``kube.MUTABLE_KINDS`` leaves it out).
    """
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": ctx.metadata(ctx.lease, ctx.role),
        "spec": {"leaseDurationSeconds": LEASE_SECONDS},
    }
