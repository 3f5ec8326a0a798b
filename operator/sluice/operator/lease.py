"""The operator's side of a query's driver Lease: adopt it, forward hand-off requests, and tell
whether the active driver (the holder) is ready.

The drivers own the Lease's spec and the holder's annotations; the operator only creates it (see
``builders.driver``), sets its owner when a driver created it first, and writes ``HANDOFF_REQUEST``.
Every write here is a merge patch of ``metadata`` only.
"""

from __future__ import annotations

from typing import Any

from sluice.core import election
from sluice.operator.builders.context import QueryContext
from sluice.operator.kube import Kube


def driver_selector(base: str, role: str = "driver") -> str:
    """Label selector of a query's driver pods (``role="backfill"``: a backfill's)."""
    return f"{election.QUERY_LABEL}={base},app.kubernetes.io/component={role}"


def adopt(kube: Kube, ctx: QueryContext, lease: dict[str, Any]) -> dict[str, Any]:
    """A Lease a driver created before the operator did: give it the query as owner and our labels
    (so it is garbage-collected with the query and seen by the operator's Lease watch)."""
    meta = lease.get("metadata") or {}
    desired = ctx.metadata(meta.get("name", ""), "driver")
    labels = meta.get("labels") or {}
    if meta.get("ownerReferences") and all(labels.get(k) == v for k, v in desired["labels"].items()):
        return lease
    patch = {"metadata": {"ownerReferences": desired["ownerReferences"], "labels": desired["labels"],
                          "annotations": desired["annotations"]}}
    return kube.patch("Lease", ctx.namespace, meta["name"], patch)


def handoff_patch(query: dict[str, Any], lease: dict[str, Any]) -> dict[str, Any] | None:
    """The Lease patch that forwards the query's ``sluice.dev/handoff`` annotation, if it is new."""
    wanted = ((query.get("metadata") or {}).get("annotations") or {}).get(election.QUERY_HANDOFF)
    if not wanted:
        return None
    record = election.LeaseRecord.from_lease(lease)
    current = election.HandoffRequest.from_json(record.annotations.get(election.HANDOFF_REQUEST))
    if current is not None and current.id == wanted:
        return None
    request = election.HandoffRequest(id=str(wanted), to="")
    return {"metadata": {"annotations": {election.HANDOFF_REQUEST: request.to_json()}}}


def forward_handoff(kube: Kube, query: dict[str, Any], lease: dict[str, Any]) -> dict[str, Any]:
    """Ask the active driver to hand over when the query's hand-off annotation changed."""
    patch = handoff_patch(query, lease)
    if patch is None:
        return lease
    meta = lease["metadata"]
    return kube.patch("Lease", meta["namespace"], meta["name"], patch)


def active_ready(kube: Kube, namespace: str, lease: dict[str, Any] | None) -> bool:
    """Whether the Lease holder's pod exists and is Ready (one GET, only when there is a holder)."""
    if lease is None:
        return False
    record = election.LeaseRecord.from_lease(lease)
    if not record.holder:
        return False
    pod = kube.get("Pod", namespace, election.pod_of(record.holder))
    return election.active_driver_ready(record, [pod] if pod is not None else [])
