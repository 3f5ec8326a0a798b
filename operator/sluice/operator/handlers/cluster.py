"""QueryCluster create / update / resume: validate, resolve the image, check Kafka."""

from __future__ import annotations

from typing import Any

from sluice.operator.cluster import poke_queries_of_cluster, reconcile_cluster
from sluice.operator.handlers._common import as_dict, env, kopf_errors


def handle(body: Any, retry: int, logger: Any = None, **_: Any) -> None:
    with kopf_errors("QueryCluster", "reconcile"):
        phase = reconcile_cluster(env(), as_dict(body), retry=retry)
    if logger is not None:
        logger.info(f"reconciled: phase {phase}")


def fan_out(body: Any, logger: Any = None, **_: Any) -> None:
    """Created or changed: let every query of this cluster reconcile (image, Spark settings, ...)."""
    with kopf_errors("QueryCluster", "fan-out"):
        poked = poke_queries_of_cluster(env(), as_dict(body))
    if logger is not None and poked:
        logger.info(f"asked {poked} queries to reconcile")
