"""QueryCluster create / update / resume: validate, resolve the image, check Kafka."""

from __future__ import annotations

from typing import Any

from sluice.operator.cluster import poke_queries_of_cluster, reconcile_cluster
from sluice.operator.handlers._kopf import as_dict, env, kopf_errors
from sluice.operator.waves import roll_fleet

#: seconds between looks at a rollout across the cluster's queries while it is in progress
ROLLOUT_INTERVAL = 5.0


def handle(body: Any, retry: int, logger: Any = None, **_: Any) -> None:
    with kopf_errors("QueryCluster", "reconcile"):
        phase = reconcile_cluster(env(), as_dict(body), retry=retry)
        _roll(as_dict(body))
    if logger is not None:
        logger.info(f"reconciled: phase {phase}")


def rollout_in_progress(status: Any = None, **_: Any) -> bool:
    """Whether the cluster's change is still being rolled across its queries (the timer's filter)."""
    return ((status or {}).get("rollout") or {}).get("state") == "Progressing"


def rollout_tick(body: Any, logger: Any = None, **_: Any) -> None:
    """The rollout timer: admit the next queries once earlier ones finished."""
    with kopf_errors("QueryCluster", "rollout"):
        state = _roll(as_dict(body))
    if logger is not None and state != "Progressing":
        logger.info(f"rollout {state}")


def _roll(body: dict[str, Any]) -> str | None:
    meta = body["metadata"]
    fresh = env().kube.get("QueryCluster", meta["namespace"], meta["name"])
    return roll_fleet(env(), fresh) if fresh is not None else None


def fan_out(body: Any, logger: Any = None, **_: Any) -> None:
    """Created or changed: let every query of this cluster reconcile (image, Spark settings, ...)."""
    with kopf_errors("QueryCluster", "fan-out"):
        poked = poke_queries_of_cluster(env(), as_dict(body))
    if logger is not None and poked:
        logger.info(f"asked {poked} queries to reconcile")
