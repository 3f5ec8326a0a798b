"""Reconcile orchestration: pure decisions (core.rollout, core.status, builders) + API calls.

Handlers stay thin and call into here. Nothing in this module imports kopf: retries are asked
for by raising ``Retry`` (temporary) or ``Stop`` (wait for the next spec edit); the handler
modules translate them into kopf's errors. Status is written *before* acting (write-ahead log).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from sluice.core.errors import CompileError
from sluice.core.manifest import validation_problems
from sluice.core.plan.model import Plan
from sluice.core.rollout import (
    Action,
    Step,
    classified_rollout,
    completed_plan,
    creation_rollout,
    next_action,
    outcome_of,
    upgrade_record,
)
from sluice.core.status import EventReason, Facts, Reason, StatusProblem
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator import builders, driverlease, legacy
from sluice.operator.builders.context import QueryContext
from sluice.operator.builders.storage import owner_patch
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
from sluice.operator.kafka_admin import KafkaUnavailable, sink_topic_settings

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

    # 3. compile
    try:
        plan = env.compile(spec.query())
    except CompileError as exc:
        first = exc.problems[0]
        message = "; ".join(p.render() if p.line is None else f"{p.field or 'spec.sql'}: {p.render()}"
                            for p in exc.problems)
        error = {"message": message, "field": first.field, "line": first.line, "column": first.column}
        _problem(run, spec, Reason.COMPILE_FAILED, message,
                 {"lastCompileError": error, "cluster": cluster_name}, EventReason.COMPILE_FAILED)
        raise Stop(message) from exc
    plan_hash = plan.hash or plan.compute_hash()
    plan_json = plan.to_json()

    pinned = run.status.get("plan")
    pinned_service = (run.status.get("identity") or {}).get("serviceId")
    if pinned_service and pinned_service != cluster.service_id:
        # identity is pinned at creation: a changed serviceId must not move a running query's
        # consumer group, transactional id and checkpoint (that would silently drop its state)
        log.warning("%s/%s keeps serviceId %r (cluster now says %r)", run.ns, run.name, pinned_service,
                    cluster.service_id)
        cluster = cluster.model_copy(update={"service_id": pinned_service})
    ctx = QueryContext(namespace=run.ns, name=run.name, uid=meta["uid"], spec=spec, cluster=cluster,
                       plan_version=int((pinned or {}).get("version") or 1))
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
        result = admin.ensure_topic(plan.sink.topic, partitions, replication)
    except KafkaUnavailable as exc:
        message = f"Kafka at {cluster.kafka.bootstrap_servers} is unreachable: {exc}"
        _problem(run, spec, Reason.KAFKA_UNREACHABLE, message, {"cluster": cluster_name},
                 EventReason.KAFKA_UNREACHABLE)
        raise Retry(message, backoff(retry)) from exc
    if result.created:
        run.event("Normal", EventReason.TOPIC_CREATED,
                  f"created topic {result.topic!r} ({partitions} partitions, replication {replication})")

    base_updates: dict[str, Any] = {"cluster": cluster_name, "lastCompileError": None}
    ready = False
    for _ in range(4):  # each turn moves the state machine by one step
        action = next_action(run.status.get("plan"), run.status.get("rollout"), plan_hash)
        log.debug("%s/%s: %s", run.ns, run.name, action.kind)
        if action.kind == "create":
            ready = _create(run, ctx, plan, plan_hash, plan_json, base_updates)
        elif action.kind == "resume":
            ready = _resume(run, ctx, plan, plan_hash, plan_json, action)
            if (action.rollout or {}).get("targetHash") == plan_hash:
                break
            continue
        elif action.kind == "classify":
            ready = _classify(run, ctx, spec, cluster, plan, plan_hash, plan_json, base_updates)
            if run.status.get("rollout", {}).get("step") == Step.APPLYING:
                continue
        elif action.kind == "cancel":
            record = dict(run.status.get("lastUpgrade") or {})
            if record:
                record["outcome"] = "Cancelled"
            run.write({"rollout": None, "lastUpgrade": record or None})
            run.event("Normal", EventReason.UPGRADE_CANCELLED, "the spec is back at the running plan")
            continue
        else:  # steady or wait: keep the workload converged on the pinned plan
            ready = _converge(run, ctx, run.status["plan"]["hash"], run.status["plan"]["configMap"])
        break

    problem = None
    rollout = run.status.get("rollout")
    if rollout and rollout.get("step") == Step.REJECTED:
        problem = StatusProblem(Reason.UPGRADE_REJECTED, rollout.get("message") or "upgrade rejected")
    run.write(base_updates, _facts(run, spec, problem=problem, driver_ready=ready))
    phase = str(run.status.get("phase"))
    env.metrics.phase(f"{run.ns}/{run.name}", phase)  # also counts queries that did not change
    return phase


def _identity_status(ctx: QueryContext) -> dict[str, Any]:
    ident = ctx.identity
    return {
        "serviceId": ident.service_id,
        "queryId": ident.query_id,
        "consumerGroup": ident.consumer_group,
        "transactionalId": ident.transactional_id,
        "checkpointPath": ident.checkpoint_path,
    }


def _ensure_plan_config_map(run: QueryRun, ctx: QueryContext, plan_hash: str, plan_json: str) -> str:
    cm = builders.plan_config_map(ctx, plan_hash, plan_json)
    run.env.kube.ensure(cm, probe_first=True)
    return str(cm["metadata"]["name"])


def _create(run: QueryRun, ctx: QueryContext, plan: Plan, plan_hash: str, plan_json: str,
            base: dict[str, Any]) -> bool:
    cm_name = ctx.names.plan_config_map(plan_hash)
    rollout = creation_rollout(plan_hash, cm_name, run.env.clock())
    # write-ahead: the target plan and the step, before anything that uses them exists
    run.write({**base, "rollout": rollout, "identity": _identity_status(ctx)},
              Facts(generation=run.generation, rollout_step=Step.DEPLOYING, suspended=ctx.spec.suspend))
    return _finish(run, ctx, plan, plan_hash, plan_json, rollout)


def _finish(run: QueryRun, ctx: QueryContext, plan: Plan | None, plan_hash: str, plan_json: str | None,
            rollout: dict[str, Any]) -> bool:
    """Carry out an in-flight rollout (Deploying / Applying) and mark it done."""
    cm_name = rollout["targetConfigMap"]
    if plan_json is not None:
        _ensure_plan_config_map(run, ctx, plan_hash, plan_json)
    ready = _converge(run, ctx, rollout["targetHash"], cm_name, fresh=rollout["step"] == Step.DEPLOYING)
    previous = run.status.get("plan")
    updates: dict[str, Any] = {"plan": completed_plan(rollout, plan.version if plan else None),
                               "rollout": None}
    if rollout["step"] == Step.APPLYING:
        record = dict(run.status.get("lastUpgrade") or {})
        if record.get("toHash") == rollout["targetHash"]:
            record["outcome"] = "Applied"
            updates["lastUpgrade"] = record
    run.write(updates)
    if rollout["step"] == Step.DEPLOYING:
        run.event("Normal", EventReason.PLAN_PINNED, f"plan {plan_hash[:12]} pinned in ConfigMap {cm_name}")
        run.event("Normal", EventReason.WORKLOAD_CREATED, f"driver Deployment {ctx.names.driver} created "
                  f"({ctx.driver_replicas} replicas)")
    else:
        run.event("Normal", EventReason.UPGRADE_APPLIED,
                  f"plan {(previous or {}).get('hash', '?')[:12]} -> {plan_hash[:12]} applied in place")
    return ready


def _resume(run: QueryRun, ctx: QueryContext, plan: Plan, plan_hash: str, plan_json: str,
            action: Action) -> bool:
    rollout = action.rollout or {}
    target = rollout.get("targetHash")
    if target == plan_hash:
        return _finish(run, ctx, plan, plan_hash, plan_json, rollout)
    # the spec moved on while the rollout was in flight: finish it from the pinned ConfigMap
    cm = run.env.kube.get("ConfigMap", run.ns, rollout.get("targetConfigMap") or "")
    if cm is None:
        run.write({"rollout": None})  # never started: forget it; the next turn re-plans
        return False
    return _finish(run, ctx, None, str(target), None, rollout)


def _classify(run: QueryRun, ctx: QueryContext, spec: StreamingQuerySpec, cluster: QueryClusterSpec,
              plan: Plan, plan_hash: str, plan_json: str, base: dict[str, Any]) -> bool:
    pinned = run.status["plan"]
    policy = spec.upgrade or cluster.upgrade
    old_cm = run.env.kube.get("ConfigMap", run.ns, pinned["configMap"])
    if old_cm is None:
        category, decision = "unsupported", "reject"
        reasons = [f"the pinned plan ConfigMap {pinned['configMap']} is missing"]
        changes: list[str] = []
    else:
        from sluice.core.naming import PLAN_FILE

        old = Plan.from_json(old_cm["data"][PLAN_FILE])
        result = run.env.classify(old, plan, policy)
        category, decision = str(result.category), str(result.decision)
        reasons = [str(r) for r in result.reasons]
        changes = [getattr(c, "message", str(c)) for c in result.changes]
    run.env.metrics.upgrades.labels(category=category, decision=decision).inc()
    cm_name = ctx.names.plan_config_map(plan_hash)
    now = run.env.clock()
    rollout = classified_rollout(pinned=pinned, target_hash=plan_hash, target_config_map=cm_name,
                                 category=category, decision=decision,
                                 allow_replace=policy.allow_replace, now=now)
    record = upgrade_record(from_hash=pinned["hash"], rollout=rollout, outcome=outcome_of(rollout["step"]),
                            reasons=reasons, changes=changes, now=now)
    if rollout["step"] == Step.APPLYING:
        record["outcome"] = "Applying"
    run.write({**base, "rollout": rollout, "lastUpgrade": record})  # write-ahead
    summary = f"{category} change: {decision}" + (f" ({reasons[0]})" if reasons else "")
    run.event("Normal", EventReason.UPGRADE_CLASSIFIED, summary)
    if rollout["step"] == Step.AWAITING_UPGRADE:
        run.event("Normal", EventReason.UPGRADE_PENDING, rollout["message"])
    elif rollout["step"] == Step.REJECTED:
        run.event("Warning", EventReason.UPGRADE_REJECTED, rollout["message"] + f": {summary}")
    if rollout["step"] == Step.APPLYING:
        _ensure_plan_config_map(run, ctx, plan_hash, plan_json)
        return False
    # waiting or rejected: the workload stays on the pinned plan
    return _converge(run, ctx, pinned["hash"], pinned["configMap"])


def _converge(run: QueryRun, ctx: QueryContext, plan_hash: str, config_map: str, fresh: bool = False) -> bool:
    """Create-or-converge every workload object; returns whether the active driver is ready."""
    kube = run.env.kube
    if not fresh and ctx.uid not in run.env._legacy_checked:  # once per query and operator process
        retired = legacy.retire_driver_statefulset(kube, ctx.namespace, ctx.names.driver)
        if retired == "deleted":
            run.event("Normal", EventReason.DRAINING,
                      f"stopping the driver StatefulSet {ctx.names.driver} of an earlier operator version")
        if retired != "gone":
            raise Retry(f"waiting for the old driver StatefulSet {ctx.names.driver} to go", 5)
        run.env._legacy_checked.add(ctx.uid)
    lease: dict[str, Any] | None = None
    for obj in builders.workload_objects(ctx, plan_hash, config_map):
        existing, outcome = kube.ensure(obj, probe_first=not fresh)
        kind = obj["kind"]
        if kind == "PersistentVolumeClaim" and outcome == "unchanged":
            owners = existing["metadata"].get("ownerReferences") or []
            wants_owner = not ctx.retain_state
            if bool(owners) != wants_owner:
                kube.patch("PersistentVolumeClaim", ctx.namespace, ctx.names.state_claim, owner_patch(ctx))
        if kind == "Lease":
            lease = driverlease.adopt(kube, ctx, existing)
            lease = driverlease.forward_handoff(kube, run.body, lease)
        if kind == "Deployment":
            replicas = obj["spec"]["replicas"]
            was_suspended = run.status.get("phase") == "Suspended"
            if replicas == 0 and not was_suspended and not fresh:
                run.event("Normal", EventReason.SUSPENDED, "drivers scaled to 0 (draining); state kept")
            elif replicas >= 1 and was_suspended:
                run.event("Normal", EventReason.RESUMED, f"drivers scaled to {replicas}")
    if ctx.driver_replicas == 0:
        return False
    return driverlease.active_ready(kube, ctx.namespace, lease)
