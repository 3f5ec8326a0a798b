"""Driver Lease events: a new holder or takeover record updates ``status.drivers``, Ready, and
posts ``FailedOver`` / ``HandedOff`` once."""

from __future__ import annotations

from typing import Any

from sluice.core import election
from sluice.operator.drivers import refresh_drivers
from sluice.operator.handlers._kopf import as_dict, env, kopf_errors

#: what was last reported per Lease uid: renewals (every few seconds) change nothing of it
_SEEN: dict[str, tuple[str, str | None]] = {}


def handle(body: Any, namespace: str, type: str | None = None, **_: Any) -> None:
    meta = body.get("metadata", {}) or {}
    annotations = meta.get("annotations", {}) or {}
    query = annotations.get("sluice.dev/query-name")
    uid = meta.get("uid", "")
    if not query or type == "DELETED":
        _SEEN.pop(uid, None)
        return
    holder = str((body.get("spec", {}) or {}).get("holderIdentity") or "")
    key = (holder, annotations.get(election.LAST_TAKEOVER))
    if _SEEN.get(uid) == key:
        return
    with kopf_errors("Lease", "drivers"):
        refresh_drivers(env(), namespace, query, as_lease(body))
    _SEEN[uid] = key  # only once reported: a failed refresh is tried again on the next event


def as_lease(body: Any) -> dict[str, Any]:
    lease = as_dict(body)
    lease["metadata"]["annotations"] = dict(lease["metadata"].get("annotations") or {})
    return lease
