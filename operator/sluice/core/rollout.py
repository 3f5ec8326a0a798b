"""The rollout state machine (pure), kept in ``status.rollout`` as a write-ahead log.

States (``Step``)::

    (no rollout) --first compile--> Deploying --objects created--> (no rollout, plan pinned)
    (plan pinned) --spec edit--> classify -> none/transparent      --> Applying --driver rolled--> (pinned)
                                           -> in-place/replace      --> AwaitingUpgrade (waits)
                                           -> reject                --> Rejected (waits for a new edit)
    AwaitingUpgrade/Rejected --spec back at the pinned plan--> (no rollout, cancelled)
    AwaitingUpgrade/Rejected --another edit--> classify again

``Deploying`` and ``Applying`` are always finished before anything else is considered, so an
operator restart in the middle resumes them instead of forgetting them. The upgrade
orchestration (replace, in-place with health gates, rollback) slots in by making
``AwaitingUpgrade`` rollouts executable: see ``executes_automatically``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal


class Step(StrEnum):
    DEPLOYING = "Deploying"
    APPLYING = "Applying"
    AWAITING_UPGRADE = "AwaitingUpgrade"
    REJECTED = "Rejected"


ActionKind = Literal["create", "resume", "steady", "classify", "wait", "cancel"]

IN_FLIGHT = frozenset({Step.DEPLOYING, Step.APPLYING})
WAITING = frozenset({Step.AWAITING_UPGRADE, Step.REJECTED})


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    rollout: dict[str, Any] | None = None


def next_action(pinned: dict[str, Any] | None, rollout: dict[str, Any] | None, compiled_hash: str) -> Action:
    """What the reconcile does next, from the status (pinned plan, rollout) and the compiled spec."""
    if rollout is not None and rollout.get("step") in IN_FLIGHT:
        return Action("resume", rollout)
    pinned_hash = (pinned or {}).get("hash")
    if pinned_hash is None:
        return Action("create")
    if pinned_hash == compiled_hash:
        if rollout is not None:
            return Action("cancel", rollout)
        return Action("steady")
    if rollout is not None and rollout.get("step") in WAITING and rollout.get("targetHash") == compiled_hash:
        return Action("wait", rollout)
    return Action("classify", rollout)


def executes_automatically(category: str, decision: str) -> bool:
    """Edits this issue carries out itself: ``none`` and ``transparent`` ones."""
    return decision == "none" or category == "transparent"


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
) -> dict[str, Any]:
    return {
        "targetHash": target_hash,
        "targetPlanVersion": target_plan_version,
        "targetConfigMap": target_config_map,
        "category": category,
        "decision": decision,
        "strategy": strategy,
        "step": str(step),
        "started": now,
        "message": message,
    }


def creation_rollout(target_hash: str, config_map: str, now: str) -> dict[str, Any]:
    return new_rollout(
        step=Step.DEPLOYING, target_hash=target_hash, target_plan_version=1, target_config_map=config_map,
        category="initial", decision="create", strategy="create", now=now,
        message="first deployment of the plan",
    )


def classified_rollout(
    *,
    pinned: dict[str, Any],
    target_hash: str,
    target_config_map: str,
    category: str,
    decision: str,
    allow_replace: bool,
    now: str,
) -> dict[str, Any]:
    """The rollout recorded after classifying an edit (before acting on it)."""
    version = int(pinned.get("version") or 1)
    if executes_automatically(category, decision):
        return new_rollout(
            step=Step.APPLYING, target_hash=target_hash, target_plan_version=version,
            target_config_map=target_config_map, category=category, decision=decision,
            strategy="in-place", now=now, message="rolling the driver onto the new plan (same checkpoint)",
        )
    if decision == "reject" or (decision == "replace" and not allow_replace):
        why = "the classifier rejects this change" if decision == "reject" else (
            "the change needs a replace and spec.upgrade.allowReplace is false"
        )
        return new_rollout(
            step=Step.REJECTED, target_hash=target_hash, target_plan_version=version,
            target_config_map=target_config_map, category=category, decision=decision,
            strategy="none", now=now, message=why,
        )
    next_version = version + 1 if decision == "replace" else version
    return new_rollout(
        step=Step.AWAITING_UPGRADE, target_hash=target_hash, target_plan_version=next_version,
        target_config_map=target_config_map, category=category, decision=decision,
        strategy=decision, now=now, message=f"waiting: a {decision} upgrade is not carried out automatically",
    )


def completed_plan(rollout: dict[str, Any], format_version: int | None = None) -> dict[str, Any]:
    """The pinned plan once an in-flight rollout is done."""
    out = {
        "hash": rollout["targetHash"],
        "version": int(rollout["targetPlanVersion"]),
        "configMap": rollout["targetConfigMap"],
    }
    if format_version is not None:
        out["formatVersion"] = format_version
    return out


def upgrade_record(
    *,
    from_hash: str | None,
    rollout: dict[str, Any],
    outcome: str,
    reasons: list[str],
    changes: list[str],
    now: str,
) -> dict[str, Any]:
    return {
        "fromHash": from_hash,
        "toHash": rollout["targetHash"],
        "category": rollout["category"],
        "decision": rollout["decision"],
        "reasons": reasons,
        "changes": changes,
        "outcome": outcome,
        "time": now,
    }


def outcome_of(step: str) -> str:
    return {
        Step.APPLYING: "Applied",
        Step.AWAITING_UPGRADE: "Pending",
        Step.REJECTED: "Rejected",
    }.get(Step(step), "Applied")
