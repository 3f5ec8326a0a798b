"""Objects left by earlier operator versions that would get in the way of the current layout.

Before standby drivers, the driver ran as a StatefulSet ``<q>-driver``. Its pod knows nothing of
the driver Lease, so it must be gone before the Deployment's drivers start on the same checkpoint.
"""

from __future__ import annotations

from sluice.operator.kube import Kube


def retire_driver_statefulset(kube: Kube, namespace: str, name: str) -> str:
    """Delete the old driver StatefulSet, its pods first (foreground: each pod drains within its
    termination grace). Returns ``gone``, ``deleting`` (asked before) or ``deleted`` (asked now)."""
    sts = kube.get("StatefulSet", namespace, name)
    if sts is None:
        return "gone"
    if sts["metadata"].get("deletionTimestamp"):
        return "deleting"
    kube.delete("StatefulSet", namespace, name, propagation="Foreground")
    return "deleted"
