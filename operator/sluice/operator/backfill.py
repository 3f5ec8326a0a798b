"""The backfill steps of a replace (blue/green, ``replaceStrategy: backfill``).

``Backfilling``: the stable version keeps serving its topic while the new plan version runs beside
it in a workload of its own (Deployment and Lease ``<query>-backfill``, one driver), on its own
checkpoint, consumer group and transactional id, reading its sources from the earliest offsets (or
``backfillFrom``) into its own topic (``<sink>-v<N+1>``, or the sink topic the edit named). Once
it passed the health gate and is at most ``maxLagRecords`` behind, the rollout goes to
``Applying`` (:func:`stop`): the backfill drains and its workload goes, then the query's drivers
move to the new version, which continues the backfill's checkpoint; the usual gate follows.

A backfill that fails its gate (or a spec reverted meanwhile) is discarded: the stable version
never stopped. Decisions are pure (:mod:`sluice.core.rollout`, :mod:`sluice.core.gate`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from sluice.core import gate
from sluice.core.driverreport import DriverError
from sluice.core.election import LeaseRecord
from sluice.core.records import Rollout
from sluice.core.rollout import Step, caught_up, with_message
from sluice.core.spec import UpgradePolicy
from sluice.core.status import EventReason, Facts
from sluice.operator import builders
from sluice.operator.builders.context import BACKFILL_ROLE, QueryContext
from sluice.operator.env import QueryRun
from sluice.operator.kafka_admin import KafkaUnavailable, sink_topic_settings
from sluice.operator.lease import driver_selector
from sluice.operator.workload import converge_pinned


def backfill_context(target: QueryContext, rollout: Rollout | None) -> QueryContext:
    """The backfill workload's context: the new version (``target``), on its own topic and start."""
    return dataclasses.replace(target, previous=None, output_topic=rollout.output_topic if rollout else None,
                               start_from=(rollout.backfill_from if rollout else None) or "earliest",
                               role=BACKFILL_ROLE)


def pods(run: QueryRun, ctx: QueryContext) -> list[dict[str, Any]]:
    return run.env.kube.list("Pod", run.ns, driver_selector(ctx.names.base, BACKFILL_ROLE))


def _lease(run: QueryRun, name: str) -> LeaseRecord | None:
    lease = run.env.kube.get("Lease", run.ns, name)
    return LeaseRecord.from_lease(lease) if lease is not None else None


def _ensure_topic(run: QueryRun, ctx: QueryContext, topic: str) -> None:
    """The new version's topic, created like the query's sink topic."""
    settings = sink_topic_settings(ctx.spec.sink, ctx.cluster.kafka)
    result = run.env.topic_admin(run.ns, ctx.cluster).ensure_topic(topic, settings)
    if result.created:
        run.event("Normal", EventReason.TOPIC_CREATED, f"created topic {topic!r} for the backfill "
                  f"({settings.describe()})")


@dataclasses.dataclass(frozen=True)
class BackfillResult:
    """What :func:`advance` found: ``wait``, ``fail`` (roll back: ``message``, ``error``) or
    ``switch`` (the rollout written as caught up, ``rollout``); and the stable driver's readiness."""

    kind: str
    ready: bool
    message: str = ""
    error: DriverError | None = None
    rollout: Rollout | None = None


def advance(run: QueryRun, ctx: QueryContext, target: QueryContext, rollout: Rollout,
            policy: UpgradePolicy) -> BackfillResult:
    """Backfilling: keep the stable drivers converged, run the backfill, and evaluate its gate and
    lag; the executor rolls back or switches as the result says."""
    ready = converge_pinned(run, ctx)
    bctx = backfill_context(target, rollout)
    try:
        _ensure_topic(run, ctx, str(rollout.output_topic))
    except KafkaUnavailable as exc:
        why = f"waiting for Kafka to create the backfill's topic: {exc}"
        run.write({"rollout": with_message(rollout, why)})
        return BackfillResult("wait", ready)
    for obj in (builders.driver_lease(bctx),
                builders.driver_deployment(bctx, rollout.target_hash, str(rollout.target_config_map))):
        run.env.kube.ensure(obj, probe_first=True)
    now = gate.parse_time(run.env.clock()) or dt.datetime.now(dt.UTC)
    result = gate.evaluate(
        plan_hash=rollout.target_hash, start_epoch=0, started=gate.parse_time(rollout.started) or now,
        now=now, record=_lease(run, bctx.lease), pods=pods(run, ctx), batches_needed=policy.health_batches,
        timeout=float(policy.health_timeout_seconds), max_dead_letter_ratio=policy.max_dead_letter_ratio,
    )
    if result.verdict == gate.Verdict.FAIL:
        return BackfillResult("fail", ready, message=result.message, error=result.error)
    lag = result.progress.lag_records if result.progress is not None else None
    if result.verdict == gate.Verdict.WAIT:
        message = result.message
    else:
        done, message = gate.backfill_lag(result.progress, rollout.max_lag_records or 0)
        if done:
            main = _lease(run, ctx.lease)
            switching = caught_up(rollout, now=run.env.clock(), lag=int(lag or 0)).model_copy(update={
                "start_epoch": main.transitions if main is not None else 0, "lag_records": lag})
            run.write({"rollout": switching}, Facts(generation=run.generation, plan_pinned=True,
                                                    rollout_step=Step.APPLYING, suspended=ctx.spec.suspend))
            run.event("Normal", EventReason.BACKFILL_CAUGHT_UP,
                      f"plan version {rollout.target_plan_version} on topic {rollout.output_topic!r}: "
                      f"{result.message}; {message}; switching")
            return BackfillResult("switch", ready, rollout=switching)
    message = f"backfilling into {rollout.output_topic!r}: {message}"
    if rollout.message != message or rollout.lag_records != lag:
        run.write({"rollout": rollout.model_copy(update={"message": message, "lag_records": lag})})
    return BackfillResult("wait", ready)


def stop(run: QueryRun, ctx: QueryContext) -> str | None:
    """Remove the backfill's workload; what it still waits for (its driver drains first), if anything."""
    bctx = backfill_context(ctx, None)
    run.env.kube.delete("Deployment", run.ns, bctx.workload_name)
    left = pods(run, ctx)
    if left:
        names = ", ".join(str(p["metadata"]["name"]) for p in left)
        return f"waiting for the backfill driver ({names}) to drain and stop"
    run.env.kube.delete("Lease", run.ns, bctx.lease)
    return None
