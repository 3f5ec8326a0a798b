"""Status reducers (pure): conditions, derived phase, the closed set of reasons.

The operator gathers *facts* (is the object deleting, suspended, is there a problem, is a plan
pinned, which rollout step is running, is the driver ready) and reduces them together with the
previous status into the next status. Conditions keep their ``lastTransitionTime`` unless their
``status`` changes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

CONDITION_TYPES = ("Ready", "Progressing", "Degraded", "ReplanAvailable", "NodeLossTolerant")


class Reason(StrEnum):
    """Condition reasons (CamelCase, closed set)."""

    AS_EXPECTED = "AsExpected"
    RECONCILING = "Reconciling"
    DRIVER_READY = "DriverReady"
    DRIVER_NOT_READY = "DriverNotReady"
    DRIVER_STARTING = "DriverStarting"
    ROLLING_OUT = "RollingOut"
    UPGRADE_PENDING = "UpgradePending"
    UPGRADE_REJECTED = "UpgradeRejected"
    UPGRADE_FAILED = "UpgradeFailed"
    UPGRADE_ROLLED_BACK = "UpgradeRolledBack"
    DRIVER_FAILED = "DriverFailed"
    SUSPENDED = "Suspended"
    DELETING = "Deleting"
    COMPILE_FAILED = "CompileFailed"
    INVALID_SPEC = "InvalidSpec"
    CLUSTER_NOT_FOUND = "ClusterNotFound"
    CLUSTER_INVALID = "ClusterInvalid"
    KAFKA_UNREACHABLE = "KafkaUnreachable"
    KAFKA_REACHABLE = "KafkaReachable"
    #: the schema registry of avro sources and sinks did not answer (retried with back-off)
    REGISTRY_UNREACHABLE = "RegistryUnreachable"
    #: an avro sink's new schema is incompatible with its subject (the registry's reason)
    SCHEMA_INCOMPATIBLE = "SchemaIncompatible"
    COMPILER_CHANGED = "CompilerChanged"
    PLAN_CURRENT = "PlanCurrent"
    #: NodeLossTolerant: the drivers spread over nodes (object store, ReadWriteMany claim), or not
    DRIVERS_SPREAD = "DriversSpread"
    DRIVERS_ON_ONE_NODE = "DriversOnOneNode"


class EventReason(StrEnum):
    """Reasons of the Kubernetes Events the operator posts (closed set)."""

    PLAN_PINNED = "PlanPinned"
    WORKLOAD_CREATED = "WorkloadCreated"
    COMPILE_FAILED = "CompileFailed"
    INVALID_SPEC = "InvalidSpec"
    CLUSTER_NOT_FOUND = "ClusterNotFound"
    KAFKA_UNREACHABLE = "KafkaUnreachable"
    REGISTRY_UNREACHABLE = "RegistryUnreachable"
    SCHEMA_INCOMPATIBLE = "SchemaIncompatible"
    #: an avro source subject gained a version the running plan does not read with (reported only)
    SOURCE_SCHEMA_UPDATED = "SourceSchemaUpdated"
    TOPIC_CREATED = "TopicCreated"
    TOPIC_DELETED = "TopicDeleted"
    TOPIC_CLEANUP_FAILED = "TopicCleanupFailed"
    UPGRADE_CLASSIFIED = "UpgradeClassified"
    UPGRADE_STARTED = "UpgradeStarted"
    UPGRADE_SUCCEEDED = "UpgradeSucceeded"
    UPGRADE_FAILED = "UpgradeFailed"
    UPGRADE_ROLLING_BACK = "UpgradeRollingBack"
    UPGRADE_ROLLED_BACK = "UpgradeRolledBack"
    DRIVER_FAILED = "DriverFailed"
    UPGRADE_PENDING = "UpgradePending"
    UPGRADE_REJECTED = "UpgradeRejected"
    UPGRADE_CANCELLED = "UpgradeCancelled"
    BACKFILL_CAUGHT_UP = "BackfillCaughtUp"
    OUTPUT_SWITCHED = "OutputSwitched"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    DRAINING = "Draining"
    DRAIN_TIMED_OUT = "DrainTimedOut"
    STATE_RETAINED = "StateRetained"
    STATE_DELETED = "StateDeleted"
    #: deletionPolicy Delete with an object store: the purge pod started / gave up
    STATE_DELETING = "StateDeleting"
    STATE_CLEANUP_FAILED = "StateCleanupFailed"
    FAILED_OVER = "FailedOver"
    HANDED_OFF = "HandedOff"
    CHECKPOINT_REMOVED = "CheckpointRemoved"
    GROUPS_DELETED = "ConsumerGroupsDeleted"
    PLAN_CONFIG_MAP_DELETED = "PlanConfigMapDeleted"
    VERSION_CLEANED_UP = "VersionCleanedUp"
    ROLLBACK_REQUESTED = "RollbackRequested"
    ROLLBACK_REFUSED = "RollbackRefused"
    REPLAN_AVAILABLE = "ReplanAvailable"
    #: a QueryCluster's rollout across its queries
    ROLLOUT_WAVE = "RolloutWave"
    ROLLOUT_HALTED = "RolloutHalted"
    ROLLOUT_COMPLETE = "RolloutComplete"


PHASES = (
    "Pending", "Starting", "Running", "Upgrading", "UpgradePending", "Suspended", "Degraded", "Deleting",
)

#: reasons that make a query Degraded (a problem the user must fix, or an outage to wait out)
PROBLEM_REASONS = frozenset({
    Reason.COMPILE_FAILED, Reason.INVALID_SPEC, Reason.CLUSTER_NOT_FOUND, Reason.CLUSTER_INVALID,
    Reason.KAFKA_UNREACHABLE, Reason.UPGRADE_REJECTED, Reason.UPGRADE_FAILED, Reason.DRIVER_FAILED,
    Reason.UPGRADE_ROLLED_BACK, Reason.REGISTRY_UNREACHABLE, Reason.SCHEMA_INCOMPATIBLE,
})


def now_rfc3339(clock: dt.datetime | None = None) -> str:
    moment = clock or dt.datetime.now(dt.UTC)
    return moment.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class StatusProblem:
    reason: Reason
    message: str

    def __post_init__(self) -> None:
        if self.reason not in PROBLEM_REASONS:
            raise ValueError(f"{self.reason} is not a problem reason")


@dataclass(frozen=True)
class Facts:
    """What the operator observed in one reconcile."""

    generation: int | None
    deleting: bool = False
    suspended: bool = False
    problem: StatusProblem | None = None
    plan_pinned: bool = False
    rollout_step: str | None = None  # a sluice.core.rollout.Step value or None
    driver_ready: bool = False


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new list with condition ``type_`` set; ``lastTransitionTime`` changes only with ``status``."""
    if type_ not in CONDITION_TYPES:
        raise ValueError(f"unknown condition type {type_!r}")
    if isinstance(status, bool):
        status = "True" if status else "False"
    if status not in ("True", "False", "Unknown"):
        raise ValueError(f"bad condition status {status!r}")
    previous = next((c for c in conditions if c.get("type") == type_), None)
    transition = now
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        transition = previous["lastTransitionTime"]
    new: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": str(reason),
        "message": message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        new["observedGeneration"] = generation
    out = [c for c in conditions if c.get("type") != type_] + [new]
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(out, key=lambda c: order.get(c.get("type", ""), 99))


def get_condition(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


#: rollout steps shown as Upgrading / Progressing
ROLLING = ("Deploying", "Backfilling", "Applying", "Verifying", "RollingBack")


def derive_phase(facts: Facts) -> str:
    """The single lifecycle word shown by ``kubectl get sq`` (precedence top to bottom)."""
    from sluice.core.rollout import Step

    if facts.deleting:
        return "Deleting"
    if facts.problem is not None:
        return "Degraded"
    if facts.suspended:
        return "Suspended"
    if facts.rollout_step in ROLLING and facts.plan_pinned:
        return "Upgrading"
    if facts.rollout_step == Step.AWAITING_UPGRADE:
        return "UpgradePending"
    if not facts.plan_pinned:
        return "Pending"
    if not facts.driver_ready:
        return "Starting"
    return "Running"


def reduce_status(previous: dict[str, Any] | None, facts: Facts, now: str) -> dict[str, Any]:
    """observedGeneration, phase, ready and conditions for ``facts``; other status keys untouched."""
    from sluice.core.rollout import Step

    conditions = list((previous or {}).get("conditions") or [])
    gen = facts.generation
    ready = facts.driver_ready and not facts.deleting and not facts.suspended
    phase = derive_phase(facts)

    # Ready
    if facts.deleting:
        r_reason, r_msg = Reason.DELETING, "the query is being deleted"
    elif facts.suspended:
        r_reason, r_msg = Reason.SUSPENDED, "spec.suspend is true: the driver is stopped, state is kept"
    elif ready:
        r_reason, r_msg = Reason.DRIVER_READY, "the driver reports ready"
    elif not facts.plan_pinned:
        r_reason, r_msg = Reason.RECONCILING, "no plan is running yet"
    else:
        r_reason, r_msg = Reason.DRIVER_NOT_READY, "the driver is not ready"
    conditions = set_condition(conditions, "Ready", ready, r_reason, r_msg, now, gen)

    # Progressing
    if facts.deleting:
        p = (True, Reason.DELETING, "draining and cleaning up")
    elif facts.problem is not None and facts.problem.reason != Reason.UPGRADE_REJECTED:
        p = (False, facts.problem.reason, facts.problem.message)
    elif facts.suspended:
        p = (False, Reason.SUSPENDED, "suspended")
    elif facts.rollout_step == Step.AWAITING_UPGRADE:
        p = (False, Reason.UPGRADE_PENDING, "a spec change waits for an upgrade that is not automatic")
    elif facts.rollout_step in ROLLING:
        p = (True, Reason.ROLLING_OUT, f"rollout step {facts.rollout_step}")
    elif not facts.plan_pinned:
        p = (True, Reason.RECONCILING, "compiling and deploying")
    elif not ready:
        p = (True, Reason.DRIVER_STARTING, "waiting for the driver to become ready")
    else:
        p = (False, Reason.AS_EXPECTED, "the running plan matches the spec")
    conditions = set_condition(conditions, "Progressing", p[0], p[1], p[2], now, gen)

    # Degraded
    if facts.problem is not None:
        conditions = set_condition(
            conditions, "Degraded", True, facts.problem.reason, facts.problem.message, now, gen
        )
    else:
        conditions = set_condition(conditions, "Degraded", False, Reason.AS_EXPECTED, "", now, gen)

    return {"observedGeneration": gen, "phase": phase, "ready": ready, "conditions": conditions}


def with_replan_condition(status: dict[str, Any], now: str) -> dict[str, Any]:
    """``status`` with the ``ReplanAvailable`` condition derived from ``plan.replan`` (True while this
    operator's compiler plans the unchanged spec differently; the re-plan waits for the user)."""
    plan = status.get("plan")
    if not isinstance(plan, dict):
        return status
    replan = plan.get("replan") or {}
    if replan:
        cond = (True, Reason.COMPILER_CHANGED, str(replan.get("message") or ""))
    else:
        cond = (False, Reason.PLAN_CURRENT, "this operator compiles the spec into the pinned plan")
    conditions = list(status.get("conditions") or [])
    previous = get_condition(conditions, "ReplanAvailable")
    if (previous is not None and previous.get("status") == ("True" if cond[0] else "False")
            and previous.get("message") == cond[2]):
        return status
    return {**status, "conditions": set_condition(conditions, "ReplanAvailable", *cond, now,
                                                  status.get("observedGeneration"))}


def with_node_loss_condition(status: dict[str, Any], tolerant: bool, message: str,
                             now: str) -> dict[str, Any]:
    """``status`` with the ``NodeLossTolerant`` condition: True (``DriversSpread``) when the query's
    checkpoint storage lets its drivers run on different nodes, False (``DriversOnOneNode``) when a
    ReadWriteOnce claim keeps them all on one node; ``status`` itself when nothing changes."""
    reason = Reason.DRIVERS_SPREAD if tolerant else Reason.DRIVERS_ON_ONE_NODE
    conditions = list(status.get("conditions") or [])
    previous = get_condition(conditions, "NodeLossTolerant")
    if (previous is not None and previous.get("status") == ("True" if tolerant else "False")
            and previous.get("message") == message and previous.get("reason") == reason):
        return status
    return {**status, "conditions": set_condition(conditions, "NodeLossTolerant", tolerant, reason, message,
                                                  now, status.get("observedGeneration"))}


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new`` for the keys of ``new``: an
    object value is diffed key by key, and a key it no longer has is sent as null (a merge patch
    of a whole object would keep the keys it leaves out, e.g. the error of an earlier upgrade);
    other values are sent whole when they differ. A None in ``new`` deletes the key."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch(before, value)
            nested.update({k: None for k in before if k not in value})
            if nested:
                patch[key] = nested
        elif value != before or (value is None and key in old):
            patch[key] = value
    return patch


#: characters of a plan hash shown for it: the Plan column of ``kubectl get sq``, ``status.plan.shortHash``,
#: the plan ConfigMap's name and its ``sluice.dev/plan-hash`` label
SHORT_HASH_LENGTH = 12


def short_hash(plan_hash: str | None) -> str:
    """A plan hash as it is shown (its first :data:`SHORT_HASH_LENGTH` characters; ``-`` for none)."""
    return str(plan_hash)[:SHORT_HASH_LENGTH] if plan_hash else "-"


def with_short_hash(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with ``plan.shortHash`` derived from ``plan.hash`` (a CRD printer column cannot cut a
    string); ``status`` itself when it is already right or there is no pinned plan."""
    plan = status.get("plan")
    if not isinstance(plan, dict) or not plan.get("hash"):
        return status
    short = str(plan["hash"])[:SHORT_HASH_LENGTH]
    if plan.get("shortHash") == short:
        return status
    return {**status, "plan": {**plan, "shortHash": short}}


def status_changed(previous: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether writing ``new`` over ``previous`` would change anything (saves API calls)."""
    previous = previous or {}
    return any(previous.get(k) != v for k, v in new.items())


def phase_transition(previous: dict[str, Any] | None, new: dict[str, Any]) -> tuple[str, str] | None:
    old_phase = (previous or {}).get("phase") or "None"
    if new.get("phase") and new["phase"] != old_phase:
        return (old_phase, new["phase"])
    return None
