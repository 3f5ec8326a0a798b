"""StreamingQuery create / update / resume, and the rollout timer: one level-based reconcile (first
answering a rollback request annotated on the object, if one waits).

The reconcile of one query never runs twice at once (a lock per query: kopf runs timers beside
the change handlers), and it starts from the object as the API server has it now, not from the
body of the event that woke it (an earlier reconcile may have written the status since).
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from sluice.core.gate import parse_time
from sluice.core.rollout import GATED
from sluice.operator.handlers._kopf import as_dict, env, kopf_errors
from sluice.operator.reconcile import reconcile_query
from sluice.operator.rollback_request import honour_request

#: seconds between evaluations of a rollout's health gate
GATE_INTERVAL = 2.0
#: how often a query whose clean-up is due is reconciled
CLEANUP_INTERVAL = 5.0

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock(uid: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(uid, threading.Lock())


def cleanup_pending(status: Any = None, **_: Any) -> bool:
    """Whether a retired plan version waits to be cleaned up (the timer's filter: kopf evaluates
    filters on the object's events only, so it must not depend on the time)."""
    return bool(((status or {}).get("cleanup") or {}).get("nextDue"))


def cleanup_due(status: Any = None) -> bool:
    """Whether a retired plan version may be cleaned up now (or the clean-up waits on something)."""
    due = parse_time(((status or {}).get("cleanup") or {}).get("nextDue"))
    return due is not None and due <= dt.datetime.now(dt.UTC)


def cleanup_tick(body: Any, status: Any = None, **kwargs: Any) -> None:
    """The clean-up timer: reconcile once ``status.cleanup.nextDue`` has come, else nothing."""
    if cleanup_due(status):
        handle(body, **kwargs)


def rollout_in_flight(status: Any = None, **_: Any) -> bool:
    """Whether the query has a rollout the timer must drive (its gate waits on the drivers)."""
    rollout = (status or {}).get("rollout") or {}
    return rollout.get("step") in GATED


def handle(body: Any, retry: int = 0, logger: Any = None, **_: Any) -> None:
    current = as_dict(body)
    meta = current["metadata"]
    with _lock(str(meta.get("uid"))), kopf_errors("StreamingQuery", "reconcile"):
        fresh = env().kube.get("StreamingQuery", meta["namespace"], meta["name"])
        if fresh is None:
            return
        fresh = honour_request(env(), fresh)  # the Argo CD rollback action's request, if one waits
        phase = reconcile_query(env(), fresh, retry=retry)
    if logger is not None:
        logger.info(f"reconciled: phase {phase}")


def rollback_request(body: Any, **_: Any) -> None:
    """A new rollback request annotated on the query: answer it now (the reconcile that follows the
    spec patch carries the edit out)."""
    meta = as_dict(body)["metadata"]
    with _lock(str(meta.get("uid"))), kopf_errors("StreamingQuery", "rollback request"):
        fresh = env().kube.get("StreamingQuery", meta["namespace"], meta["name"])
        if fresh is not None:
            honour_request(env(), fresh)
