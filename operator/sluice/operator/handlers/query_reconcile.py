"""StreamingQuery create / update / resume: one level-based reconcile."""

from __future__ import annotations

from typing import Any

from sluice.operator.handlers._common import as_dict, env, kopf_errors
from sluice.operator.reconcile import reconcile_query


def handle(body: Any, retry: int, logger: Any = None, **_: Any) -> None:
    with kopf_errors("StreamingQuery", "reconcile"):
        phase = reconcile_query(env(), as_dict(body), retry=retry)
    if logger is not None:
        logger.info(f"reconciled: phase {phase}")
