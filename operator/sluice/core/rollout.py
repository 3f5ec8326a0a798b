"""The rollout state machine (pure), kept in ``status.rollout`` as a write-ahead log.

States (``Step``)::

    (no rollout) --first compile--> Deploying --objects created--> (no rollout, plan pinned)
    (plan pinned) --spec edit--> classify -> none / in-place --> Applying --driver template switched-->
                                 Verifying --gate passed--> (no rollout, target pinned: Succeeded)
                                           --gate failed, rollback Auto--> RollingBack
                                           --gate failed, rollback Never--> Failed (Degraded)
                      RollingBack --the stable plan runs again--> (no rollout: RolledBack / Cancelled)
                                  --it does not either--> Failed
                                 -> replace, handOff --> Applying (new version, new checkpoint) ...
                                 -> replace, backfill --> Backfilling --caught up--> Applying ...
                                             --gate failed / spec reverted--> RollingBack (discard)
                                 -> replace, not allowed / automatic --> AwaitingUpgrade (waits)
                                 -> reject  --> Rejected (waits for a new edit)
    AwaitingUpgrade/Rejected --spec back at the pinned plan--> (no rollout, cancelled)
    Applying/Verifying --spec back at the pinned plan--> RollingBack (Cancelled)
    Failed --another edit--> classify against the plan the workload is on

``status.plan`` is always the last *stable* plan: the one a rollback returns to. In-flight steps
(``IN_FLIGHT``) are finished before a newer edit is looked at, so there is never more than one
rollout, and an edit is always classified against the plan that actually runs (``deployed``).
Every step is idempotent: an operator restarted after any write resumes at the step written.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from sluice.core.records import (
    PinnedPlan,
    PreviousVersion,
    RollbackInfo,
    Rollout,
    UpgradeError,
    UpgradeRecord,
)


class Step(StrEnum):
    DEPLOYING = "Deploying"
    BACKFILLING = "Backfilling"
    APPLYING = "Applying"
    VERIFYING = "Verifying"
    ROLLING_BACK = "RollingBack"
    FAILED = "Failed"
    AWAITING_UPGRADE = "AwaitingUpgrade"
    REJECTED = "Rejected"


class Outcome(StrEnum):
    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    SUCCEEDED = "Succeeded"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"
    REJECTED = "Rejected"
    CANCELLED = "Cancelled"


#: how a rollback returns to the stable plan
HAND_BACK = "handBack"  # on the current checkpoint (new-to-old is in-place, or the new plan never ran)
RESTORE = "restore"  # from the checkpoint epoch kept before the switch (the backstop)
DISCARD = "discard"  # a backfill that never took over: remove its workload, the stable one never stopped

ActionKind = Literal["create", "resume", "revert", "steady", "classify", "wait", "cancel", "held"]

IN_FLIGHT = frozenset({Step.DEPLOYING, Step.BACKFILLING, Step.APPLYING, Step.VERIFYING, Step.ROLLING_BACK})
#: steps the operator re-evaluates on a timer (the health gate)
GATED = frozenset({Step.BACKFILLING, Step.APPLYING, Step.VERIFYING, Step.ROLLING_BACK})
#: steps a revert of the spec to the stable plan cancels (rolls back)
REVERTIBLE = frozenset({Step.BACKFILLING, Step.APPLYING, Step.VERIFYING})
WAITING = frozenset({Step.AWAITING_UPGRADE, Step.REJECTED})
FINAL_OUTCOMES = frozenset({Outcome.SUCCEEDED, Outcome.ROLLED_BACK, Outcome.FAILED, Outcome.REJECTED,
                            Outcome.CANCELLED})
HISTORY_LENGTH = 10


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    rollout: Rollout | None = None
    from_hash: str | None = None  # classify: the plan that runs


def deployed_hash(pinned: PinnedPlan | None, rollout: Rollout | None) -> str | None:
    """The plan the driver workload is on when no rollout is in flight."""
    if rollout is not None and rollout.step == Step.FAILED:
        return rollout.target_hash
    return pinned.hash if pinned is not None else None


def target_engine(rollout: Rollout | None, pinned_engine: str | None) -> str | None:
    """The engine (digest) a rollout puts the workload on: its own target engine when it changes the
    engine, else the pinned one."""
    moved = rollout.target_engine.digest if rollout is not None and rollout.target_engine else ""
    return moved or pinned_engine


def held_back(last: UpgradeRecord | None, compiled_hash: str, generation: int | None,
              engine: str | None = None) -> bool:
    """Whether the spec still asks for a plan (on ``engine``) whose upgrade was rolled back at this
    generation: it is not tried again until the spec is edited (any edit, ``restartNonce``
    included) or, for an engine, until the QueryCluster names another one."""
    if last is None:
        return False
    same_engine = engine is None or not last.to_engine or last.to_engine == engine
    return (last.to_hash == compiled_hash and same_engine and last.outcome == Outcome.ROLLED_BACK
            and last.generation == generation)


def next_action(pinned: PinnedPlan | None, rollout: Rollout | None, compiled_hash: str,
                last_upgrade: UpgradeRecord | None = None, generation: int | None = None, *,
                engine: str | None = None, pinned_engine: str | None = None) -> Action:
    """What the reconcile does next, from the status (pinned plan and engine, rollout, last upgrade),
    the plan the spec asks for, the engine the QueryCluster gives the query now (``engine``: None
    compares plans only) and the spec's generation."""
    engine = engine or pinned_engine
    desired = (compiled_hash, engine)
    stable = (pinned.hash if pinned is not None else None, pinned_engine)
    step = rollout.step if rollout is not None else None
    if rollout is not None and step in IN_FLIGHT:
        target = (rollout.target_hash, target_engine(rollout, pinned_engine))
        # what the rollout moves (the plan, the engine) is no longer asked for: it is cancelled (a
        # change still asked for, the other one, is classified once the stable plan runs again)
        obsolete = any(t != s and d == s for t, s, d in zip(target, stable, desired, strict=True))
        if step in REVERTIBLE and obsolete:
            return Action("revert", rollout)
        return Action("resume", rollout)
    if stable[0] is None:
        return Action("create")
    deployed = ((deployed_hash(pinned, rollout), target_engine(rollout, pinned_engine))
                if step == Step.FAILED else stable)
    if deployed == desired:
        if rollout is not None and step == Step.FAILED:
            return Action("wait", rollout)
        if rollout is not None:
            return Action("cancel", rollout)
        return Action("steady")
    if (rollout is not None and step in WAITING and rollout.target_hash == compiled_hash
            and target_engine(rollout, pinned_engine) == engine):
        return Action("wait", rollout)
    if rollout is None and held_back(last_upgrade, compiled_hash, generation, engine):
        return Action("held")
    return Action("classify", rollout, from_hash=deployed[0])


def executes_automatically(category: str, decision: str, replace_strategy: str | None = None) -> bool:
    """Edits the operator carries out itself: ``none``, every ``in-place`` decision, and a
    ``replace`` with either strategy (when replaces are allowed)."""
    return decision in ("none", "in-place") or (decision == "replace" and replace_strategy in (HAND_OFF,
                                                                                               BACKFILL))


#: replace strategies (``spec.upgrade.replaceStrategy``)
HAND_OFF = "handOff"
BACKFILL = "backfill"
#: ``rollout.strategy`` of a replace
REPLACE = "replace"


def is_replace(rollout: Rollout | None) -> bool:
    return rollout is not None and rollout.strategy == REPLACE


def is_backfill(rollout: Rollout | None) -> bool:
    return is_replace(rollout) and rollout is not None and rollout.replace_strategy == BACKFILL


def new_rollout(
    *,
    step: Step,
    target_hash: str,
    target_plan_version: int,
    target_config_map: str | None,
    category: str,
    decision: str,
    strategy: str,
    now: str,
    message: str = "",
    from_hash: str | None = None,
    rollout_id: str | None = None,
) -> Rollout:
    return Rollout(id=rollout_id or f"{now}/{target_hash[:12]}", from_hash=from_hash, target_hash=target_hash,
                   target_plan_version=target_plan_version, target_config_map=target_config_map,
                   category=category, decision=decision, strategy=strategy, step=str(step), started=now,
                   message=message)


def creation_rollout(target_hash: str, config_map: str, now: str) -> Rollout:
    return new_rollout(
        step=Step.DEPLOYING, target_hash=target_hash, target_plan_version=1, target_config_map=config_map,
        category="initial", decision="create", strategy="create", now=now,
        message="first deployment of the plan",
    )


def classified_rollout(
    *,
    pinned: PinnedPlan,
    target_hash: str,
    target_config_map: str,
    category: str,
    decision: str,
    allow_replace: bool,
    now: str,
    from_hash: str | None = None,
    replace_strategy: str = HAND_OFF,
    previous: PreviousVersion | None = None,
    replace_note: str = "",
    output_topic: str | None = None,
    backfill_from: str | None = None,
    max_lag_records: int | None = None,
) -> Rollout:
    """The rollout recorded after classifying an edit (before acting on it).

    A replace also records the version it starts after (``previous``), what the new checkpoint
    costs (``replace_note``) and the topic the new version writes (``output_topic``, when it is not
    the plan's sink topic: a backfill's versioned topic, or the one a version before it was moved
    to). A backfill also records where it starts reading (``backfill_from``: earliest when None) and
    the lag under which it takes over (``max_lag_records``)."""
    version = pinned.version
    common: dict[str, Any] = {"target_hash": target_hash, "target_config_map": target_config_map,
                              "category": category, "decision": decision, "now": now,
                              "from_hash": from_hash or pinned.hash}
    if decision == "replace" and allow_replace and replace_strategy == HAND_OFF and previous is not None:
        out = new_rollout(step=Step.APPLYING, target_plan_version=version + 1, strategy=REPLACE,
                          message=f"replace with hand-off: plan version {version + 1} starts on a new "
                          f"checkpoint where version {version}'s output ends, same output topic"
                          + (f"; {replace_note}" if replace_note else ""), **common)
        return out.model_copy(update={"replace_strategy": HAND_OFF, "previous": previous,
                                      "output_topic": output_topic or None})
    if decision == "replace" and allow_replace and replace_strategy == BACKFILL and previous is not None:
        topic = output_topic or previous.sink_topic
        start = f"from {backfill_from}" if backfill_from else "from the earliest offsets"
        out = new_rollout(step=Step.BACKFILLING, target_plan_version=version + 1, strategy=REPLACE,
                          message=f"replace with backfill: plan version {version + 1} re-reads its sources "
                          f"{start} on a new checkpoint into topic {topic!r}, beside version {version}, "
                          f"which serves {previous.sink_topic!r} until version {version + 1} passed "
                          f"its gate and is at most {max_lag_records} records behind"
                          + (f"; {replace_note}" if replace_note else ""), **common)
        return out.model_copy(update={"replace_strategy": BACKFILL, "previous": previous,
                                      "output_topic": topic, "backfill_from": backfill_from or "earliest",
                                      "max_lag_records": int(max_lag_records or 0)})
    if executes_automatically(category, decision):
        return new_rollout(step=Step.APPLYING, target_plan_version=version, strategy="in-place",
                           message="starting a driver on the new plan (same checkpoint), then handing off",
                           **common)
    if decision == "reject" or (decision == "replace" and not allow_replace):
        why = "the classifier rejects this change" if decision == "reject" else (
            "the change needs a replace and spec.upgrade.allowReplace is false"
        )
        return new_rollout(step=Step.REJECTED, target_plan_version=version, strategy="none", message=why,
                           **common)
    next_version = version + 1 if decision == "replace" else version
    why = (f"waiting: a replace with {replace_strategy} cannot start (the running version's plan is "
           f"missing)" if decision == "replace"
           else f"waiting: a {decision} upgrade is not carried out automatically")
    out = new_rollout(step=Step.AWAITING_UPGRADE, target_plan_version=next_version, strategy=decision,
                      message=why, **common)
    return out.model_copy(update={"replace_strategy": replace_strategy}) if decision == "replace" else out


def with_message(rollout: Rollout, message: str) -> Rollout:
    """The rollout with what it does or waits for now."""
    return rollout.model_copy(update={"message": message})


def caught_up(rollout: Rollout, *, now: str, lag: int) -> Rollout:
    """A backfill passed its gate and caught up: switch the drivers to the new version."""
    return rollout.model_copy(update={
        "step": str(Step.APPLYING), "caught_up": now,
        "message": f"the backfill caught up ({lag} records behind): stopping it and switching the drivers to "
        f"plan version {rollout.target_plan_version}"})


def verifying(rollout: Rollout, *, now: str, start_epoch: int) -> Rollout:
    """The workload is on the target plan: the gate starts now, for Lease terms after ``start_epoch``."""
    return rollout.model_copy(update={
        "step": str(Step.VERIFYING), "gate_started": now, "start_epoch": start_epoch,
        "message": "waiting for the driver on the new plan to take over and commit batches"})


def rollback_mode(*, back_is_in_place: bool, target_ran: bool, backstop_epoch: int | None,
                  replace: bool = False, backfilling: bool = False) -> tuple[str, str]:
    """How to return to the stable plan, and why.

    A backfill that never took over left the stable version running: its own workload goes. A
    replace ran on a checkpoint of its own: the stable version resumes on its own one.

    The checkpoint is only touched by the target plan once one of its drivers held the Lease
    (``target_ran``). Until then, or when the classifier calls new-to-old in-place, hand back on
    the current checkpoint; otherwise restore the backstop epoch kept before the switch."""
    if backfilling:
        return DISCARD, "the previous version kept serving: the backfill's drivers are removed"
    if replace:
        return HAND_BACK, ("the previous version's checkpoint was never written by the new one: it resumes "
                           "where it stopped (what the new version processed is processed again)")
    if not target_ran:
        return HAND_BACK, "the new plan never ran on the checkpoint"
    if back_is_in_place:
        return HAND_BACK, "going back to the old plan is an in-place change"
    if backstop_epoch is None:
        return HAND_BACK, "going back is not in-place, but no backstop snapshot was kept (handing back)"
    return RESTORE, f"going back is not in-place: restoring the checkpoint snapshot (epoch {backstop_epoch})"


def rolling_back(rollout: Rollout, *, now: str, start_epoch: int, mode: str, why: str,
                 error: UpgradeError | None, cancelled: bool = False,
                 backstop_epoch: int | None = None) -> Rollout:
    info = RollbackInfo(mode=mode, reason=why, started=now, start_epoch=start_epoch,  # type: ignore[arg-type]
                        cancelled=cancelled, restore_epoch=backstop_epoch if mode == RESTORE else None)
    update: dict[str, Any] = {
        "step": str(Step.ROLLING_BACK), "rollback": info,
        "message": ("the spec is back at the running plan: " if cancelled else "rolling back: ") + why}
    if error is not None:
        update["error"] = error
    return rollout.model_copy(update=update)


def failed(rollout: Rollout, *, target_hash: str, message: str, error: UpgradeError | None) -> Rollout:
    """Stop here, Degraded, on ``target_hash`` (the plan the workload stays on) until an edit."""
    update: dict[str, Any] = {"step": str(Step.FAILED), "target_hash": target_hash, "message": message}
    if error is not None:
        update["error"] = error
    return rollout.model_copy(update=update)


def completed_plan(rollout: Rollout, format_version: int | None = None) -> PinnedPlan:
    """The pinned plan once the rollout succeeded."""
    return PinnedPlan(
        hash=rollout.target_hash, version=rollout.target_plan_version,
        config_map=str(rollout.target_config_map),
        hand_off_from=rollout.previous if rollout.replace_strategy != BACKFILL else None,
        output_topic=rollout.output_topic or None, format_version=format_version,
        inputs=rollout.target_inputs)


def upgrade_record(
    *,
    from_hash: str | None,
    to_hash: str,
    category: str,
    decision: str,
    outcome: str,
    reasons: list[str],
    changes: list[str],
    now: str,
    generation: int | None = None,
    from_engine: str | None = None,
    to_engine: str | None = None,
    cause: str | None = None,
) -> UpgradeRecord:
    return UpgradeRecord(from_hash=from_hash, to_hash=to_hash, category=category, decision=decision,
                         reasons=reasons, changes=changes, outcome=outcome,  # type: ignore[arg-type]
                         time=now, started_at=now, generation=generation, from_engine=from_engine or None,
                         to_engine=to_engine or None, cause=cause or None)  # type: ignore[arg-type]


def finished_record(record: UpgradeRecord | None, outcome: Outcome, now: str,
                    **extra: Any) -> UpgradeRecord | None:
    """``record`` with its final ``outcome`` (and the ``extra`` fields that are not None, by their
    snake_case names); None when there is no record."""
    if record is None:
        return None
    update = {"outcome": str(outcome), "finished_at": now,
              **{k: v for k, v in extra.items() if v is not None}}
    return record.model_copy(update=update)


def with_history(history: list[UpgradeRecord] | None, record: UpgradeRecord | None) -> list[UpgradeRecord]:
    """``status.history`` with ``record`` (a finished upgrade) added: newest first, at most 10."""
    if record is None:
        return list(history or [])
    key = (record.to_hash, record.started_at)
    previous = [r for r in (history or []) if (r.to_hash, r.started_at) != key]
    return [record, *previous][:HISTORY_LENGTH]


def outcome_of(step: str) -> str:
    return {
        Step.BACKFILLING: Outcome.IN_PROGRESS,
        Step.APPLYING: Outcome.IN_PROGRESS,
        Step.VERIFYING: Outcome.IN_PROGRESS,
        Step.ROLLING_BACK: Outcome.IN_PROGRESS,
        Step.AWAITING_UPGRADE: Outcome.PENDING,
        Step.REJECTED: Outcome.REJECTED,
        Step.FAILED: Outcome.FAILED,
    }.get(Step(step), Outcome.IN_PROGRESS)
