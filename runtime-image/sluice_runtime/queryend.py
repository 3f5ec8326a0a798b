"""Whether a driver's streaming queries have ended, and how (pure, given one look at each).

Spark sets a failed query's cause before it marks the query terminated (``StreamExecution``:
``streamDeathCause`` in the catch, ``state.set(TERMINATED)`` in the finally). So one look that reads
``isActive`` first and, only for an inactive query, ``exception()`` after it never sees a failed
query without its cause. Reading ``isActive`` twice in one tick could: a query active at the first
read and failed by the second looked finished, and the driver ended with exit code 0 instead of
failing (and, for a new Avro schema id, instead of starting the query again).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

FAILED = "failed"
FINISHED = "finished"


@dataclass(frozen=True)
class QueryLook:
    """One look at a streaming query."""

    name: str
    active: bool
    failure: Any = None  # the query's exception, for an inactive query that failed


def look(queries: Iterable[Any]) -> list[QueryLook]:
    """Each query's activity read once, then the cause of those that are not active."""
    looks = []
    for q in queries:
        active = bool(q.isActive)
        looks.append(QueryLook(str(q.name), active, None if active else q.exception()))
    return looks


def ended(looks: Sequence[QueryLook]) -> tuple[str, QueryLook | None] | None:
    """``(FAILED, the first failed query)`` once one failed, ``(FINISHED, None)`` once none is
    active and none failed, else None (running)."""
    failed = next((q for q in looks if not q.active and q.failure is not None), None)
    if failed is not None:
        return FAILED, failed
    if not any(q.active for q in looks):
        return FINISHED, None
    return None
