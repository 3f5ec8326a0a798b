"""The rollout executor: carries out the steps that the pure state machine ``sluice.core.rollout``
decides, writing each step into ``status.rollout`` before acting on it (write-ahead log).

``advance`` is the entry point: ``reconcile.reconcile_query`` calls it once the spec is valid,
the cluster found, the plan compiled and the sink topic there.
"""

from __future__ import annotations

import logging
from typing import Any

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
from sluice.core.status import EventReason, Facts
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.builders.context import QueryContext
from sluice.operator.common import QueryRun
from sluice.operator.workload import _converge, _ensure_plan_config_map, _identity_status

log = logging.getLogger("sluice.operator")

#: Turns ``advance`` takes at most in one reconcile. Three are ever needed (finish an in-flight
#: rollout the spec has moved away from, classify the new edit, carry out its in-place step);
#: the bound keeps a state machine that does not settle from looping, and the next reconcile
#: continues from the status.
MAX_TURNS = 4


def advance(run: QueryRun, ctx: QueryContext, spec: StreamingQuerySpec, cluster: QueryClusterSpec,
            plan: Plan, plan_hash: str, plan_json: str, base: dict[str, Any]) -> bool:
    """Carry out rollout steps until the state machine says wait or steady; returns whether the
    active driver is ready.

    Each turn asks ``next_action`` what to do, from the status as last written and the compiled
    ``plan_hash``, and carries out that one step:

    * ``create``: write the Deploying rollout, create the workload, pin the plan; done.
    * ``resume``: finish the in-flight Deploying/Applying rollout; done when it targeted
      ``plan_hash``, otherwise (the spec moved on meanwhile) take another turn.
    * ``classify``: classify the edit and write its rollout; ``Applying`` takes another turn to
      carry it out, ``AwaitingUpgrade``/``Rejected`` keep the workload on the pinned plan; done.
    * ``cancel``: the spec is back at the pinned plan: drop the rollout; take another turn.
    * ``steady``/``wait``: converge the workload on the pinned plan; done.

    After ``MAX_TURNS`` turns it returns whatever the last step reported.
    """
    ready = False
    for _ in range(MAX_TURNS):
        action = next_action(run.status.get("plan"), run.status.get("rollout"), plan_hash)
        log.debug("%s/%s: %s", run.ns, run.name, action.kind)
        if action.kind == "create":
            return _create(run, ctx, plan, plan_hash, plan_json, base)
        if action.kind == "resume":
            ready = _resume(run, ctx, plan, plan_hash, plan_json, action)
            if (action.rollout or {}).get("targetHash") == plan_hash:
                return ready
        elif action.kind == "classify":
            ready = _classify(run, ctx, spec, cluster, plan, plan_hash, plan_json, base)
            if run.status.get("rollout", {}).get("step") != Step.APPLYING:
                return ready
        elif action.kind == "cancel":
            _cancel(run)
        else:  # steady or wait: keep the workload converged on the pinned plan
            return _converge(run, ctx, run.status["plan"]["hash"], run.status["plan"]["configMap"])
    return ready


def _cancel(run: QueryRun) -> None:
    record = dict(run.status.get("lastUpgrade") or {})
    if record:
        record["outcome"] = "Cancelled"
    run.write({"rollout": None, "lastUpgrade": record or None})
    run.event("Normal", EventReason.UPGRADE_CANCELLED, "the spec is back at the running plan")


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
    # the phase follows in the same write: a pinned plan never shows as Pending
    run.write(updates, Facts(generation=run.generation, suspended=ctx.spec.suspend, plan_pinned=True,
                             driver_ready=ready))
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

