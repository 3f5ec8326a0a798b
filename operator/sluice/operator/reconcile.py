"""StreamingQuery reconcile (create, update, resume): observe (validate the spec, find the cluster,
pin the engine and the plan), ensure the sink topic, act (the rollout executor,
``executor.advance``, carries out what the pure state machine ``sluice.core.rollout`` decides),
then decide and write the conditions.

The rest of the reconcile lives beside it: ``env`` (``Env``, ``QueryRun``, ``Retry``, ``Stop``),
``desired`` (the engine and plan asked for), ``executor`` and ``upgrade`` (the rollout steps),
``workload`` (the workload objects), ``cleaner`` (retired versions), ``deletion`` (the finalizer)
and ``cluster`` (QueryCluster). The core decides, these modules act.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sluice.core.compiler import source_subjects
from sluice.core.errors import CompileError
from sluice.core.formats.registry import SourceSchemaStatus
from sluice.core.manifest import validation_problems
from sluice.core.plan.model import RegistrySchema
from sluice.core.rollout import Step, held_back
from sluice.core.spec import QuerySpec
from sluice.core.status import EventReason, Reason, StatusProblem, with_node_loss_condition
from sluice.crd.engine import WORKLOAD_TEMPLATE
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator import builders
from sluice.operator.builders.context import QueryContext
from sluice.operator.builders.memory import memory_problem
from sluice.operator.desired import Desired, Engines, desired_plan, engines, load_plan, with_pinned_service
from sluice.operator.drivers import driver_problem
from sluice.operator.env import (
    DEFAULT_CLUSTER,
    Env,
    QueryRun,
    Retry,
    Stop,
    _facts,
    _problem,
    backoff,
)
from sluice.operator.executor import advance
from sluice.operator.kafka_admin import KafkaUnavailable, sink_topic_settings
from sluice.operator.schemas import (
    check_registry,
    latest_source_schemas,
    report_source_schemas,
    sink_schema_ids,
    uses_registry,
    version_topics,
)
from sluice.operator.upgrade import pinned_context

log = logging.getLogger("sluice.operator")


def _pinned_records(run: QueryRun, desired: Desired, engs: Engines) -> dict[str, Any]:
    """``status.plan`` with what it was compiled from and the re-plan on offer, ``status.engine`` with
    why the QueryCluster's engine waits (both only while nothing is in flight towards them)."""
    out: dict[str, Any] = {}
    records = run.records
    if records.engine is not None:
        stable = records.engine.digest == engs.stable.compute_digest()
        waiting = engs.waiting if engs.waiting and stable else None
        out["engine"] = records.engine.model_copy(update={"waiting": waiting})
    plan = records.plan
    if plan is not None and records.rollout is None and plan.hash == desired.hash:
        out["plan"] = plan.model_copy(update={"inputs": desired.inputs, "replan": desired.replan})
    elif plan is not None and plan.replan is not None:
        out["plan"] = plan.model_copy(update={"replan": None})
    return out


@dataclass(frozen=True)
class Observed:
    """What a reconcile found: the spec, its QueryCluster, the engines and the plan asked for, and
    the context of the pinned version on the stable engine."""

    spec: StreamingQuerySpec
    cluster_name: str
    cluster: QueryClusterSpec
    engines: Engines
    desired: Desired
    ctx: QueryContext


def reconcile_query(env: Env, body: dict[str, Any], retry: int = 0) -> str:
    """Bring one StreamingQuery to its desired state; returns the resulting phase.

    Observe (the spec, the QueryCluster, the engines and the plan asked for: a problem is written
    and the reconcile stops or retries), make sure the sink topic exists, act (the rollout executor
    carries out what the state machine decides), then decide the conditions from what it left."""
    run = QueryRun(env, body, dict(body.get("status") or {}))
    if body["metadata"].get("deletionTimestamp"):
        return "Deleting"
    seen = _observe(run, retry)
    # whether a node loss leaves a driver elsewhere (the checkpoint storage decides where drivers may
    # go): written before any write that observes the generation (the rollout's own included), so
    # that a status observed for it has the condition too (the reducer keeps the conditions it does
    # not compute)
    tolerant, why = builders.node_loss(seen.ctx)
    with_node = with_node_loss_condition(run.status, tolerant, why, env.clock())
    if with_node is not run.status:
        run.write({"conditions": with_node["conditions"]})
    _ensure_sink_topic(run, seen, retry)
    seen = _with_sink_schemas(run, seen, retry)
    base_updates: dict[str, Any] = {"cluster": seen.cluster_name, "lastCompileError": None}
    ready = advance(run, seen.ctx, seen.spec, seen.cluster, seen.desired, seen.engines, base_updates)
    base_updates.update(_pinned_records(run, seen.desired, seen.engines))
    base_updates["sourceSchemas"] = _source_schemas(run, seen) or None
    problem = _standing_problem(run, seen, ready)
    run.write(base_updates, _facts(run, seen.spec, problem=problem, driver_ready=ready))
    phase = str(run.status.get("phase"))
    env.metrics.phase(run.ns, run.name, phase)  # also counts queries that did not change
    return phase


def _observe(run: QueryRun, retry: int) -> Observed:
    """The spec, its QueryCluster, the engines and the plan asked for; a problem with any of them is
    written to the status, and ends the reconcile (``Stop``: until the spec changes; ``Retry``)."""
    env, body = run.env, run.body
    # the spec (the API server validated its shape; pydantic checks the rest)
    try:
        spec = StreamingQuerySpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        problems = validation_problems(exc, "spec")
        message = "; ".join(f"{p.field}: {p.message}" for p in problems)
        _problem(run, None, Reason.INVALID_SPEC, message, event=EventReason.INVALID_SPEC)
        raise Stop(message) from exc

    # the cluster
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
        first = validation_problems(exc, "spec")[0]
        message = f"QueryCluster {cluster_name!r} is invalid: {first.field}: {first.message}"
        _problem(run, spec, Reason.CLUSTER_INVALID, message, {"cluster": cluster_name})
        raise Retry(message, backoff(retry)) from exc

    # the engine and the plan: the pinned ones, unless the user changed what they come from (a new
    # plan pins the latest schema of each avro source subject)
    check_registry(run, spec, cluster, cluster_name)
    engs = engines(run, cluster, cluster_obj)

    def resolve(query: QuerySpec) -> dict[str, RegistrySchema]:
        return latest_source_schemas(run, spec, query, cluster, cluster_name, retry)

    try:
        desired = desired_plan(run, spec, engs, spec.upgrade or cluster.upgrade, resolve)
    except CompileError as exc:
        first = exc.problems[0]
        message = "; ".join(p.render() if p.line is None else f"{p.field or 'spec.sql'}: {p.render()}"
                            for p in exc.problems)
        error = {"message": message, "field": first.field, "line": first.line, "column": first.column}
        _problem(run, spec, Reason.COMPILE_FAILED, message,
                 {"lastCompileError": error, "cluster": cluster_name}, EventReason.COMPILE_FAILED)
        raise Stop(message) from exc

    pinned = with_pinned_service(run, cluster)
    if pinned is not cluster:
        log.warning("%s/%s keeps serviceId %r (cluster now says %r)", run.ns, run.name, pinned.service_id,
                    cluster.service_id)
        cluster = pinned
    base_ctx = QueryContext(namespace=run.ns, name=run.name, uid=body["metadata"]["uid"], spec=spec,
                            cluster=cluster)
    ctx = pinned_context(base_ctx.on_engine(engs.stable, freeze=engs.stable.template != WORKLOAD_TEMPLATE),
                         run.records.plan)
    # a driver layout the state volume cannot carry, or containers too small for Spark: touch nothing
    # (executors on a claim one node attaches: on the engine that runs, or the one the cluster asks for)
    layout_problem = (builders.standby_storage_problem(ctx, cluster_name)
                      or builders.executor_storage_problem(ctx, cluster_name)
                      or builders.executor_storage_problem(base_ctx.on_engine(engs.desired), cluster_name)
                      or memory_problem(ctx, cluster_name))
    if layout_problem is not None:
        _problem(run, spec, Reason.INVALID_SPEC, layout_problem, {"cluster": cluster_name},
                 EventReason.INVALID_SPEC)
        raise Stop(layout_problem)
    return Observed(spec, cluster_name, cluster, engs, desired, ctx)


def _ensure_sink_topic(run: QueryRun, seen: Observed, retry: int) -> None:
    """The topic the running version writes (a backfill may have moved it off the plan's sink topic)."""
    spec, cluster = seen.spec, seen.cluster
    try:
        admin = run.env.topic_admin(run.ns, cluster)
        settings = sink_topic_settings(spec.sink, cluster.kafka)
        result = admin.ensure_topic(seen.ctx.output_topic or seen.desired.plan.sink.topic, settings)
    except KafkaUnavailable as exc:
        message = f"Kafka at {cluster.kafka.bootstrap_servers} is unreachable: {exc}"
        _problem(run, spec, Reason.KAFKA_UNREACHABLE, message, {"cluster": seen.cluster_name},
                 EventReason.KAFKA_UNREACHABLE)
        raise Retry(message, backoff(retry)) from exc
    if result.created:
        run.event("Normal", EventReason.TOPIC_CREATED,
                  f"created topic {result.topic!r} ({settings.describe()})")


def _with_sink_schemas(run: QueryRun, seen: Observed, retry: int) -> Observed:
    """The plan asked for and the plan that runs, with their avro sink schemas registered (a changed
    one checked for compatibility first): their ids reach the drivers through the context."""
    plans = {seen.desired.hash: seen.desired.plan}
    pinned = run.records.plan
    if pinned is not None and pinned.hash not in plans:
        cached = run.env.plans.get((run.ns, pinned.config_map))
        if cached is None and uses_registry(seen.desired.plan):
            cached = load_plan(run, pinned.config_map)
        if cached is not None:
            plans[pinned.hash] = cached
    topics = version_topics(run, seen.spec, seen.cluster, seen.ctx, plans)
    running = pinned.hash if pinned is not None else None
    ids = sink_schema_ids(run, seen.spec, seen.cluster, seen.cluster_name, plans, running, retry, topics)
    if not ids.value:
        return seen
    return dataclasses.replace(seen, ctx=dataclasses.replace(seen.ctx, sink_schema_ids=ids.value,
                                                             sink_key_schema_ids=ids.key))


def _source_schemas(run: QueryRun, seen: Observed) -> list[SourceSchemaStatus]:
    """The report of the running plan's avro source subjects (its plan read once per process)."""
    pinned = run.records.plan
    if pinned is None or (not source_subjects(seen.spec.query()) and not run.status.get("sourceSchemas")):
        return []
    try:
        plan = seen.desired.plan if seen.desired.hash == pinned.hash else load_plan(run, pinned.config_map)
    except Retry:  # the pinned plan's ConfigMap is gone: the rollout reports that; the report stays
        return [SourceSchemaStatus.model_validate(s) for s in run.status.get("sourceSchemas") or []]
    return report_source_schemas(run, seen.cluster, plan)


def _standing_problem(run: QueryRun, seen: Observed, ready: bool) -> StatusProblem | None:
    """What keeps the query Degraded once the rollout executor is done: a refused or failed upgrade,
    one rolled back that the spec still asks for, or a failing driver."""
    records = run.records
    rollout = records.rollout
    if rollout is not None and rollout.step == Step.REJECTED:
        return StatusProblem(Reason.UPGRADE_REJECTED, rollout.message or "upgrade rejected")
    if rollout is not None and rollout.step == Step.FAILED:
        return StatusProblem(Reason.UPGRADE_FAILED, rollout.message or "upgrade failed")
    if rollout is not None or records.plan is None:
        return None
    last = records.last_upgrade
    if last is not None and held_back(last, seen.desired.hash, run.generation,
                                      seen.engines.desired.compute_digest()):
        why = (f"{last.error.class_}: {last.error.message}" if last.error
               else last.message or "the gate failed")
        return StatusProblem(Reason.UPGRADE_ROLLED_BACK,
                             f"the upgrade to plan {seen.desired.hash[:12]} was rolled back ({why}); plan "
                             f"{records.plan.hash[:12]} runs; edit the spec to try again")
    if seen.spec.suspend:
        return None
    return driver_problem(run.env, seen.ctx, records.plan.hash, ready)
