"""Driver Deployment events: keep the owning query's drivers status and Ready in step with its pods."""

from __future__ import annotations

from typing import Any

from sluice.operator.drivers import refresh_drivers
from sluice.operator.handlers._kopf import env, kopf_errors

#: last status seen per Deployment uid (saves API calls on events that change nothing we report)
_SEEN: dict[str, tuple[Any, ...]] = {}
_KEYS = ("replicas", "readyReplicas", "updatedReplicas", "availableReplicas", "unavailableReplicas",
         "observedGeneration")


def handle(body: Any, namespace: str, type: str | None = None, **_: Any) -> None:
    meta = body.get("metadata", {}) or {}
    query = (meta.get("annotations", {}) or {}).get("sluice.dev/query-name")
    uid = meta.get("uid", "")
    if not query or type == "DELETED":
        _SEEN.pop(uid, None)
        return
    status = body.get("status", {}) or {}
    key = (meta.get("generation"), (body.get("spec", {}) or {}).get("replicas"),
           *(status.get(k) for k in _KEYS))
    previous = _SEEN.get(uid)
    if previous is None or previous == key:
        _SEEN[uid] = key
        return  # first sight (the reconcile and the Lease watch report it) or nothing new
    with kopf_errors("Deployment", "drivers"):
        refresh_drivers(env(), namespace, query)
    _SEEN[uid] = key  # only once reported: a failed refresh is tried again on the next event
