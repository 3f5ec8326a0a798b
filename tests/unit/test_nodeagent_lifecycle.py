"""Node agent: crash-loop back-off and pod status derivation (pure)."""

from __future__ import annotations

import pytest
from sluice_dev.nodeagent.backoff import Backoff
from sluice_dev.nodeagent.status import ContainerView, conditions, container_status, phase, terminated


def test_backoff_first_restart_immediate_then_doubling_to_cap() -> None:
    b = Backoff(initial=10, cap=300)
    assert [b.delay(n) for n in range(1, 9)] == [0, 10, 20, 40, 80, 160, 300, 300]
    short = Backoff(initial=1, cap=4)
    assert [short.delay(n) for n in range(1, 6)] == [0, 1, 2, 4, 4]


def test_backoff_resets_after_a_long_run() -> None:
    b = Backoff(initial=10, cap=300)
    assert b.next_crashes(5, ran_for=3.0) == 6
    assert b.next_crashes(5, ran_for=600.0) == 1


def view(
    state: str, exit_code: int | None = None, last: dict | None = None, ready: bool = False
) -> ContainerView:
    return ContainerView(
        name="c",
        image="i",
        state=state,
        exit_code=exit_code,
        last_terminated=last,
        ready=ready,
        reason="ContainerCreating" if state == "waiting" else "",
        started_at=1.0,
        finished_at=2.0 if state == "terminated" else None,
    )


LAST_FAIL = terminated(1, 1.0, 2.0)


@pytest.mark.parametrize(
    ("policy", "views", "expected"),
    [
        ("Always", [view("waiting")], "Pending"),
        ("Always", [view("running"), view("waiting")], "Pending"),
        ("Always", [view("running")], "Running"),
        ("Always", [view("waiting", last=LAST_FAIL)], "Running"),
        ("Always", [view("terminated", 0)], "Running"),
        ("Never", [view("terminated", 0), view("terminated", 0)], "Succeeded"),
        ("Never", [view("terminated", 0), view("terminated", 3)], "Failed"),
        ("OnFailure", [view("terminated", 0)], "Succeeded"),
        ("OnFailure", [view("waiting", last=LAST_FAIL)], "Running"),
        ("Never", [view("running"), view("terminated", 1)], "Running"),
    ],
)
def test_phase(policy: str, views: list[ContainerView], expected: str) -> None:
    assert phase(policy, True, False, views) == expected


def test_phase_init_containers() -> None:
    assert phase("Always", False, False, [view("waiting")]) == "Pending"
    assert phase("Never", False, True, [view("waiting")]) == "Failed"


def test_container_status_shapes() -> None:
    running = container_status(view("running", ready=True))
    assert running["state"] == {"running": {"startedAt": "1970-01-01T00:00:01Z"}} and running["ready"]
    crash = ContainerView(
        name="c",
        image="i",
        state="waiting",
        reason="CrashLoopBackOff",
        message="back-off 10s",
        restart_count=2,
        last_terminated=LAST_FAIL,
    )
    status = container_status(crash)
    assert status["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert status["restartCount"] == 2
    done = container_status(view("terminated", 0))
    assert done["state"]["terminated"]["reason"] == "Completed"


def test_conditions_keep_transition_times_and_scheduled() -> None:
    previous = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "T0"},
        {"type": "Ready", "status": "False", "lastTransitionTime": "T1"},
        {"type": "Initialized", "status": "True", "lastTransitionTime": "T2"},
    ]
    out = {c["type"]: c for c in conditions(previous, True, [view("running", ready=False)], "Running", 100.0)}
    assert out["PodScheduled"]["lastTransitionTime"] == "T0"
    assert out["Ready"]["lastTransitionTime"] == "T1" and out["Ready"]["reason"] == "ContainersNotReady"
    assert out["Initialized"]["lastTransitionTime"] == "T2"
    ready = {
        c["type"]: c for c in conditions(previous, True, [view("running", ready=True)], "Running", 100.0)
    }
    assert (
        ready["Ready"]["status"] == "True" and ready["Ready"]["lastTransitionTime"] == "1970-01-01T00:01:40Z"
    )
    assert ready["ContainersReady"]["status"] == "True"
