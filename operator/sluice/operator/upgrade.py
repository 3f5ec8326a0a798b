"""The in-place upgrade steps of the rollout executor: switch, health gate, rollback.

Called by ``executor.advance`` for rollouts in ``Applying``, ``Verifying`` and ``RollingBack``;
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
from sluice.core.records import OutputStatus, PinnedPlan, Rollout, UpgradeError, VersionRecord
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
    with_message,
)
from sluice.core.spec import UpgradePolicy
from sluice.core.status import EventReason, Facts, Reason, StatusProblem
from sluice.core.versions import version_record, with_plan, with_rolled_back, with_running
from sluice.crd.engine import Engine
from sluice.operator import backfill
from sluice.operator.builders.context import QueryContext
from sluice.operator.desired import engine_of, plan_of
from sluice.operator.env import QueryRun
from sluice.operator.lease import driver_selector
from sluice.operator.workload import _converge, _identity_status, converge_pinned

log = logging.getLogger("sluice.operator")

#: batches the stable plan must commit (or progress events) for a rollback to count as done
ROLLBACK_BATCHES = 1


def read_lease(run: QueryRun, ctx: QueryContext) -> LeaseRecord | None:
    lease = run.env.kube.get("Lease", run.ns, lease_name(ctx.names.base))
    return LeaseRecord.from_lease(lease) if lease is not None else None


def driver_pods(run: QueryRun, ctx: QueryContext) -> list[dict[str, Any]]:
    return run.env.kube.list("Pod", run.ns, driver_selector(ctx.names.base))


def error_status(error: DriverError | None) -> UpgradeError | None:
    if error is None:
        return None
    return UpgradeError.model_validate({"class": error.error_class, "message": error.message,
                                        "step": error.step or None})


def pinned_context(ctx: QueryContext, pinned: PinnedPlan | None) -> QueryContext:
    """The context of the pinned plan's version (the version it replaced with hand-off, the topic it
    writes when a backfill moved it)."""
    if pinned is None:
        return dataclasses.replace(ctx, plan_version=1, previous=None, output_topic=None)
    return dataclasses.replace(ctx, plan_version=pinned.version,
                               previous=pinned.hand_off_from,
                               output_topic=pinned.output_topic or None)


def rollout_context(ctx: QueryContext, rollout: Rollout) -> QueryContext:
    """The context of the plan version a rollout puts the workload on: a replace's new version (new
    checkpoint, consumer group and transactional id) with the version it starts after, on the
    rollout's target engine when it changes the engine (the driver Deployment is never frozen for a
    rollout: it is what the rollout changes)."""
    target = rollout_engine(rollout)
    ctx = ctx.on_engine(target) if target is not None else dataclasses.replace(ctx, freeze_driver=False)
    version = rollout.target_plan_version or ctx.plan_version
    if version == ctx.plan_version:
        return ctx
    # a backfill's version continues the backfill's checkpoint: nothing to hand off from
    previous = rollout.previous if not is_backfill(rollout) else None
    return dataclasses.replace(ctx, plan_version=version,
                               previous=previous,
                               output_topic=rollout.output_topic or None)


def rollout_engine(rollout: Rollout | None) -> Engine | None:
    """The engine a rollout moves the drivers to (None: it keeps theirs)."""
    return engine_of(rollout.target_engine) if rollout is not None else None


def gate_engine(rollout: Rollout) -> str | None:
    """The engine the target's drivers must report for the gate (None: the rollout keeps the
    engine, so any report of the target plan counts)."""
    return target_engine(rollout, None)


def switch(run: QueryRun, ctx: QueryContext, rollout: Rollout) -> bool:
    """Applying: put the driver Deployment on the target plan (a new warm driver starts, the old
    one hands off when it is ready), then start the gate. A replace puts it on the new version; a
    backfill's workload stops first (one writer on the new version's checkpoint)."""
    if is_backfill(rollout):
        waiting = backfill.stop(run, ctx)
        if waiting is not None:
            ready = converge_pinned(run, ctx)
            if rollout.message != waiting:
                run.write({"rollout": with_message(rollout, waiting)})
            return ready
    ready = _converge(run, rollout_context(ctx, rollout), rollout.target_hash, str(rollout.target_config_map))
    # the Lease term count was read before the Applying step was written: a driver of the target
    # plan that took over before an operator restart still counts, one from before the rollout not
    start_epoch = (rollout.start_epoch or 0)
    run.write({"rollout": verifying(rollout, now=run.env.clock(), start_epoch=start_epoch)},
              Facts(generation=run.generation, plan_pinned=True, rollout_step=Step.VERIFYING,
                    suspended=ctx.spec.suspend, driver_ready=ready))
    return ready


def verify(run: QueryRun, ctx: QueryContext, rollout: Rollout, policy: UpgradePolicy) -> bool:
    """Verifying: evaluate the gate of the target plan; succeed, wait, or fail (roll back / stop)."""
    ready = _converge(run, rollout_context(ctx, rollout), rollout.target_hash, str(rollout.target_config_map))
    result, record = _evaluate(run, ctx, rollout, policy, plan_hash=rollout.target_hash,
                               start_epoch=rollout.start_epoch,
                               started=rollout.gate_started or rollout.started,
                               batches_needed=policy.health_batches,
                               max_dead_letter_ratio=policy.max_dead_letter_ratio,
                               engine=gate_engine(rollout))
    if result.verdict == gate.Verdict.WAIT:
        if rollout.message != result.message:
            run.write({"rollout": with_message(rollout, result.message)})
        return False
    if result.verdict == gate.Verdict.PASS:
        return _succeeded(run, ctx, rollout, record, result, ready)
    return _gate_failed(run, ctx, rollout, policy, record, result)


def _evaluate(run: QueryRun, ctx: QueryContext, rollout: Rollout, policy: UpgradePolicy, *,
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
        errors_since=gate.parse_time(rollout.started), engine=engine,
    )
    return result, record


def _takeover_gap(record: LeaseRecord | None, plan_hash: str, engine: str | None = None) -> float | None:
    takeover = Takeover.from_json(record.annotations.get(LAST_TAKEOVER)) if record is not None else None
    if takeover is None or takeover.plan_hash != plan_hash or not same_engine(takeover.engine, engine):
        return None
    return takeover.gap_seconds


def _succeeded(run: QueryRun, ctx: QueryContext, rollout: Rollout, record: LeaseRecord | None,
               result: gate.GateResult, ready: bool) -> bool:
    now = run.env.clock()
    records = run.records
    epoch = result.progress.epoch if result.progress is not None else None
    target = rollout_context(ctx, rollout)
    upgrade = finished_record(records.last_upgrade, Outcome.SUCCEEDED, now,
                              gap_seconds=_takeover_gap(record, rollout.target_hash, gate_engine(rollout)),
                              checkpoint=target.identity.checkpoint_path, epoch=epoch, message=result.message)
    stable = records.plan
    previous = stable.hash if stable is not None else "?"
    old_output = records.output.topic if records.output is not None else None
    pinned = completed_plan(rollout, stable.format_version if stable is not None else None)
    updates: dict[str, Any] = {"rollout": None, "lastUpgrade": upgrade,
                               "history": with_history(records.history, upgrade)}
    if rollout.target_engine is not None:
        updates["engine"] = rollout.target_engine
    if is_replace(rollout):
        updates["identity"] = _identity_status(target)
        updates["versions"] = _versions_after_replace(run, target, rollout, now)
        new_topic = target.output_topic or old_output
        if new_topic and new_topic != old_output:
            updates["output"] = OutputStatus(topic=new_topic, since=now)
    else:
        if stable is not None and stable.hand_off_from:  # the drivers keep the environment they run with
            pinned = pinned.model_copy(update={"hand_off_from": stable.hand_off_from})
        versions = with_plan(records.versions, ctx.plan_version, rollout.target_hash,
                             str(rollout.target_config_map))
        if versions is not None:
            updates["versions"] = versions
    updates["plan"] = pinned
    run.write(updates, Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                             driver_ready=True))
    gap = upgrade.gap_seconds if upgrade is not None else None
    how = (f"replaced with {rollout.replace_strategy} (plan version {target.plan_version}, checkpoint "
           f"{target.identity.checkpoint_path})" if is_replace(rollout) else "upgraded in place")
    run.event("Normal", EventReason.UPGRADE_SUCCEEDED,
              f"plan {previous[:12]} -> {rollout.target_hash[:12]} {how}: {result.message}"
              + (f"; output gap {gap:.2f}s" if isinstance(gap, (int, float)) else ""))
    if "output" in updates:
        run.event("Normal", EventReason.OUTPUT_SWITCHED,
                  f"the live result is now in topic {updates['output'].topic!r} (plan version "
                  f"{target.plan_version}); topic {old_output!r} no longer changes")
    return True


def _versions_after_replace(run: QueryRun, target: QueryContext, rollout: Rollout,
                            now: str) -> list[VersionRecord]:
    """``status.versions`` with the new version running and the one it replaced retired."""
    versions = run.records.versions
    new = plan_of(run, rollout.target_config_map)
    if new is None:
        return versions
    return with_running(versions, version_record(target.identity, new, rollout.target_hash,
                                                 str(rollout.target_config_map), now,
                                                 output_topic=target.output_topic), now)


def _versions_after_rollback(run: QueryRun, ctx: QueryContext, rollout: Rollout,
                             now: str) -> list[VersionRecord] | None:
    """``status.versions`` with a replace's new version recorded as rolled back (what it left is
    removed at once by the clean-up), or None for an in-place rollout."""
    if not is_replace(rollout):
        return None
    new = plan_of(run, rollout.target_config_map)
    if new is None:
        return None
    target = rollout_context(ctx, rollout)
    record = version_record(target.identity, new, rollout.target_hash, str(rollout.target_config_map),
                            rollout.started or now, output_topic=target.output_topic)
    return with_rolled_back(run.records.versions, record, now)


def _target_ran(record: LeaseRecord | None, rollout: Rollout) -> tuple[bool, int | None]:
    """Whether a driver of the target plan ever held the Lease during this rollout, and the
    backstop epoch it kept."""
    if record is None:
        return False, None
    backstop = Backstop.from_json(record.annotations.get(BACKSTOP))
    takeover = Takeover.from_json(record.annotations.get(LAST_TAKEOVER))
    start_epoch = (rollout.start_epoch or 0)
    engine = gate_engine(rollout)
    holder_engine = record.annotations.get(HOLDER_ENGINE, "")
    ran = bool(
        (takeover is not None and takeover.plan_hash == rollout.target_hash
         and same_engine(takeover.engine, engine) and takeover.epoch > start_epoch)
        or (record.annotations.get(HOLDER_PLAN) == rollout.target_hash
            and same_engine(holder_engine, engine) and record.transitions > start_epoch)
    )
    if (backstop is not None and backstop.to_plan == rollout.target_hash
            and same_engine(backstop.to_engine, engine)):
        return ran, backstop.epoch
    return ran, None


def _gate_failed(run: QueryRun, ctx: QueryContext, rollout: Rollout, policy: UpgradePolicy,
                 record: LeaseRecord | None, result: gate.GateResult) -> bool:
    now = run.env.clock()
    error = error_status(result.error)
    if policy.rollback == "Never":
        upgrade = finished_record(run.records.last_upgrade, Outcome.FAILED, now, error=error,
                                  message=result.message)
        run.write({"rollout": failed(rollout, target_hash=rollout.target_hash, message=result.message,
                                     error=error),
                   "lastUpgrade": upgrade, "history": with_history(run.records.history, upgrade)},
                  Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                        problem=StatusProblem(Reason.UPGRADE_FAILED, result.message)))
        run.event("Warning", EventReason.UPGRADE_FAILED, f"{result.message} (rollback: Never; staying on the "
                  f"new plan until the next edit)")
        return False
    return start_rollback(run, ctx, rollout, record, why_failed=result.message, error=error)


def start_rollback(run: QueryRun, ctx: QueryContext, rollout: Rollout, record: LeaseRecord | None, *,
                   why_failed: str, error: UpgradeError | None, cancelled: bool = False) -> bool:
    """Write the RollingBack step (mode decided here, once) and carry it out."""
    ran, backstop_epoch = _target_ran(record, rollout)
    replace = is_replace(rollout)
    back_in_place = (_back_is_in_place(run, ctx, rollout) and not _engine_rewrites(run, rollout)
                     if ran and not replace else True)
    mode, why = rollback_mode(back_is_in_place=back_in_place, target_ran=ran, backstop_epoch=backstop_epoch,
                              replace=replace, backfilling=rollout.step == Step.BACKFILLING)
    # the stable plan runs again in a term after the rollback began; unless the target never held the
    # Lease: then the stable plan's holder never stopped, and its own term counts
    start_epoch = (record.transitions if record is not None else 0) if ran else -1
    new = rolling_back(rollout, now=run.env.clock(), start_epoch=start_epoch, mode=mode,
                       why=why if cancelled else f"{why_failed}; {why}", error=error, cancelled=cancelled,
                       backstop_epoch=backstop_epoch)
    last = run.records.last_upgrade
    if last is not None:
        update: dict[str, Any] = {"message": new.message}
        if error is not None:
            update["error"] = error
        last = last.model_copy(update=update)
    run.write({"rollout": new, "lastUpgrade": last},
              Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                    rollout_step=Step.ROLLING_BACK))
    kind = "Normal" if cancelled else "Warning"
    run.event(kind, EventReason.UPGRADE_ROLLING_BACK, new.message)
    return roll_back(run, ctx, new)


def _engine_rewrites(run: QueryRun, rollout: Rollout) -> bool:
    """Whether the rollout's engine may have written the checkpoint in a way the stable engine
    cannot read back (another image or Spark): then a rollback restores the backstop."""
    target = rollout_engine(rollout)
    stable = engine_of(run.records.engine)
    if target is None or stable is None:
        return False
    return rewrites_checkpoint(stable.facts(), target.facts())


def _back_is_in_place(run: QueryRun, ctx: QueryContext, rollout: Rollout) -> bool:
    """The classifier's word on going from the target plan back to the stable one."""
    pinned = run.records.plan
    if pinned is not None and rollout.target_hash == pinned.hash:
        return True  # the same plan: an engine change only
    new = plan_of(run, rollout.target_config_map)
    old = plan_of(run, pinned.config_map if pinned is not None else None)
    if new is None or old is None:
        return False
    result = run.env.classify(new, old, ctx.spec.upgrade or ctx.cluster.upgrade)
    return str(result.decision) in ("none", "in-place")


def roll_back(run: QueryRun, ctx: QueryContext, rollout: Rollout) -> bool:
    """RollingBack: the workload back on the stable plan (after the restore request, if any);
    done once the stable plan runs again in a term after the rollback began."""
    info = rollout.rollback
    assert info is not None  # the RollingBack step is written with it
    records = run.records
    stable = records.plan
    assert stable is not None  # a rollback returns to the pinned plan
    # an engine rollout's drivers run the same plan: only a driver on the stable engine counts
    engine = ctx.engine_digest if rollout.target_engine is not None else None
    if info.mode == RESTORE:
        _request_restore(run, ctx, rollout, stable.hash, int(info.restore_epoch or 0), engine or "")
    ctx = dataclasses.replace(ctx, freeze_driver=False)  # the rollout changed the driver: it goes back
    ready = _converge(run, ctx, stable.hash, stable.config_map)
    now = run.env.clock()
    if info.mode == DISCARD:  # the stable version never stopped: done once the backfill is gone
        if backfill.stop(run, ctx) is not None:
            return ready
        result = gate.GateResult(gate.Verdict.PASS, "the previous version kept serving")
    else:
        result, _ = _evaluate(run, ctx, rollout, ctx.spec.upgrade or ctx.cluster.upgrade,
                              plan_hash=stable.hash, start_epoch=info.start_epoch,
                              started=info.started, batches_needed=ROLLBACK_BATCHES, engine=engine)
    if result.verdict == gate.Verdict.WAIT:
        return False
    cancelled = info.cancelled
    if result.verdict == gate.Verdict.PASS:
        outcome = Outcome.CANCELLED if cancelled else Outcome.ROLLED_BACK
        upgrade = finished_record(records.last_upgrade, outcome, now, rollback=info.mode,
                                  checkpoint=ctx.identity.checkpoint_path)
        updates: dict[str, Any] = {"rollout": None, "lastUpgrade": upgrade,
                                   "history": with_history(records.history, upgrade)}
        versions = _versions_after_rollback(run, ctx, rollout, now)
        if versions is not None:
            updates["versions"] = versions
        run.write(updates, Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                                 driver_ready=True))
        how = {HAND_BACK: "handed back on the current checkpoint",
               DISCARD: "kept serving; the backfill was removed"}.get(
            info.mode, f"restored from checkpoint epoch {info.restore_epoch}")
        reason = EventReason.UPGRADE_CANCELLED if cancelled else EventReason.UPGRADE_ROLLED_BACK
        run.event("Normal" if cancelled else "Warning", reason,
                  f"plan {stable.hash[:12]} runs again ({how})"
                  + ("" if cancelled else f"; the upgrade to {rollout.target_hash[:12]} failed: "
                     f"{(rollout.error.message if rollout.error else '') or rollout.message}"))
        return ready
    message = f"the rollback to plan {stable.hash[:12]} failed too: {result.message}"
    upgrade = finished_record(records.last_upgrade, Outcome.FAILED, now, message=message)
    stays = rollout.model_copy(update={"target_engine": None})  # the workload stays on the stable engine
    run.write({"rollout": failed(stays, target_hash=stable.hash, message=message, error=rollout.error),
               "lastUpgrade": upgrade, "history": with_history(records.history, upgrade)},
              Facts(generation=run.generation, plan_pinned=True, suspended=ctx.spec.suspend,
                    problem=StatusProblem(Reason.UPGRADE_FAILED, message)))
    run.event("Warning", EventReason.UPGRADE_FAILED, message)
    return False


def _request_restore(run: QueryRun, ctx: QueryContext, rollout: Rollout, plan_hash: str,
                     epoch: int, engine: str = "") -> None:
    request = RestoreRequest(id=rollout.id or rollout.started, epoch=epoch,
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
