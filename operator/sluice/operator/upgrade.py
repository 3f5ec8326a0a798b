"""The in-place upgrade steps of the rollout executor: switch, health gate, rollback.

Called by ``rollout.advance`` for rollouts in ``Applying``, ``Verifying`` and ``RollingBack``;
every function carries out one step, writes the next step into ``status.rollout`` and returns
whether the active driver is ready. Decisions are pure (``sluice.core.rollout``,
``sluice.core.gate``); this module reads the Lease and the driver pods, and writes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from sluice.core import gate
from sluice.core.driverreport import (
    BACKSTOP,
    RESTORE_REQUEST,
    Backstop,
    DriverError,
    RestoreRequest,
    same_engine,
)
from sluice.core.election import HOLDER_ENGINE, HOLDER_PLAN, LAST_TAKEOVER, LeaseRecord, Takeover, lease_name
from sluice.core.engine import rewrites_checkpoint
from sluice.core.replace import PreviousVersion
from sluice.core.rollout import (
    DISCARD,
    HAND_BACK,
    RESTORE,
    Outcome,
    Step,
    completed_plan,
    failed,
    finished_record,
    is_backfill,
    is_replace,
    rollback_mode,
    rolling_back,
    target_engine,
    verifying,
    with_history,
)
from sluice.core.spec import UpgradePolicy
from sluice.core.status import EventReason, Facts, Reason, StatusProblem
from sluice.core.versions import version_record, with_plan, with_rolled_back, with_running
from sluice.crd.engine import Engine
from sluice.operator import backfill
from sluice.operator.builders.context import QueryContext
from sluice.operator.common import QueryRun
from sluice.operator.driverlease import driver_selector
from sluice.operator.pinning import plan_of
from sluice.operator.workload import _converge, _identity_status

log = logging.getLogger("sluice.operator")

#: batches the stable plan must commit (or progress events) for a rollback to count as done
ROLLBACK_BATCHES = 1


def read_lease(run: QueryRun, ctx: QueryContext) -> LeaseRecord | None:
    lease = run.env.kube.get("Lease", run.ns, lease_name(ctx.names.base))
    return LeaseRecord.from_lease(lease) if lease is not None else None


def driver_pods(run: QueryRun, ctx: QueryContext) -> list[dict[str, Any]]:
    return run.env.kube.list("Pod", run.ns, driver_selector(ctx.names.base))


def error_status(error: DriverError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    out: dict[str, Any] = {"class": error.error_class, "message": error.message}
    if error.step:
        out["step"] = error.step
    return out


def pinned_context(ctx: QueryContext, pinned: dict[str, Any] | None) -> QueryContext:
    """The context of the pinned plan's version (the version it replaced with hand-off, the topic it
    writes when a backfill moved it)."""
    hand_off_from = (pinned or {}).get("handOffFrom")
    previous = PreviousVersion.from_dict(hand_off_from, "status.plan.handOffFrom") if hand_off_from else None
    return dataclasses.replace(ctx, plan_version=int((pinned or {}).get("version") or 1), previous=previous,
                               output_topic=(pinned or {}).get("outputTopic") or None)


def rollout_context(ctx: QueryContext, rollout: dict[str, Any]) -> QueryContext:
    """The context of the plan version a rollout puts the workload on: a replace's new version (new
    checkpoint, consumer group and transactional id) with the version it starts after, on the
    rollout's target engine when it changes the engine (the driver Deployment is never frozen for a
    rollout: it is what the rollout changes)."""
    target = rollout_engine(rollout)
    ctx = ctx.on_engine(target) if target is not None else dataclasses.replace(ctx, freeze_driver=False)
    version = int(rollout.get("targetPlanVersion") or ctx.plan_version)
    if version == ctx.plan_version:
        return ctx
    # a backfill's version continues the backfill's checkpoint: nothing to hand off from
    previous = rollout.get("previous") if not is_backfill(rollout) else None
    return dataclasses.replace(ctx, plan_version=version, previous=PreviousVersion.from_dict(
        previous, "status.rollout.previous") if previous else None,
        output_topic=rollout.get("outputTopic") or None)


def rollout_engine(rollout: dict[str, Any] | None) -> Engine | None:
    """The engine a rollout moves the drivers to (None: it keeps theirs)."""
    recorded = (rollout or {}).get("targetEngine")
    return Engine.model_validate(recorded).snapshot() if recorded else None


def gate_engine(rollout: dict[str, Any]) -> str | None:
    """The engine the target's drivers must report for the gate (None: the rollout keeps the
    engine, so any report of the target plan counts)."""
    return target_engine(rollout, None)


def switch(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any]) -> bool:
    """Applying: put the driver Deployment on the target plan (a new warm driver starts, the old
    one hands off when it is ready), then start the gate. A replace puts it on the new version; a
    backfill's workload stops first (one writer on the new version's checkpoint)."""
    if is_backfill(rollout):
        waiting = backfill.stop(run, ctx)
        if waiting is not None:
            stable = run.status["plan"]
            ready = _converge(run, ctx, stable["hash"], stable["configMap"])
            if rollout.get("message") != waiting:
                run.write({"rollout": {**rollout, "message": waiting}})
            return ready
    ready = _converge(run, rollout_context(ctx, rollout), rollout["targetHash"], rollout["targetConfigMap"])
    # the Lease term count was read before the Applying step was written: a driver of the target
    # plan that took over before an operator restart still counts, one from before the rollout not
    start_epoch = int(rollout.get("startEpoch") or 0)
    run.write({"rollout": verifying(rollout, now=run.env.clock(), start_epoch=start_epoch)},
              Facts(generation=run.generation, plan_pinned=True, rollout_step=Step.VERIFYING,
                    suspended=ctx.spec.suspend, driver_ready=ready))
    return ready


def verify(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any], policy: UpgradePolicy) -> bool:
    """Verifying: evaluate the gate of the target plan; succeed, wait, or fail (roll back / stop)."""
    ready = _converge(run, rollout_context(ctx, rollout), rollout["targetHash"], rollout["targetConfigMap"])
    result, record = _evaluate(run, ctx, rollout, policy, plan_hash=rollout["targetHash"],
                               start_epoch=rollout.get("startEpoch"),
                               started=rollout.get("gateStarted") or rollout["started"],
                               batches_needed=policy.health_batches,
                               max_dead_letter_ratio=policy.max_dead_letter_ratio,
                               engine=gate_engine(rollout))
    if result.verdict == gate.Verdict.WAIT:
        if rollout.get("message") != result.message:
            run.write({"rollout": {**rollout, "message": result.message}})
        return False
    if result.verdict == gate.Verdict.PASS:
        return _succeeded(run, ctx, rollout, record, result, ready)
    return _gate_failed(run, ctx, rollout, policy, record, result)


def _evaluate(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any], policy: UpgradePolicy, *,
              plan_hash: str, start_epoch: int | None, started: str | None, batches_needed: int,
              max_dead_letter_ratio: float | None = None,
              engine: str | None = None) -> tuple[gate.GateResult, LeaseRecord | None]:
    """The gate of ``plan_hash`` (on ``engine``, when given) now, from the Lease and the driver pods;
    the deadline counts from ``started``, errors from the rollout's start. Returns the Lease record
    read as well."""
    now = gate.parse_time(run.env.clock()) or dt.datetime.now(dt.UTC)
    record = read_lease(run, ctx)
    result = gate.evaluate(
        plan_hash=plan_hash, start_epoch=int(start_epoch or 0), started=gate.parse_time(started) or now,
        now=now, record=record, pods=driver_pods(run, ctx), batches_needed=batches_needed,
        timeout=float(policy.health_timeout_seconds), max_dead_letter_ratio=max_dead_letter_ratio,
        errors_since=gate.parse_time(rollout["started"]), engine=engine,
    )
    return result, record


def _takeover_gap(record: LeaseRecord | None, plan_hash: str, engine: str | None = None) -> float | None:
    takeover = Takeover.from_json(record.annotations.get(LAST_TAKEOVER)) if record is not None else None
    if takeover is None or takeover.plan_hash != plan_hash or not same_engine(takeover.engine, engine):
        return None
    return takeover.gap_seconds


def _succeeded(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any], record: LeaseRecord | None,
               result: gate.GateResult, ready: bool) -> bool:
    now = run.env.clock()
    epoch = result.progress.epoch if result.progress is not None else None
    target = rollout_context(ctx, rollout)
    upgrade = finished_record(run.status.get("lastUpgrade"), Outcome.SUCCEEDED, now,
                              gapSeconds=_takeover_gap(record, rollout["targetHash"], gate_engine(rollout)),
                              checkpoint=target.identity.checkpoint_path, epoch=epoch, message=result.message)
    stable = run.status.get("plan") or {}
    previous = stable.get("hash") or "?"
    old_output = (run.status.get("output") or {}).get("topic")
    pinned = completed_plan(rollout, stable.get("formatVersion"))
    updates: dict[str, Any] = {"plan": pinned, "rollout": None, "lastUpgrade": upgrade,
                               "history": with_history(run.status.get("history"), upgrade)}
    if rollout.get("targetEngine"):
        updates["engine"] = dict(rollout["targetEngine"])
    if is_replace(rollout):
        updates["identity"] = _identity_status(target)
        updates["versions"] = _versions_after_replace(run, ctx, target, rollout, now)
        new_topic = target.output_topic or old_output
        if new_topic and new_topic != old_output:
            updates["output"] = {"topic": new_topic, "since": now}
    else:
        if stable.get("handOffFrom"):  # the drivers keep the environment they run with
            pinned["handOffFrom"] = stable["handOffFrom"]
        versions = with_plan(run.status.get("versions"), ctx.plan_version, rollout["targetHash"],
                             rollout["targetConfigMap"])
        if versions is not None:
            updates["versions"] = versions
    run.write(updates, Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                             driver_ready=True))
    gap = upgrade.get("gapSeconds")
    how = (f"replaced with {rollout.get('replaceStrategy')} (plan version {target.plan_version}, checkpoint "
           f"{target.identity.checkpoint_path})" if is_replace(rollout) else "upgraded in place")
    run.event("Normal", EventReason.UPGRADE_SUCCEEDED,
              f"plan {previous[:12]} -> {rollout['targetHash'][:12]} {how}: {result.message}"
              + (f"; output gap {gap:.2f}s" if isinstance(gap, (int, float)) else ""))
    if "output" in updates:
        run.event("Normal", EventReason.OUTPUT_SWITCHED,
                  f"the live result is now in topic {updates['output']['topic']!r} (plan version "
                  f"{target.plan_version}); topic {old_output!r} no longer changes")
    return True


def _versions_after_replace(run: QueryRun, ctx: QueryContext, target: QueryContext, rollout: dict[str, Any],
                            now: str) -> list[dict[str, Any]]:
    """``status.versions`` with the new version running and the one it replaced retired (recorded
    now if the query was created before versions were)."""
    versions = list(run.status.get("versions") or [])
    stable = run.status.get("plan") or {}
    if not any(v.get("version") == ctx.plan_version for v in versions):
        old = plan_of(run, stable.get("configMap"))
        if old is not None:
            versions.append(version_record(ctx.identity, old, stable["hash"], stable["configMap"],
                                           str(run.status.get("lastUpgrade", {}).get("startedAt") or now),
                                           output_topic=ctx.output_topic))
    new = plan_of(run, rollout.get("targetConfigMap"))
    if new is None:
        return versions
    return with_running(versions, version_record(target.identity, new, rollout["targetHash"],
                                                 rollout["targetConfigMap"], now,
                                                 output_topic=target.output_topic), now)


def _versions_after_rollback(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any],
                             now: str) -> list[dict[str, Any]] | None:
    """``status.versions`` with a replace's new version recorded as rolled back (what it left is
    removed at once by the clean-up), or None for an in-place rollout."""
    if not is_replace(rollout):
        return None
    new = plan_of(run, rollout.get("targetConfigMap"))
    if new is None:
        return None
    target = rollout_context(ctx, rollout)
    record = version_record(target.identity, new, rollout["targetHash"], rollout["targetConfigMap"],
                            str(rollout.get("started") or now), output_topic=target.output_topic)
    return with_rolled_back(run.status.get("versions"), record, now)


def _target_ran(record: LeaseRecord | None, rollout: dict[str, Any]) -> tuple[bool, int | None]:
    """Whether a driver of the target plan ever held the Lease during this rollout, and the
    backstop epoch it kept."""
    if record is None:
        return False, None
    backstop = Backstop.from_json(record.annotations.get(BACKSTOP))
    takeover = Takeover.from_json(record.annotations.get(LAST_TAKEOVER))
    start_epoch = int(rollout.get("startEpoch") or 0)
    engine = gate_engine(rollout)
    holder_engine = record.annotations.get(HOLDER_ENGINE, "")
    ran = bool(
        (takeover is not None and takeover.plan_hash == rollout["targetHash"]
         and same_engine(takeover.engine, engine) and takeover.epoch > start_epoch)
        or (record.annotations.get(HOLDER_PLAN) == rollout["targetHash"]
            and same_engine(holder_engine, engine) and record.transitions > start_epoch)
    )
    if (backstop is not None and backstop.to_plan == rollout["targetHash"]
            and same_engine(backstop.to_engine, engine)):
        return ran, backstop.epoch
    return ran, None


def _gate_failed(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any], policy: UpgradePolicy,
                 record: LeaseRecord | None, result: gate.GateResult) -> bool:
    now = run.env.clock()
    error = error_status(result.error)
    if policy.rollback == "Never":
        upgrade = finished_record(run.status.get("lastUpgrade"), Outcome.FAILED, now, error=error,
                                  message=result.message)
        run.write({"rollout": failed(rollout, target_hash=rollout["targetHash"], message=result.message,
                                     error=error),
                   "lastUpgrade": upgrade, "history": with_history(run.status.get("history"), upgrade)},
                  Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                        problem=StatusProblem(Reason.UPGRADE_FAILED, result.message)))
        run.event("Warning", EventReason.UPGRADE_FAILED, f"{result.message} (rollback: Never; staying on the "
                  f"new plan until the next edit)")
        return False
    return start_rollback(run, ctx, rollout, record, why_failed=result.message, error=error)


def start_rollback(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any], record: LeaseRecord | None, *,
                   why_failed: str, error: dict[str, Any] | None, cancelled: bool = False) -> bool:
    """Write the RollingBack step (mode decided here, once) and carry it out."""
    ran, backstop_epoch = _target_ran(record, rollout)
    replace = is_replace(rollout)
    back_in_place = (_back_is_in_place(run, ctx, rollout) and not _engine_rewrites(run, rollout)
                     if ran and not replace else True)
    mode, why = rollback_mode(back_is_in_place=back_in_place, target_ran=ran, backstop_epoch=backstop_epoch,
                              replace=replace, backfilling=rollout.get("step") == Step.BACKFILLING)
    # the stable plan runs again in a term after the rollback began; unless the target never held the
    # Lease: then the stable plan's holder never stopped, and its own term counts
    start_epoch = (record.transitions if record is not None else 0) if ran else -1
    new = rolling_back(rollout, now=run.env.clock(), start_epoch=start_epoch, mode=mode,
                       why=why if cancelled else f"{why_failed}; {why}", error=error, cancelled=cancelled,
                       backstop_epoch=backstop_epoch)
    record_update = dict(run.status.get("lastUpgrade") or {})
    if error is not None:
        record_update["error"] = error
    record_update["message"] = new["message"]
    run.write({"rollout": new, "lastUpgrade": record_update or None},
              Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                    rollout_step=Step.ROLLING_BACK))
    kind = "Normal" if cancelled else "Warning"
    run.event(kind, EventReason.UPGRADE_ROLLING_BACK, new["message"])
    return roll_back(run, ctx, new)


def _engine_rewrites(run: QueryRun, rollout: dict[str, Any]) -> bool:
    """Whether the rollout's engine may have written the checkpoint in a way the stable engine
    cannot read back (another image or Spark): then a rollback restores the backstop."""
    target = rollout_engine(rollout)
    stable = run.status.get("engine")
    if target is None or not stable:
        return False
    return rewrites_checkpoint(Engine.model_validate(stable).facts(), target.facts())


def _back_is_in_place(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any]) -> bool:
    """The classifier's word on going from the target plan back to the stable one."""
    if rollout.get("targetHash") == (run.status.get("plan") or {}).get("hash"):
        return True  # the same plan: an engine change only
    new = plan_of(run, rollout.get("targetConfigMap"))
    old = plan_of(run, (run.status.get("plan") or {}).get("configMap"))
    if new is None or old is None:
        return False
    result = run.env.classify(new, old, ctx.spec.upgrade or ctx.cluster.upgrade)
    return str(result.decision) in ("none", "in-place")


def roll_back(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any]) -> bool:
    """RollingBack: the workload back on the stable plan (after the restore request, if any);
    done once the stable plan runs again in a term after the rollback began."""
    info = rollout.get("rollback") or {}
    stable = run.status["plan"]
    # an engine rollout's drivers run the same plan: only a driver on the stable engine counts
    engine = ctx.engine_digest if rollout.get("targetEngine") else None
    if info.get("mode") == RESTORE:
        _request_restore(run, ctx, rollout, stable["hash"], int(info["restoreEpoch"]), engine or "")
    ctx = dataclasses.replace(ctx, freeze_driver=False)  # the rollout changed the driver: it goes back
    ready = _converge(run, ctx, stable["hash"], stable["configMap"])
    now = run.env.clock()
    if info.get("mode") == DISCARD:  # the stable version never stopped: done once the backfill is gone
        if backfill.stop(run, ctx) is not None:
            return ready
        result = gate.GateResult(gate.Verdict.PASS, "the previous version kept serving")
    else:
        result, _ = _evaluate(run, ctx, rollout, ctx.spec.upgrade or ctx.cluster.upgrade,
                              plan_hash=stable["hash"], start_epoch=info.get("startEpoch"),
                              started=info.get("started"), batches_needed=ROLLBACK_BATCHES, engine=engine)
    if result.verdict == gate.Verdict.WAIT:
        return False
    cancelled = bool(info.get("cancelled"))
    if result.verdict == gate.Verdict.PASS:
        outcome = Outcome.CANCELLED if cancelled else Outcome.ROLLED_BACK
        upgrade = finished_record(run.status.get("lastUpgrade"), outcome, now, rollback=info.get("mode"),
                                  checkpoint=ctx.identity.checkpoint_path)
        updates: dict[str, Any] = {"rollout": None, "lastUpgrade": upgrade,
                                   "history": with_history(run.status.get("history"), upgrade)}
        versions = _versions_after_rollback(run, ctx, rollout, now)
        if versions is not None:
            updates["versions"] = versions
        run.write(updates, Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                                 driver_ready=True))
        how = {HAND_BACK: "handed back on the current checkpoint",
               DISCARD: "kept serving; the backfill was removed"}.get(
            str(info.get("mode")), f"restored from checkpoint epoch {info.get('restoreEpoch')}")
        reason = EventReason.UPGRADE_CANCELLED if cancelled else EventReason.UPGRADE_ROLLED_BACK
        run.event("Normal" if cancelled else "Warning", reason,
                  f"plan {stable['hash'][:12]} runs again ({how})"
                  + ("" if cancelled else f"; the upgrade to {rollout['targetHash'][:12]} failed: "
                     f"{(rollout.get('error') or {}).get('message') or rollout.get('message')}"))
        return ready
    message = f"the rollback to plan {stable['hash'][:12]} failed too: {result.message}"
    upgrade = finished_record(run.status.get("lastUpgrade"), Outcome.FAILED, now, message=message)
    stays = {**rollout, "targetEngine": None}  # the workload stays on the stable plan and engine
    run.write({"rollout": failed(stays, target_hash=stable["hash"], message=message,
                                 error=rollout.get("error")),
               "lastUpgrade": upgrade, "history": with_history(run.status.get("history"), upgrade)},
              Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                    problem=StatusProblem(Reason.UPGRADE_FAILED, message)))
    run.event("Warning", EventReason.UPGRADE_FAILED, message)
    return False


def _request_restore(run: QueryRun, ctx: QueryContext, rollout: dict[str, Any], plan_hash: str,
                     epoch: int, engine: str = "") -> None:
    request = RestoreRequest(id=str(rollout.get("id") or rollout["started"]), epoch=epoch,
                             plan_hash=plan_hash, engine=engine)
    lease = run.env.kube.get("Lease", run.ns, lease_name(ctx.names.base))
    if lease is None:
        return
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    current = RestoreRequest.from_json(annotations.get(RESTORE_REQUEST))
    if current == request:
        return
    run.env.kube.patch("Lease", run.ns, lease_name(ctx.names.base),
                       {"metadata": {"annotations": {RESTORE_REQUEST: request.to_json()}}})
