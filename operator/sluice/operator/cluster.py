"""QueryCluster reconcile (validate, check Kafka) and the fan-out of a cluster change to its queries."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from sluice.core.manifest import validation_problems
from sluice.core.status import Reason, status_changed
from sluice.crd.querycluster import QueryClusterSpec
from sluice.operator.env import DEFAULT_CLUSTER, Env, Retry, Stop, backoff
from sluice.operator.kafka_admin import KafkaUnavailable
from sluice.operator.kube import KubeError

CLUSTER_REVISION = "sluice.dev/cluster-revision"


def queries_of(env: Env, namespace: str, cluster: str) -> list[dict[str, Any]]:
    """The StreamingQueries that refer to ``cluster`` and are not being deleted."""
    out = []
    for sq in env.kube.list("StreamingQuery", namespace):
        ref = ((sq.get("spec") or {}).get("clusterRef") or {}).get("name") or DEFAULT_CLUSTER
        if ref == cluster and not sq["metadata"].get("deletionTimestamp"):
            out.append(sq)
    return out


def annotate(env: Env, query: dict[str, Any], key: str, value: str) -> bool:
    """Set a query's annotation ``key`` to ``value`` unless it has it (the change of its metadata
    makes the query reconcile); returns whether it wrote (a query gone meanwhile: no)."""
    meta = query["metadata"]
    if (meta.get("annotations") or {}).get(key) == value:
        return False
    try:
        env.kube.patch("StreamingQuery", meta["namespace"], meta["name"],
                       {"metadata": {"annotations": {key: value}}})
    except KubeError as exc:
        if exc.status != 404:
            raise
        return False
    return True


def poke_queries_of_cluster(env: Env, body: dict[str, Any]) -> int:
    """Annotate the cluster's queries with its revision so kopf reconciles each (one at a time).

    The annotation changes the queries' metadata, which fires their update handler through
    kopf's per-object queue, so the fan-out never races a reconcile already running.
    """
    meta = body["metadata"]
    revision = f"{str(meta.get('uid', ''))[:8]}-{meta.get('generation')}"
    return sum(annotate(env, sq, CLUSTER_REVISION, revision)
               for sq in queries_of(env, meta["namespace"], meta["name"]))


def reconcile_cluster(env: Env, body: dict[str, Any], retry: int = 0) -> str:
    from sluice.operator.builders.context import default_image

    meta = body["metadata"]
    ns, name = meta["namespace"], meta["name"]
    status = dict(body.get("status") or {})
    now = env.clock()
    conditions = list(status.get("conditions") or [])
    from sluice.core.status import set_condition

    def write(phase: str, updates: dict[str, Any]) -> None:
        new = {"observedGeneration": meta.get("generation"), "phase": phase, "conditions": conditions,
               **updates}
        if status_changed(status, new):
            env.kube.patch_status("QueryCluster", ns, name, new)

    try:
        spec = QueryClusterSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        problems = validation_problems(exc, "spec")
        message = "; ".join(f"{p.field}: {p.message}" for p in problems)
        conditions = set_condition(conditions, "Degraded", True, Reason.CLUSTER_INVALID, message, now,
                                   meta.get("generation"))
        conditions = set_condition(conditions, "Ready", False, Reason.CLUSTER_INVALID, message, now,
                                   meta.get("generation"))
        write("Degraded", {})
        raise Stop(message) from exc
    image = spec.image or default_image()
    try:
        env.topic_admin(ns, spec).topics()
    except (KafkaUnavailable, Retry) as exc:
        message = f"Kafka at {spec.kafka.bootstrap_servers} is unreachable: {exc}"
        conditions = set_condition(conditions, "Degraded", True, Reason.KAFKA_UNREACHABLE, message, now,
                                   meta.get("generation"))
        conditions = set_condition(conditions, "Ready", False, Reason.KAFKA_UNREACHABLE, message, now,
                                   meta.get("generation"))
        write("Degraded", {"image": image})
        raise Retry(message, backoff(retry, 10)) from exc
    conditions = set_condition(conditions, "Degraded", False, Reason.AS_EXPECTED, "", now,
                               meta.get("generation"))
    conditions = set_condition(conditions, "Ready", True, Reason.KAFKA_REACHABLE,
                               f"Kafka at {spec.kafka.bootstrap_servers} answers", now,
                               meta.get("generation"))
    write("Ready", {"image": image})
    return "Ready"
