"""StreamingQuery reconcile (create, update, resume): validate the spec, find the cluster, compile,
ensure the sink topic, then let the rollout executor (``rollout.advance``) carry out the rollout
state machine, and write the conditions.

The rest of the reconcile lives beside it: ``common`` (``Env``, ``QueryRun``, ``Retry``,
``Stop``), ``rollout`` (the executor), ``workload`` (the workload objects), ``deletion`` (the
finalizer) and ``cluster`` (QueryCluster). The names other code imported from this module
before the split are still importable from here (``__all__``).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from sluice.core.errors import CompileError
from sluice.core.manifest import validation_problems
from sluice.core.rollout import Step, held_back
from sluice.core.status import EventReason, Reason, StatusProblem
from sluice.core.versions import live_topic
from sluice.crd.engine import WORKLOAD_TEMPLATE
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator import builders, pinning
from sluice.operator.builders.context import QueryContext
from sluice.operator.cluster import CLUSTER_REVISION, poke_queries_of_cluster, reconcile_cluster
from sluice.operator.common import (
    DEFAULT_CLUSTER,
    MAX_BACKOFF,
    Env,
    EventSink,
    QueryRun,
    Retry,
    Stop,
    _facts,
    _problem,
    backoff,
    read_kafka_secrets,
)
from sluice.operator.deletion import KAFKA_DELETE_RETRIES, delete_query
from sluice.operator.drivers import driver_problem
from sluice.operator.kafka_admin import KafkaUnavailable, sink_topic_settings
from sluice.operator.pinning import Desired, Engines
from sluice.operator.rollout import advance
from sluice.operator.upgrade import pinned_context
from sluice.operator.workload import _identity_status

__all__ = [
    "CLUSTER_REVISION",
    "DEFAULT_CLUSTER",
    "KAFKA_DELETE_RETRIES",
    "MAX_BACKOFF",
    "Env",
    "EventSink",
    "QueryRun",
    "Retry",
    "Stop",
    "_facts",
    "_identity_status",
    "backoff",
    "delete_query",
    "poke_queries_of_cluster",
    "read_kafka_secrets",
    "reconcile_cluster",
    "reconcile_query",
]

log = logging.getLogger("sluice.operator")


def _pinned_records(run: QueryRun, desired: Desired, engs: Engines) -> dict[str, Any]:
    """``status.plan`` with what it was compiled from and the re-plan on offer, ``status.engine`` with
    why the QueryCluster's engine waits (both only while nothing is in flight towards them)."""
    out: dict[str, Any] = {}
    plan = run.status.get("plan")
    engine = run.status.get("engine") or (engs.stable.record() if plan else None)
    if engine is not None:  # a status from before engines were pinned adopts the one it runs on
        stable = engine.get("digest") == engs.stable.compute_digest()
        out["engine"] = {**{k: v for k, v in engine.items() if k != "waiting"},
                         **({"waiting": engs.waiting} if engs.waiting and stable else {})}
    if plan and not run.status.get("rollout") and plan.get("hash") == desired.hash:
        kept = {k: v for k, v in plan.items() if k != "replan"}
        out["plan"] = {**kept, "inputs": desired.inputs.to_dict(),
                       **({"replan": desired.replan} if desired.replan else {})}
    elif plan and plan.get("replan"):
        out["plan"] = {k: v for k, v in plan.items() if k != "replan"}
    return out


def reconcile_query(env: Env, body: dict[str, Any], retry: int = 0) -> str:
    """Bring one StreamingQuery to its desired state; returns the resulting phase."""
    run = QueryRun(env, body, dict(body.get("status") or {}))
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return "Deleting"

    # 1. the spec (the API server validated its shape; pydantic checks the rest)
    try:
        spec = StreamingQuerySpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        problems = validation_problems(exc, "spec")
        message = "; ".join(f"{p.field}: {p.message}" for p in problems)
        _problem(run, None, Reason.INVALID_SPEC, message, event=EventReason.INVALID_SPEC)
        raise Stop(message) from exc

    # 2. the cluster
    cluster_name = spec.cluster_ref.name if spec.cluster_ref else DEFAULT_CLUSTER
    cluster_obj = env.kube.get("QueryCluster", run.ns, cluster_name)
    if cluster_obj is None:
        message = f"QueryCluster {cluster_name!r} not found in namespace {run.ns!r}"
        _problem(run, spec, Reason.CLUSTER_NOT_FOUND, message, {"cluster": cluster_name},
                 EventReason.CLUSTER_NOT_FOUND)
        raise Retry(message, backoff(retry))
    try:
        cluster = QueryClusterSpec.model_validate(cluster_obj.get("spec") or {})
    except ValidationError as exc:
        message = f"QueryCluster {cluster_name!r} is invalid: {exc.errors()[0]['msg']}"
        _problem(run, spec, Reason.CLUSTER_INVALID, message, {"cluster": cluster_name})
        raise Retry(message, backoff(retry)) from exc

    # 3. the engine and the plan: the pinned ones, unless the user changed what they come from
    engs = pinning.engines(run, cluster, cluster_obj)
    policy = spec.upgrade or cluster.upgrade
    try:
        desired = pinning.desired_plan(run, spec, engs, policy)
    except CompileError as exc:
        first = exc.problems[0]
        message = "; ".join(p.render() if p.line is None else f"{p.field or 'spec.sql'}: {p.render()}"
                            for p in exc.problems)
        error = {"message": message, "field": first.field, "line": first.line, "column": first.column}
        _problem(run, spec, Reason.COMPILE_FAILED, message,
                 {"lastCompileError": error, "cluster": cluster_name}, EventReason.COMPILE_FAILED)
        raise Stop(message) from exc
    plan = desired.plan

    pinned = run.status.get("plan")
    pinned_service = (run.status.get("identity") or {}).get("serviceId")
    if pinned_service and pinned_service != cluster.service_id:
        # identity is pinned at creation: a changed serviceId must not move a running query's
        # consumer group, transactional id and checkpoint (that would silently drop its state)
        log.warning("%s/%s keeps serviceId %r (cluster now says %r)", run.ns, run.name, pinned_service,
                    cluster.service_id)
        cluster = cluster.model_copy(update={"service_id": pinned_service})
    base_ctx = QueryContext(namespace=run.ns, name=run.name, uid=meta["uid"], spec=spec, cluster=cluster)
    ctx = pinned_context(base_ctx.on_engine(engs.stable, freeze=engs.stable.template != WORKLOAD_TEMPLATE),
                         pinned)
    layout_problem = builders.standby_storage_problem(ctx, cluster_name)
    if layout_problem is not None:  # a driver layout the state volume cannot carry: touch nothing
        _problem(run, spec, Reason.INVALID_SPEC, layout_problem, {"cluster": cluster_name},
                 EventReason.INVALID_SPEC)
        raise Stop(layout_problem)

    # 4. Kafka: the sink topic
    try:
        admin = env.topic_admin(run.ns, cluster)
        partitions, replication = sink_topic_settings(spec.sink.partitions, spec.sink.replication_factor,
                                                      cluster.kafka)
        # the topic the running version writes (a backfill may have moved it off the plan's sink topic)
        result = admin.ensure_topic(ctx.output_topic or plan.sink.topic, partitions, replication)
    except KafkaUnavailable as exc:
        message = f"Kafka at {cluster.kafka.bootstrap_servers} is unreachable: {exc}"
        _problem(run, spec, Reason.KAFKA_UNREACHABLE, message, {"cluster": cluster_name},
                 EventReason.KAFKA_UNREACHABLE)
        raise Retry(message, backoff(retry)) from exc
    if result.created:
        run.event("Normal", EventReason.TOPIC_CREATED,
                  f"created topic {result.topic!r} ({partitions} partitions, replication {replication})")

    # 5. the rollout state machine, carried out step by step, and the workload objects
    base_updates: dict[str, Any] = {"cluster": cluster_name, "lastCompileError": None}
    ready = advance(run, ctx, spec, cluster, desired, engs, base_updates)
    base_updates.update(_pinned_records(run, desired, engs))
    if not run.status.get("output") and run.status.get("plan"):  # a query from before status.output
        topic = live_topic(run.status.get("plan"), run.status.get("versions")) or plan.sink.topic
        base_updates["output"] = {"topic": topic}

    # 6. observedGeneration, conditions and phase
    problem = None
    rollout = run.status.get("rollout")
    if rollout and rollout.get("step") == Step.REJECTED:
        problem = StatusProblem(Reason.UPGRADE_REJECTED, rollout.get("message") or "upgrade rejected")
    elif rollout and rollout.get("step") == Step.FAILED:
        problem = StatusProblem(Reason.UPGRADE_FAILED, rollout.get("message") or "upgrade failed")
    elif not rollout and held_back(run.status.get("lastUpgrade"), desired.hash, run.generation,
                                   engs.desired.compute_digest()):
        last = run.status["lastUpgrade"]
        error = (last.get("error") or {})
        why = (f"{error.get('class')}: {error.get('message')}" if error
               else last.get("message") or "the gate failed")
        problem = StatusProblem(Reason.UPGRADE_ROLLED_BACK,
                                f"the upgrade to plan {desired.hash[:12]} was rolled back ({why}); plan "
                                f"{run.status['plan']['hash'][:12]} runs; edit the spec to try again")
    elif not rollout and run.status.get("plan") and not spec.suspend:
        problem = driver_problem(env, ctx, run.status["plan"]["hash"], ready)
    run.write(base_updates, _facts(run, spec, problem=problem, driver_ready=ready))
    phase = str(run.status.get("phase"))
    env.metrics.phase(f"{run.ns}/{run.name}", phase)  # also counts queries that did not change
    return phase
