"""The health gate of a rollout (pure): only the target plan's driver, in a term after the switch,
with progress, passes; errors, crash loops, dead letters and the deadline fail it."""

from __future__ import annotations

import datetime as dt

from sluice.core.driverreport import DRIVER_ERROR, HOLDER_PROGRESS, DriverError, Progress
from sluice.core.election import LAST_TAKEOVER, LeaseRecord, Takeover
from sluice.core.gate import Verdict, driver_problem, evaluate

A, B = "a" * 64, "b" * 64
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def lease(holder: str = "q-driver-x/1", transitions: int = 5, progress: Progress | None = None,
          annotations: dict[str, str] | None = None) -> LeaseRecord:
    ann = dict(annotations or {})
    if progress is not None:
        ann[HOLDER_PROGRESS] = progress.to_json()
    return LeaseRecord(holder=holder, duration=10, transitions=transitions, renew_time=None,
                       resource_version="1", annotations=ann)


def pod(plan: str, restarts: int = 0, error: DriverError | None = None,
        ready: bool = True) -> dict[str, object]:
    return {"metadata": {"name": f"q-driver-{plan[:4]}", "labels": {"sluice.dev/plan-hash": plan[:12]},
                         "annotations": {DRIVER_ERROR: error.to_json()} if error else {}},
            "status": {"containerStatuses": [{"restartCount": restarts}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def gate(record: LeaseRecord | None, pods: list[dict[str, object]] | None = None, *, after: float = 10,
         start_epoch: int = 4, needed: int = 3, ratio: float | None = None) -> Verdict:
    return evaluate(plan_hash=B, start_epoch=start_epoch, started=T0, now=T0 + dt.timedelta(seconds=after),
                    record=record, pods=pods or [], batches_needed=needed, timeout=300,
                    max_dead_letter_ratio=ratio).verdict


def test_passes_on_batches_of_the_target_plan_in_a_new_term() -> None:
    assert gate(lease(progress=Progress(B, 5, 3, 3))) == Verdict.PASS


def test_an_idle_but_live_trigger_loop_passes() -> None:
    assert gate(lease(progress=Progress(B, 5, 0, 3))) == Verdict.PASS


def test_too_few_batches_wait() -> None:
    assert gate(lease(progress=Progress(B, 5, 2, 2))) == Verdict.WAIT


def test_an_older_plan_never_counts() -> None:
    assert gate(lease(progress=Progress(A, 5, 50, 50))) == Verdict.WAIT


def test_a_term_from_before_the_switch_never_counts() -> None:
    # the same target plan ran before (an earlier attempt): its term is not newer than the switch
    assert gate(lease(transitions=4, progress=Progress(B, 4, 50, 50))) == Verdict.WAIT


def test_a_stale_progress_record_of_an_earlier_term_does_not_count() -> None:
    assert gate(lease(transitions=6, progress=Progress(B, 5, 50, 50))) == Verdict.WAIT


def test_a_released_lease_does_not_count() -> None:
    assert gate(lease(holder="", progress=Progress(B, 5, 50, 50))) == Verdict.WAIT


def test_an_error_of_the_target_plan_fails_at_once() -> None:
    error = DriverError(B, "active", "CAST_INVALID_INPUT", "bad", "2026-01-01T00:00:05Z", step="project-1")
    result = evaluate(plan_hash=B, start_epoch=4, started=T0, now=T0 + dt.timedelta(seconds=6),
                      record=lease(), pods=[pod(B, error=error)], batches_needed=3, timeout=300)
    assert result.verdict == Verdict.FAIL and result.error == error
    assert "CAST_INVALID_INPUT in step project-1: bad" in result.message


def test_an_error_from_before_the_rollout_or_of_another_plan_is_ignored() -> None:
    old = DriverError(B, "active", "X", "old", "2025-12-31T23:59:00Z")
    other = DriverError(A, "active", "X", "other plan", "2026-01-01T00:00:05Z")
    pods = [pod(B, error=old), pod(A, error=other)]
    assert gate(lease(progress=Progress(B, 5, 1, 1)), pods) == Verdict.WAIT


def test_a_crash_loop_fails() -> None:
    assert gate(lease(), [pod(B, restarts=3)]) == Verdict.FAIL
    assert gate(lease(), [pod(A, restarts=9)]) == Verdict.WAIT


def test_no_progress_before_the_deadline_fails() -> None:
    assert gate(lease(progress=Progress(B, 5, 1, 1)), after=301) == Verdict.FAIL
    assert gate(None, after=301) == Verdict.FAIL


def test_dead_letters_above_the_ratio_fail() -> None:
    progress = Progress(B, 5, 3, 3)
    record = lease(progress=progress)
    record.annotations[HOLDER_PROGRESS] = progress.to_json()[:-1] + ',"inputRows":100,"deadLetters":20}'
    assert gate(record, ratio=0.1) == Verdict.FAIL
    assert gate(record, ratio=0.5) == Verdict.PASS
    assert gate(record) == Verdict.PASS


def test_driver_problem_outside_a_rollout() -> None:
    error = DriverError(A, "active", "KafkaException", "broker gone", "2026-01-01T00:01:00Z")
    takeover_before = Takeover(time="2026-01-01T00:00:00Z", from_pod="", to_pod="p", reason="new", epoch=1)
    takeover_after = Takeover(time="2026-01-01T00:02:00Z", from_pod="p", to_pod="s", reason="released",
                              epoch=2)
    before = lease(annotations={LAST_TAKEOVER: takeover_before.to_json()})
    after = lease(annotations={LAST_TAKEOVER: takeover_after.to_json()})
    message = driver_problem(before, [pod(A, error=error, ready=False)], A, active_ready=False)
    assert message is not None and "KafkaException: broker gone" in message
    assert driver_problem(before, [pod(A, error=error)], A, active_ready=True) is None
    # a driver took over after the error: it is history
    assert driver_problem(after, [pod(A, error=error, ready=False)], A, active_ready=False) is None
    looping = driver_problem(after, [pod(A, restarts=2, ready=False)], A, active_ready=False)
    assert looping is not None and "restarting" in looping
