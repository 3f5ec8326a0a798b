"""The rollout executor: carries out the steps that the pure state machine ``sluice.core.rollout``
decides, writing each step into ``status.rollout`` before acting on it (write-ahead log).

``advance`` is the entry point: ``reconcile.reconcile_query`` calls it once the spec is valid,
the cluster found, the plan compiled and the sink topic there.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.core.engine import engine_changes
from sluice.core.plan.model import Plan
from sluice.core.records import EngineRef, OutputStatus, PreviousVersion, Rollout
from sluice.core.replace import backfill_output_topic, previous_version, state_reset_note
from sluice.core.rollout import (
    HAND_OFF,
    Action,
    Outcome,
    Step,
    classified_rollout,
    completed_plan,
    creation_rollout,
    finished_record,
    is_replace,
    next_action,
    outcome_of,
    upgrade_record,
    with_history,
)
from sluice.core.spec import UpgradePolicy
from sluice.core.status import EventReason, Facts
from sluice.core.versions import version_record, with_running
from sluice.crd.engine import Engine
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator import backfill, cleaner, upgrade
from sluice.operator.builders.context import QueryContext
from sluice.operator.desired import Desired, Engines, engine_of, plan_of
from sluice.operator.env import QueryRun
from sluice.operator.workload import _converge, _ensure_plan_config_map, _identity_status, converge_pinned

log = logging.getLogger("sluice.operator")

#: Turns ``advance`` takes at most in one reconcile: enough to finish an in-flight step, classify
#: the newest edit and start carrying it out; the bound keeps a state machine that does not settle
#: from looping, and the next reconcile (the rollout timer) continues from the status.
MAX_TURNS = 4


@dataclass
class Turn:
    """What the steps of one reconcile share: the query's run, the context of the plan version and
    engine that run (moved on by a step that finished a rollout), what the spec and the QueryCluster
    ask for, and whether the active driver is ready."""

    run: QueryRun
    ctx: QueryContext
    spec: StreamingQuerySpec
    cluster: QueryClusterSpec
    desired: Desired
    engines: Engines
    base: dict[str, Any]
    ready: bool = False

    @property
    def policy(self) -> UpgradePolicy:
        return self.spec.upgrade or self.cluster.upgrade

    def moved_on(self) -> None:
        """A rollout ended: act on the version and engine it left pinned from now on (a replace moved
        the version on, an engine upgrade the engine)."""
        run = self.run
        stable = engine_of(run.records.engine) or self.engines.stable
        self.engines = Engines(stable, self.engines.desired, self.engines.waiting)
        frozen = self.ctx.freeze_driver and stable == self.ctx.engine
        self.ctx = upgrade.pinned_context(self.ctx.on_engine(stable, freeze=frozen), run.records.plan)


def advance(run: QueryRun, ctx: QueryContext, spec: StreamingQuerySpec, cluster: QueryClusterSpec,
            desired: Desired, engines: Engines, base: dict[str, Any]) -> bool:
    """Carry out rollout steps until the state machine says wait or steady; returns whether the
    active driver is ready.

    Each turn asks ``next_action`` what to do, from the status as last written, the plan and the
    engine asked for, and carries out that one step (``ACTS``, one function per action):

    * ``create``: write the Deploying rollout, create the workload, pin the plan; done.
    * ``resume``: carry out the in-flight step: Deploying (finish), Applying (switch the driver
      template, start the gate), Verifying (evaluate the gate), RollingBack (back on the stable
      plan, wait for it to run); another turn only when the rollout ended.
    * ``revert``: what the rollout moves (plan or engine) is no longer asked for: roll back,
      outcome Cancelled; another turn when the stable plan already runs again.
    * ``classify``: classify the edit against the plan that runs and write its rollout;
      ``Applying`` takes another turn to start it; ``AwaitingUpgrade``/``Rejected`` keep the workload
      on the pinned plan; done.
    * ``cancel``: the spec is back at the pinned plan while an upgrade waited: drop it; another turn.
    * ``steady``/``wait``: converge the workload on the plan it should be on; done.

    The plan asked for is ``desired`` (the pinned plan, unless the user changed what it is compiled
    from or accepted a re-plan), on ``engines.desired`` (the QueryCluster's engine once its rollout
    admitted the query, else the pinned one): a change of either is classified and rolled out.
    """
    turn = Turn(run, ctx, spec, cluster, desired, engines, base)
    for _ in range(MAX_TURNS):
        if spec.suspend and turn.engines.changes and _adopt_engine(run, desired, turn.engines):
            turn.engines = Engines(turn.engines.desired, turn.engines.desired)
            turn.ctx = turn.ctx.on_engine(turn.engines.desired)
        records = run.records
        action = next_action(records.plan, records.rollout, desired.hash, records.last_upgrade,
                             run.generation,
                             engine=turn.engines.desired.compute_digest(),
                             pinned_engine=_pinned_engine(run, turn.engines))
        log.debug("%s/%s: %s", run.ns, run.name, action.kind)
        if ACTS[action.kind](turn, action):
            return turn.ready
    return turn.ready


# -- the acts: one per action of the state machine; each returns whether the reconcile is done ----


def _act_create(turn: Turn, action: Action) -> bool:
    turn.ready = _create(turn.run, turn.ctx, turn.desired, turn.engines, turn.base)
    return True


def _act_resume(turn: Turn, action: Action) -> bool:
    d = turn.desired
    turn.ready = _resume(turn.run, turn.ctx, d.plan, d.hash, d.plan.to_json(), action, turn.policy)
    if turn.run.records.rollout is not None:
        return True  # still in flight: the gate (or the next step) waits
    turn.moved_on()
    return False


def _act_revert(turn: Turn, action: Action) -> bool:
    run, ctx = turn.run, turn.ctx
    assert action.rollout is not None  # a revert is of the rollout in flight
    turn.ready = upgrade.start_rollback(run, ctx, action.rollout, upgrade.read_lease(run, ctx),
                                        why_failed="", error=None, cancelled=True)
    return run.records.rollout is not None  # done unless the stable plan already runs again


def _act_classify(turn: Turn, action: Action) -> bool:
    run, ctx = turn.run, turn.ctx
    if cleaner.discard_pending(run):  # a rolled-back version's leftovers go before a new rollout
        turn.ready = converge_pinned(run, ctx)
        cleaner.clean_up(run, ctx, turn.cluster)
        return True
    turn.ready = _classify(run, ctx, turn.spec, turn.cluster, turn.desired, turn.engines, turn.base,
                           action.from_hash)
    # an upgrade that starts takes another turn to be carried out; one that waits or is refused not
    rollout = run.records.rollout
    return rollout is None or rollout.step not in (Step.APPLYING, Step.BACKFILLING)


def _act_cancel(turn: Turn, action: Action) -> bool:
    _cancel(turn.run)
    return False


def _act_wait(turn: Turn, action: Action) -> bool:
    rollout = action.rollout
    if rollout is None or rollout.step != Step.FAILED:
        return _act_steady(turn, action)
    ctx = upgrade.rollout_context(turn.ctx, rollout)  # a failed rollout stays on its target
    turn.ready = _converge(turn.run, ctx, rollout.target_hash,
                           rollout.target_config_map or ctx.names.plan_config_map(rollout.target_hash))
    return True


def _act_steady(turn: Turn, action: Action) -> bool:
    """Keep the workload converged on the pinned plan; with nothing in flight, what retired versions
    left may go."""
    run, ctx = turn.run, turn.ctx
    turn.ready = converge_pinned(run, ctx)
    if action.kind in ("steady", "held"):
        cleaner.clean_up(run, ctx, turn.cluster)
    return True


ACTS: dict[str, Callable[[Turn, Action], bool]] = {
    "create": _act_create, "resume": _act_resume, "revert": _act_revert, "classify": _act_classify,
    "cancel": _act_cancel, "wait": _act_wait, "steady": _act_steady, "held": _act_steady,
}


def _adopt_engine(run: QueryRun, desired: Desired, engines: Engines) -> bool:
    """A suspended query takes its QueryCluster's engine as it is, without a rollout: no driver runs
    to warm up or to pass a gate (the drivers start on it when the query resumes). Only when its
    plan stays: a plan the new engine needs re-derived is classified like any change. Returns
    whether it did."""
    records = run.records
    if records.rollout is not None or records.plan is None or records.plan.hash != desired.hash:
        return False
    old, new = engines.stable.compute_digest(), engines.desired.compute_digest()
    now = run.env.clock()
    taken = upgrade_record(from_hash=desired.hash, to_hash=desired.hash, category="transparent",
                           decision="in-place", outcome=str(Outcome.IN_PROGRESS), now=now,
                           generation=run.generation,
                           reasons=["the query is suspended: it takes the QueryCluster's engine at once, its "
                                    "drivers start on it when it resumes"],
                           changes=[], from_engine=old, to_engine=new, cause="cluster")
    record = finished_record(taken, Outcome.SUCCEEDED, now)
    run.write({"engine": engines.desired.record(), "lastUpgrade": record,
               "history": with_history(records.history, record)})
    run.event("Normal", EventReason.UPGRADE_SUCCEEDED,
              f"engine {old[:12]} -> {new[:12]} taken while suspended")
    return True


def _pinned_engine(run: QueryRun, engines: Engines) -> str:
    recorded = run.records.engine
    return (recorded.digest if recorded is not None else "") or engines.stable.compute_digest()


def _cancel(run: QueryRun) -> None:
    records = run.records
    updates: dict[str, Any] = {"rollout": None}
    done = finished_record(records.last_upgrade, Outcome.CANCELLED, run.env.clock())
    if done is not None:
        updates.update(lastUpgrade=done, history=with_history(records.history, done))
    run.write(updates)
    run.event("Normal", EventReason.UPGRADE_CANCELLED, "the spec is back at the running plan")


def _create(run: QueryRun, ctx: QueryContext, desired: Desired, engines: Engines,
            base: dict[str, Any]) -> bool:
    plan_hash = desired.hash
    cm_name = ctx.names.plan_config_map(plan_hash)
    rollout = creation_rollout(plan_hash, cm_name, run.env.clock()).model_copy(
        update={"target_inputs": desired.inputs})
    # write-ahead: the target plan and engine and the step, before anything that uses them exists
    run.write({**base, "rollout": rollout, "identity": _identity_status(ctx),
               "engine": engines.stable.record()},
              Facts(generation=run.generation, rollout_step=Step.DEPLOYING, suspended=ctx.spec.suspend))
    return _finish(run, ctx, desired.plan, plan_hash, desired.plan.to_json(), rollout)


def _finish(run: QueryRun, ctx: QueryContext, plan: Plan | None, plan_hash: str, plan_json: str | None,
            rollout: Rollout) -> bool:
    """Carry out the Deploying rollout (the first deployment) and pin its plan."""
    cm_name = str(rollout.target_config_map)
    if plan_json is not None:
        _ensure_plan_config_map(run, ctx, plan_hash, plan_json)
    ready = _converge(run, ctx, rollout.target_hash, cm_name, fresh=True)
    # the phase follows in the same write: a pinned plan never shows as Pending
    updates: dict[str, Any] = {"plan": completed_plan(rollout, plan.version if plan else None),
                               "rollout": None}
    if plan is not None and run.records.output is None:
        updates["output"] = OutputStatus(topic=plan.sink.topic, since=rollout.started)
    if plan is not None:
        updates["versions"] = with_running(run.records.versions, version_record(
            ctx.identity, plan, plan_hash, cm_name, rollout.started), run.env.clock())
    run.write(updates,
              Facts(generation=run.generation, suspended=ctx.spec.suspend, plan_pinned=True,
                    driver_ready=ready))
    run.event("Normal", EventReason.PLAN_PINNED, f"plan {plan_hash[:12]} pinned in ConfigMap {cm_name}")
    run.event("Normal", EventReason.WORKLOAD_CREATED, f"driver Deployment {ctx.names.driver} created "
              f"({ctx.driver_replicas} replicas)")
    return ready


def _resume(run: QueryRun, ctx: QueryContext, plan: Plan, plan_hash: str, plan_json: str,
            action: Action, policy: UpgradePolicy) -> bool:
    rollout = action.rollout
    assert rollout is not None  # resumed: the rollout in flight
    step, target = rollout.step, rollout.target_hash
    if step == Step.DEPLOYING:
        if target == plan_hash:
            return _finish(run, ctx, plan, plan_hash, plan_json, rollout)
        # the spec moved on before the first deployment finished: deploy the newest plan instead
        run.write({"rollout": None})
        return False
    if step == Step.APPLYING:
        cm = run.env.kube.get("ConfigMap", run.ns, rollout.target_config_map or "")
        if cm is None:
            if target != plan_hash:  # never started, and the spec moved on: forget it, re-plan
                run.write({"rollout": None, "lastUpgrade": finished_record(
                    run.records.last_upgrade, Outcome.CANCELLED, run.env.clock())})
                return False
            _ensure_plan_config_map(run, ctx, plan_hash, plan_json)
        return upgrade.switch(run, ctx, rollout)
    if step == Step.VERIFYING:
        return upgrade.verify(run, ctx, rollout, policy)
    if step == Step.BACKFILLING:
        found = backfill.advance(run, ctx, upgrade.rollout_context(ctx, rollout), rollout, policy)
        if found.kind == "fail":
            upgrade.start_rollback(run, ctx, rollout, upgrade.read_lease(run, ctx), why_failed=found.message,
                                   error=upgrade.error_status(found.error))
        elif found.kind == "switch" and found.rollout is not None:
            upgrade.switch(run, ctx, found.rollout)
        return found.ready
    return upgrade.roll_back(run, ctx, rollout)


@dataclass(frozen=True)
class Deployed:
    """What the workload runs when an edit is classified: the context of its plan version, its plan
    (None: the ConfigMap is gone), ConfigMap and hash, and its engine. A rollout that failed its gate
    (rollback Never) left the workload on its target: then that is what runs."""

    ctx: QueryContext
    plan: Plan | None
    config_map: str
    plan_hash: str
    engine: Engine


def _deployed(run: QueryRun, ctx: QueryContext, engines: Engines, from_hash: str | None) -> Deployed:
    records = run.records
    pinned = records.plan
    assert pinned is not None  # classified against the plan that runs
    running = records.rollout if from_hash != pinned.hash else None
    config_map = (running.target_config_map if running else None) or pinned.config_map
    engine = upgrade.rollout_engine(running) or engine_of(records.engine) or engines.stable.snapshot()
    return Deployed(ctx=upgrade.rollout_context(ctx, running) if running else ctx,
                    plan=plan_of(run, config_map), config_map=config_map,
                    plan_hash=str(from_hash or pinned.hash), engine=engine)


@dataclass(frozen=True)
class Verdict:
    category: str
    decision: str
    reasons: list[str]
    changes: list[str]


def _verdict(run: QueryRun, deployed: Deployed, plan: Plan, policy: UpgradePolicy,
             extra: list[Any]) -> Verdict:
    """The classifier's word on going from the plan and engine that run to ``plan`` (and the engine
    changes ``extra``); a missing running plan cannot be classified: refused."""
    if deployed.plan is None:
        missing = f"the running plan's ConfigMap {deployed.config_map} is missing"
        return Verdict("unsupported", "reject", [missing], [])
    result = run.env.classify(deployed.plan, plan, policy, extra=extra)
    return Verdict(str(result.category), str(result.decision), [str(r) for r in result.reasons],
                   [getattr(c, "message", str(c)) for c in result.changes])


def _rollout_of(run: QueryRun, ctx: QueryContext, deployed: Deployed, desired: Desired, engines: Engines,
                policy: UpgradePolicy, verdict: Verdict, from_hash: str | None) -> Rollout:
    """The rollout an edit's verdict starts (or parks), with the engine it moves to and, for an
    in-place start, the Lease term count before anything moves (only a later term passes the gate)."""
    pinned = run.records.plan
    assert pinned is not None
    basis, plan = deployed.ctx, desired.plan
    previous: PreviousVersion | None = None
    output_topic: str | None = None
    if deployed.plan is not None and verdict.decision == "replace":
        ident = basis.identity
        previous = previous_version(version=basis.plan_version, plan=deployed.plan,
                                    plan_hash=deployed.plan_hash, checkpoint=ident.checkpoint_path,
                                    consumer_group=ident.consumer_group,
                                    transactional_id=ident.transactional_id, output_topic=basis.output_topic)
        output_topic = replace_output_topic(basis, deployed.plan, plan, policy.replace_strategy)
    rollout = classified_rollout(pinned=pinned.model_copy(update={"version": basis.plan_version}),
                                 target_hash=desired.hash,
                                 target_config_map=ctx.names.plan_config_map(desired.hash),
                                 category=verdict.category, decision=verdict.decision, from_hash=from_hash,
                                 allow_replace=policy.allow_replace, now=run.env.clock(),
                                 replace_strategy=policy.replace_strategy, previous=previous,
                                 replace_note=state_reset_note(plan) if verdict.decision == "replace" else "",
                                 output_topic=output_topic, backfill_from=policy.backfill_from,
                                 max_lag_records=policy.max_lag_records)
    update: dict[str, Any] = {"target_inputs": desired.inputs}
    if deployed.engine.compute_digest() != engines.desired.compute_digest():
        update.update(target_engine=EngineRef.model_validate(engines.desired.record()),
                      from_engine=deployed.engine.compute_digest())
    if rollout.step == Step.APPLYING:
        lease = upgrade.read_lease(run, ctx)
        update["start_epoch"] = lease.transitions if lease is not None else 0
    return rollout.model_copy(update=update)


def _classify(run: QueryRun, ctx: QueryContext, spec: StreamingQuerySpec, cluster: QueryClusterSpec,
              desired: Desired, engines: Engines, base: dict[str, Any], from_hash: str | None) -> bool:
    """Classify the edit against what runs, write its rollout and upgrade record (write-ahead), say
    so, and start it (another turn) or keep the workload where it is."""
    policy = spec.upgrade or cluster.upgrade
    deployed = _deployed(run, ctx, engines, from_hash)
    from_engine, to_engine = deployed.engine.compute_digest(), engines.desired.compute_digest()
    moves = from_engine != to_engine
    extra = engine_changes(deployed.engine.facts(), engines.desired.facts()) if moves else []
    verdict = _verdict(run, deployed, desired.plan, policy, extra)
    run.env.metrics.upgrade_decision(run.ns, run.name, verdict.category, verdict.decision)
    rollout = _rollout_of(run, ctx, deployed, desired, engines, policy, verdict, from_hash)
    record = upgrade_record(from_hash=from_hash, to_hash=rollout.target_hash, category=rollout.category,
                            decision=rollout.decision, outcome=outcome_of(rollout.step),
                            reasons=verdict.reasons, changes=verdict.changes, now=rollout.started,
                            generation=run.generation, from_engine=from_engine, to_engine=to_engine,
                            cause="cluster" if moves else desired.cause)
    if is_replace(rollout):  # what the replace will do and cost, until it ends
        record = record.model_copy(update={"message": rollout.message})
    updates: dict[str, Any] = {**base, "rollout": rollout, "lastUpgrade": record}
    if record.outcome == Outcome.REJECTED:
        updates["history"] = with_history(run.records.history, record)
    run.write(updates)  # write-ahead
    summary = f"{verdict.category} change: {verdict.decision}" + (
        f" ({verdict.reasons[0]})" if verdict.reasons else "")
    run.event("Normal", EventReason.UPGRADE_CLASSIFIED, summary)
    if rollout.step == Step.AWAITING_UPGRADE:
        run.event("Normal", EventReason.UPGRADE_PENDING, rollout.message)
    elif rollout.step == Step.REJECTED:
        run.event("Warning", EventReason.UPGRADE_REJECTED, rollout.message + f": {summary}")
    if rollout.step in (Step.APPLYING, Step.BACKFILLING):
        _ensure_plan_config_map(run, ctx, desired.hash, desired.plan.to_json())
        kind = f"replace with {rollout.replace_strategy}" if is_replace(rollout) else "in-place upgrade"
        what = f"engine {from_engine[:12]} -> {to_engine[:12]}, " if moves else ""
        run.event("Normal", EventReason.UPGRADE_STARTED,
                  f"{kind} {what}plan {str(from_hash)[:12]} -> {desired.hash[:12]}: {rollout.message}")
        return False
    # waiting or rejected: the workload stays on the plan it runs
    return _converge(run, deployed.ctx, deployed.plan_hash, deployed.config_map)


def replace_output_topic(basis: QueryContext, old: Plan, new: Plan, strategy: str) -> str | None:
    """The topic a replace's new version writes, when it is not its plan's sink topic: a backfill's
    versioned topic (unless the edit named a new sink topic); with hand-off, the topic the running
    version was moved to by a backfill before (unless the edit named a new one)."""
    if strategy == HAND_OFF:
        return basis.output_topic if new.sink.topic == old.sink.topic else None
    nxt = dataclasses.replace(basis, plan_version=basis.plan_version + 1)
    return backfill_output_topic(new.sink.topic, old.sink.topic, nxt.identity.versioned_topic(new.sink.topic))

