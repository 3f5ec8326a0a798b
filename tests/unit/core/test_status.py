"""Status reducers and the rollout state machine (pure)."""

from __future__ import annotations

import pytest
from sluice.core.records import PinnedPlan
from sluice.core.rollout import (
    Step,
    classified_rollout,
    completed_plan,
    creation_rollout,
    executes_automatically,
    next_action,
    outcome_of,
)
from sluice.core.status import (
    EventReason,
    Facts,
    Reason,
    StatusProblem,
    derive_phase,
    get_condition,
    phase_transition,
    reduce_status,
    set_condition,
    status_changed,
)

from tests.support.records import pinned

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
H1, H2, H3 = "1" * 64, "2" * 64, "3" * 64
PINNED = pinned(H1)


# -- conditions ---------------------------------------------------------------------------------

def test_transition_time_is_stable_while_status_unchanged() -> None:
    c = set_condition([], "Ready", False, Reason.RECONCILING, "a", T0)
    c = set_condition(c, "Ready", False, Reason.DRIVER_NOT_READY, "b", T1)
    ready = get_condition(c, "Ready")
    assert ready is not None
    assert ready["lastTransitionTime"] == T0
    assert ready["reason"] == "DriverNotReady" and ready["message"] == "b"
    c = set_condition(c, "Ready", True, Reason.DRIVER_READY, "", T2)
    assert get_condition(c, "Ready")["lastTransitionTime"] == T2  # type: ignore[index]


def test_conditions_are_unique_and_ordered() -> None:
    c = set_condition([], "Degraded", False, Reason.AS_EXPECTED, "", T0)
    c = set_condition(c, "Ready", True, Reason.DRIVER_READY, "", T0)
    c = set_condition(c, "Ready", True, Reason.DRIVER_READY, "", T1)
    assert [x["type"] for x in c] == ["Ready", "Degraded"]


def test_condition_carries_observed_generation() -> None:
    c = set_condition([], "Progressing", True, Reason.ROLLING_OUT, "", T0, generation=7)
    assert c[0]["observedGeneration"] == 7


@pytest.mark.parametrize("bad", [("Healthy", True), ("Ready", "yes")])
def test_bad_conditions_refused(bad: tuple) -> None:
    with pytest.raises(ValueError):
        set_condition([], bad[0], bad[1], Reason.AS_EXPECTED, "", T0)


def test_reasons_are_camel_case_and_closed() -> None:
    for reason in list(Reason) + list(EventReason):
        assert reason.value[0].isupper() and "_" not in reason.value and " " not in reason.value
    with pytest.raises(ValueError):
        StatusProblem(Reason.DRIVER_READY, "not a problem")


# -- phase --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("facts", "phase"), [
    (Facts(generation=1), "Pending"),
    (Facts(generation=1, plan_pinned=True), "Starting"),
    (Facts(generation=1, plan_pinned=True, driver_ready=True), "Running"),
    (Facts(generation=1, plan_pinned=True, suspended=True), "Suspended"),
    (Facts(generation=1, plan_pinned=True, rollout_step=Step.APPLYING), "Upgrading"),
    (Facts(generation=1, plan_pinned=True, rollout_step=Step.AWAITING_UPGRADE, driver_ready=True),
     "UpgradePending"),
    (Facts(generation=1, rollout_step=Step.DEPLOYING), "Pending"),
    (Facts(generation=1, problem=StatusProblem(Reason.COMPILE_FAILED, "x")), "Degraded"),
    (Facts(generation=1, plan_pinned=True, suspended=True,
           problem=StatusProblem(Reason.KAFKA_UNREACHABLE, "x")), "Degraded"),
    (Facts(generation=1, deleting=True, problem=StatusProblem(Reason.COMPILE_FAILED, "x")), "Deleting"),
])
def test_derived_phase(facts: Facts, phase: str) -> None:
    assert derive_phase(facts) == phase


def test_reduce_running() -> None:
    out = reduce_status(None, Facts(generation=3, plan_pinned=True, driver_ready=True), T0)
    assert out["observedGeneration"] == 3 and out["phase"] == "Running" and out["ready"] is True
    conds = {c["type"]: c for c in out["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "DriverReady"
    assert conds["Progressing"]["status"] == "False"
    assert conds["Degraded"]["status"] == "False"
    assert all(c["observedGeneration"] == 3 for c in out["conditions"])


def test_reduce_compile_error_is_degraded_with_message() -> None:
    msg = "spec.sql: line 2, column 8: unknown column 'x'"
    out = reduce_status(None, Facts(generation=1, problem=StatusProblem(Reason.COMPILE_FAILED, msg)), T0)
    degraded = get_condition(out["conditions"], "Degraded")
    assert degraded is not None
    assert degraded == {**degraded, "status": "True", "reason": "CompileFailed", "message": msg}
    assert out["ready"] is False and out["phase"] == "Degraded"


def test_reduce_keeps_transition_times_across_reconciles() -> None:
    first = reduce_status(None, Facts(generation=1, plan_pinned=True), T0)
    second = reduce_status(first, Facts(generation=1, plan_pinned=True), T1)
    assert second == first
    assert not status_changed(first, second)
    third = reduce_status(second, Facts(generation=1, plan_pinned=True, driver_ready=True), T2)
    times = {c["type"]: c["lastTransitionTime"] for c in third["conditions"]}
    assert times == {"Ready": T2, "Progressing": T2, "Degraded": T0}
    assert phase_transition(second, third) == ("Starting", "Running")
    assert phase_transition(third, third) is None


def test_suspended_is_not_ready_and_not_progressing() -> None:
    out = reduce_status(None, Facts(generation=1, plan_pinned=True, suspended=True, driver_ready=True), T0)
    conds = {c["type"]: c for c in out["conditions"]}
    assert out["ready"] is False
    assert conds["Ready"]["reason"] == "Suspended" and conds["Progressing"]["status"] == "False"


def test_upgrade_pending_keeps_ready() -> None:
    facts = Facts(generation=2, plan_pinned=True, driver_ready=True, rollout_step=Step.AWAITING_UPGRADE)
    out = reduce_status(None, facts, T0)
    conds = {c["type"]: c for c in out["conditions"]}
    assert out["ready"] is True
    assert conds["Progressing"]["reason"] == "UpgradePending"


# -- rollout state machine ----------------------------------------------------------------------

def test_first_reconcile_creates() -> None:
    assert next_action(None, None, H1).kind == "create"


def test_in_flight_rollouts_are_resumed_first() -> None:
    deploying = creation_rollout(H1, "cm", T0)
    assert next_action(None, deploying, H1).kind == "resume"
    assert next_action(None, deploying, H2).kind == "resume"  # finish before re-planning
    applying = classified_rollout(pinned=PINNED, target_hash=H2, target_config_map="cm2",
                                  category="transparent", decision="in-place", allow_replace=True, now=T0)
    assert applying.step == Step.APPLYING
    assert next_action(PINNED, applying, H3).kind == "resume"


def test_steady_classify_wait_cancel() -> None:
    assert next_action(PINNED, None, H1).kind == "steady"
    assert next_action(PINNED, None, H2).kind == "classify"
    pending = classified_rollout(pinned=PINNED, target_hash=H2, target_config_map="cm2",
                                 category="topology", decision="replace", allow_replace=True, now=T0)
    assert pending.step == Step.AWAITING_UPGRADE
    assert pending.target_plan_version == 2
    assert next_action(PINNED, pending, H2).kind == "wait"
    assert next_action(PINNED, pending, H3).kind == "classify"  # another edit: classify again
    assert next_action(PINNED, pending, H1).kind == "cancel"  # back to the running plan


@pytest.mark.parametrize(("category", "decision", "allow", "step"), [
    ("none", "none", True, Step.APPLYING),
    ("transparent", "in-place", True, Step.APPLYING),
    ("data-selection", "in-place", True, Step.APPLYING),
    ("schema-evolution", "in-place", True, Step.APPLYING),
    ("topology", "replace", True, Step.AWAITING_UPGRADE),
    ("topology", "replace", False, Step.REJECTED),
    ("unsupported", "reject", True, Step.REJECTED),
])
def test_classification_to_step(category: str, decision: str, allow: bool, step: Step) -> None:
    rollout = classified_rollout(pinned=PINNED, target_hash=H2, target_config_map="cm2", category=category,
                                 decision=decision, allow_replace=allow, now=T0)
    assert rollout.step == step
    assert executes_automatically(category, decision) == (step == Step.APPLYING)
    if step == Step.APPLYING:
        assert rollout.target_plan_version == 1  # same checkpoint


def test_completed_plan_and_outcomes() -> None:
    rollout = creation_rollout(H1, "q-plan-111111111111", T0)
    plan = completed_plan(rollout, 1)
    assert plan == PinnedPlan(hash=H1, version=1, config_map="q-plan-111111111111", format_version=1)
    assert plan.for_storage() == {"hash": H1, "version": 1, "configMap": "q-plan-111111111111",
                                  "formatVersion": 1}
    assert outcome_of(Step.AWAITING_UPGRADE) == "Pending"
    assert outcome_of(Step.REJECTED) == "Rejected"
    assert outcome_of(Step.APPLYING) == "InProgress"
    assert outcome_of(Step.FAILED) == "Failed"


def test_merge_patch_removes_nested_keys_an_object_no_longer_has() -> None:
    from sluice.core.status import merge_patch

    old = {"lastUpgrade": {"toHash": "a", "gapSeconds": 1.5, "error": {"class": "X", "step": "p"}},
           "plan": {"hash": "a"}, "phase": "Running"}
    new = {"lastUpgrade": {"toHash": "b", "error": {"class": "Y"}}, "plan": {"hash": "a"},
           "phase": "Upgrading", "rollout": None}
    assert merge_patch(old, new) == {
        "lastUpgrade": {"toHash": "b", "gapSeconds": None, "error": {"class": "Y", "step": None}},
        "phase": "Upgrading",
    }
    assert merge_patch({"rollout": {"step": "Verifying"}}, {"rollout": None}) == {"rollout": None}
    assert merge_patch({}, {"history": [{"a": 1}]}) == {"history": [{"a": 1}]}
