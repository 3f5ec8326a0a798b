"""Driver StatefulSet events: keep the owning query's Ready condition in step with its pods."""

from __future__ import annotations

from typing import Any

from sluice.operator.handlers._common import env
from sluice.operator.reconcile import refresh_readiness

#: last readiness seen per StatefulSet uid (saves a GET of the query on every StatefulSet event)
_SEEN: dict[str, bool] = {}


def handle(body: Any, namespace: str, type: str | None = None, **_: Any) -> None:
    annotations = body.get("metadata", {}).get("annotations", {}) or {}
    query = annotations.get("sluice.dev/query-name")
    if not query or type == "DELETED":
        _SEEN.pop(body.get("metadata", {}).get("uid", ""), None)
        return
    status = body.get("status", {}) or {}
    spec = body.get("spec", {}) or {}
    ready = (status.get("readyReplicas") or 0) >= 1 and (spec.get("replicas") or 0) >= 1 and (
        status.get("observedGeneration") == body.get("metadata", {}).get("generation")
    ) and (status.get("updatedReplicas") or 0) >= 1
    uid = body.get("metadata", {}).get("uid", "")
    previous = _SEEN.get(uid)
    _SEEN[uid] = ready
    if previous is None and not ready:
        return  # first sight of a driver that is not ready: the reconcile already said so
    if previous == ready:
        return
    e = env()
    sq = e.kube.get("StreamingQuery", namespace, query)
    if sq is None or (sq.get("status") or {}).get("ready") == ready:
        return
    refresh_readiness(e, sq, ready)
