"""The rollout state machine (pure): which step comes next, how a rollback returns, the history."""

from __future__ import annotations

import pytest
from sluice.core.records import RollbackInfo, Rollout, UpgradeError, UpgradeRecord
from sluice.core.rollout import (
    HAND_BACK,
    RESTORE,
    Outcome,
    Step,
    classified_rollout,
    failed,
    finished_record,
    next_action,
    rollback_mode,
    rolling_back,
    verifying,
    with_history,
)
from sluice.core.status import Facts, derive_phase

from tests.support.records import pinned, upgrade

T0 = "2026-01-01T00:00:00Z"
A, B, C = "a" * 64, "b" * 64, "c" * 64
PINNED_A = pinned(A)


def rollout(step: Step, target: str = B, **extra: object) -> Rollout:
    """The rollout of an in-place edit to ``target``, at ``step`` (``extra``: snake_case fields)."""
    base = classified_rollout(pinned=PINNED_A, target_hash=target, target_config_map=f"q-plan-{target[:12]}",
                              category="data-selection", decision="in-place", allow_replace=True, now=T0)
    return base.model_copy(update={"step": str(step), **extra})


def test_an_in_place_edit_is_carried_out_not_parked() -> None:
    for category in ("transparent", "data-selection", "schema-evolution"):
        r = classified_rollout(pinned=PINNED_A, target_hash=B, target_config_map="cm", category=category,
                               decision="in-place", allow_replace=True, now=T0)
        assert r.step == Step.APPLYING and r.from_hash == A and r.strategy == "in-place"


@pytest.mark.parametrize("step", [Step.APPLYING, Step.VERIFYING, Step.ROLLING_BACK, Step.DEPLOYING])
def test_a_rollout_in_flight_is_finished_before_a_newer_edit(step: Step) -> None:
    action = next_action(PINNED_A, rollout(step), compiled_hash=C)
    assert action.kind == "resume"


@pytest.mark.parametrize("step", [Step.APPLYING, Step.VERIFYING])
def test_the_spec_back_at_the_stable_plan_mid_rollout_reverts(step: Step) -> None:
    assert next_action(PINNED_A, rollout(step), compiled_hash=A).kind == "revert"


def test_a_rollback_in_flight_is_not_reverted_again() -> None:
    assert next_action(PINNED_A, rollout(Step.ROLLING_BACK), compiled_hash=A).kind == "resume"


def test_a_failed_rollout_waits_on_its_plan_and_the_next_edit_is_classified_against_it() -> None:
    stuck = failed(rollout(Step.VERIFYING), target_hash=B, message="boom", error=None)
    assert next_action(PINNED_A, stuck, compiled_hash=B).kind == "wait"
    action = next_action(PINNED_A, stuck, compiled_hash=C)
    assert action.kind == "classify" and action.from_hash == B
    # going back to the stable plan by hand is an upgrade from what runs (B), not a no-op
    back = next_action(PINNED_A, stuck, compiled_hash=A)
    assert back.kind == "classify" and back.from_hash == B


def test_steady_cancel_and_wait() -> None:
    assert next_action(PINNED_A, None, A).kind == "steady"
    assert next_action(None, None, A).kind == "create"
    assert next_action(PINNED_A, None, B).kind == "classify"
    assert next_action(PINNED_A, None, B).from_hash == A
    waiting = rollout(Step.AWAITING_UPGRADE)
    assert next_action(PINNED_A, waiting, B).kind == "wait"
    assert next_action(PINNED_A, waiting, A).kind == "cancel"
    assert next_action(PINNED_A, waiting, C).kind == "classify"


def test_rollback_mode() -> None:
    assert rollback_mode(back_is_in_place=False, target_ran=False, backstop_epoch=3)[0] == HAND_BACK
    assert rollback_mode(back_is_in_place=True, target_ran=True, backstop_epoch=3)[0] == HAND_BACK
    mode, why = rollback_mode(back_is_in_place=False, target_ran=True, backstop_epoch=3)
    assert mode == RESTORE and "epoch 3" in why
    assert rollback_mode(back_is_in_place=False, target_ran=True, backstop_epoch=None)[0] == HAND_BACK


def test_verifying_and_rolling_back_records() -> None:
    v = verifying(rollout(Step.APPLYING), now=T0, start_epoch=4)
    assert v.step == Step.VERIFYING and v.start_epoch == 4 and v.gate_started == T0
    rb = rolling_back(v, now=T0, start_epoch=6, mode=RESTORE, why="not in place", backstop_epoch=5,
                      error=UpgradeError.model_validate({"class": "CAST_INVALID_INPUT", "message": "x"}))
    assert isinstance(rb.rollback, RollbackInfo)
    assert rb.rollback.for_storage() == {"mode": RESTORE, "reason": "not in place", "started": T0,
                                         "startEpoch": 6, "cancelled": False, "restoreEpoch": 5}
    assert rb.error is not None and rb.error.class_ == "CAST_INVALID_INPUT"
    assert rb.for_storage()["error"]["class"] == "CAST_INVALID_INPUT"
    back = rolling_back(v, now=T0, start_epoch=6, mode=HAND_BACK, why="", error=None)
    assert back.rollback is not None and back.rollback.restore_epoch is None
    assert "restoreEpoch" not in back.rollback.for_storage()


def test_history_keeps_the_last_ten_newest_first_without_repeats() -> None:
    history: list[UpgradeRecord] = []
    for i in range(12):
        started = upgrade(f"{i}", Outcome.IN_PROGRESS, startedAt=f"t{i}")
        record = finished_record(started, Outcome.SUCCEEDED, T0)
        history = with_history(history, record)
        history = with_history(history, record)  # written again after an operator restart
    assert [r.to_hash for r in history] == [str(i) for i in range(11, 1, -1)]
    assert all(r.outcome == "Succeeded" and r.finished_at == T0 for r in history)


@pytest.mark.parametrize(("step", "phase"), [
    (Step.APPLYING, "Upgrading"), (Step.VERIFYING, "Upgrading"), (Step.ROLLING_BACK, "Upgrading"),
])
def test_rollout_steps_show_as_upgrading(step: Step, phase: str) -> None:
    assert derive_phase(Facts(generation=2, plan_pinned=True, rollout_step=step, driver_ready=True)) == phase
