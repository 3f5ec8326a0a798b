"""Engine upgrades in the rollout state machine and the health gate (pure): an engine change is
classified and carried out like an edit, and only drivers on the target engine pass its gate."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sluice.core import gate
from sluice.core.driverreport import (
    DRIVER_ERROR,
    HOLDER_PROGRESS,
    RESTORE_REQUEST,
    DriverError,
    Progress,
    RestoreRequest,
    pending_restore,
)
from sluice.core.election import LeaseRecord
from sluice.core.records import Rollout
from sluice.core.rollout import Outcome, Step, held_back, next_action, target_engine

from tests.support.records import pinned, rollout, upgrade

A, B = "a" * 64, "b" * 64
E1, E2 = "1" * 64, "2" * 64
PINNED = pinned(A)
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def engine_rollout(step: Step = Step.VERIFYING) -> Rollout:
    return rollout(step, A, targetConfigMap=PINNED.config_map, targetPlanVersion=1,
                   targetEngine={"digest": E2, "image": "rt:2"}, fromEngine=E1)


def test_a_new_engine_is_classified_even_when_the_plan_stays() -> None:
    assert next_action(PINNED, None, A, engine=E1, pinned_engine=E1).kind == "steady"
    assert next_action(PINNED, None, A, engine=E2, pinned_engine=E1).kind == "classify"
    assert next_action(PINNED, None, A).kind == "steady"  # engines not compared: as before


def test_an_engine_rollout_resumes_and_is_reverted_when_the_cluster_goes_back() -> None:
    moving = engine_rollout()
    assert target_engine(moving, E1) == E2 and target_engine(rollout(Step.VERIFYING, B), E1) == E1
    assert next_action(PINNED, moving, A, engine=E2, pinned_engine=E1).kind == "resume"
    assert next_action(PINNED, moving, A, engine=E1, pinned_engine=E1).kind == "revert"


def test_an_edit_back_at_the_stable_plan_cancels_a_plan_rollout_though_a_new_engine_waits() -> None:
    plan_rollout = rollout(Step.VERIFYING, B)
    # the spec went back to A while the cluster admitted engine E2: the rollout to B is obsolete
    assert next_action(PINNED, plan_rollout, A, engine=E2, pinned_engine=E1).kind == "revert"
    # a rollout of both, of which the engine is still asked for: obsolete too (the engine comes next)
    both = engine_rollout().model_copy(update={"target_hash": B})
    assert next_action(PINNED, both, A, engine=E2, pinned_engine=E1).kind == "revert"
    assert next_action(PINNED, both, B, engine=E2, pinned_engine=E1).kind == "resume"


def test_a_rolled_back_engine_is_held_until_the_spec_or_the_engine_changes() -> None:
    last = upgrade(A, Outcome.ROLLED_BACK, toEngine=E2, generation=3)
    assert held_back(last, A, 3, E2) and not held_back(last, A, 4, E2) and not held_back(last, A, 3, "3" * 64)
    assert next_action(PINNED, None, A, last, 3, engine=E2, pinned_engine=E1).kind == "held"
    # records from before engines were recorded: the plan alone decides
    assert held_back(last.model_copy(update={"to_engine": None}), A, 3, E2)


def lease(progress: Progress, holder: str = "q-driver-x/1", transitions: int = 5) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration=10, transitions=transitions, renew_time=None,
                       resource_version="1", annotations={HOLDER_PROGRESS: progress.to_json()})


def evaluate(record: LeaseRecord | None, pods: list[dict[str, Any]] | None = None,
             engine: str | None = E2) -> gate.GateResult:
    return gate.evaluate(plan_hash=A, start_epoch=4, started=T0, now=T0 + dt.timedelta(seconds=5),
                         record=record, pods=pods or [], batches_needed=3, timeout=300, engine=engine)


def test_only_a_driver_on_the_target_engine_passes_the_gate() -> None:
    assert evaluate(lease(Progress(A, 5, 50, 50, engine=E1))).verdict == gate.Verdict.WAIT
    assert evaluate(lease(Progress(A, 5, 3, 3, engine=E2))).verdict == gate.Verdict.PASS
    # a plan rollout (engine unchanged) counts any report of the target plan
    assert evaluate(lease(Progress(A, 5, 3, 3, engine=E1)), engine=None).verdict == gate.Verdict.PASS


def pod(name: str, engine: str, *, waiting: str | None = None,
        error: DriverError | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"containerStatuses": [
        {"restartCount": 0, "image": "rt:2", "state": {"waiting": {"reason": waiting, "message": "no image"}}
         if waiting else {"running": {}}}]}
    annotations = {DRIVER_ERROR: error.to_json()} if error else {}
    return {"metadata": {"name": name, "labels": {gate.PLAN_LABEL: A[:12], gate.ENGINE_LABEL: engine[:12]},
                         "annotations": annotations}, "status": status}


def test_a_driver_pod_that_cannot_start_fails_the_gate_at_once() -> None:
    stuck = pod("q-driver-new", E2, waiting="ErrImageNeverPull")
    result = evaluate(None, [stuck])
    assert result.verdict == gate.Verdict.FAIL and "cannot start: ErrImageNeverPull" in result.message
    assert result.error is not None and result.error.error_class == "PodCannotStart"
    assert evaluate(None, [pod("q-driver-old", E1, waiting="ErrImagePull")]).verdict == gate.Verdict.WAIT


def test_errors_of_drivers_on_another_engine_do_not_count() -> None:
    old_error = DriverError(A, "active", "Boom", "old engine", "2026-01-01T00:00:01Z", engine=E1)
    assert evaluate(None, [pod("q-driver-old", E1, error=old_error)]).verdict == gate.Verdict.WAIT
    new_error = DriverError(A, "warm-up", "PlanIncompatible", "Spark 4.4 vs 4.3", "2026-01-01T00:00:01Z",
                            engine=E2)
    result = evaluate(None, [pod("q-driver-new", E2, error=new_error)])
    assert result.verdict == gate.Verdict.FAIL and "PlanIncompatible" in result.message


def test_a_restore_request_names_the_engine_that_carries_it_out() -> None:
    request = RestoreRequest(id="r1", epoch=7, plan_hash=A, engine=E1)
    annotations = {RESTORE_REQUEST: request.to_json()}
    assert pending_restore(annotations, A, E2) is None  # the new engine's standby: not its business
    assert pending_restore(annotations, A, E1) == request
    plain = {RESTORE_REQUEST: RestoreRequest(id="r2", epoch=7, plan_hash=A).to_json()}
    assert pending_restore(plain, A, E2) is not None
