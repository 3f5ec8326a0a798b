"""What the operator reports about a query's drivers: readiness of the active one, takeovers to
announce once, hand-off requests forwarded to the Lease (pure parts)."""

from __future__ import annotations

from typing import Any

from sluice.core import election
from sluice.core.election import HandoffRequest, LeaseRecord, Takeover
from sluice.core.status import EventReason
from sluice.operator.drivers import takeover_message
from sluice.operator.lease import driver_selector, handoff_patch

T0 = "2026-03-01T10:00:00Z"


def lease(holder: str = "", **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": "totals-driver", "namespace": "shop", "resourceVersion": "7",
                         "annotations": annotations},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10}}


def pod(name: str, ready: bool, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


def takeover(frm: str = "d-a", to: str = "d-b", reason: str = "holder-dead", time: str = T0,
             gap: float | None = 1.25) -> str:
    return Takeover(time=time, from_pod=frm, to_pod=to, reason=reason, epoch=2, gap_seconds=gap).to_json()


def record(holder: str = "", **annotations: str) -> LeaseRecord:
    return LeaseRecord.from_lease(lease(holder, **annotations))


def test_ready_follows_the_active_driver_not_the_count_of_ready_pods() -> None:
    standby_ready = [pod("d-a", False), pod("d-b", True)]
    assert election.active_driver_ready(record("d-a/1"), standby_ready) is False
    assert election.active_driver_ready(record("d-b/9"), standby_ready) is True
    assert election.active_driver_ready(record(""), standby_ready) is False  # released
    assert election.active_driver_ready(None, standby_ready) is False
    assert election.active_driver_ready(record("gone/1"), standby_ready) is False  # holder pod deleted


def test_pod_ready_reads_the_ready_condition() -> None:
    assert election.pod_ready(pod("a", True))
    assert not election.pod_ready(pod("a", False))
    assert not election.pod_ready({"metadata": {"name": "a"}})


def test_a_takeover_from_another_driver_is_announced_once() -> None:
    rec = record("d-b/2", **{election.LAST_TAKEOVER: takeover()})
    first = election.takeover_to_announce(rec, None)
    assert first is not None and first.kind == EventReason.FAILED_OVER
    status = election.drivers_status(rec, [pod("d-a", False), pod("d-b", True)], None)
    assert status["active"] == "d-b" and status["standbys"] == ["d-a"]
    assert status["lastFailover"] == {"time": T0, "from": "d-a", "to": "d-b", "reason": "FailedOver",
                                      "gapSeconds": 1.25}
    assert election.takeover_to_announce(rec, status) is None  # already in status.drivers


def test_the_first_holder_is_no_failover() -> None:
    rec = record("d-a/1", **{election.LAST_TAKEOVER: takeover(frm="", to="d-a", reason="new")})
    assert election.takeover_to_announce(rec, None) is None
    assert election.takeover_to_announce(record("d-a/1"), None) is None
    assert election.takeover_to_announce(None, None) is None


def test_a_new_takeover_after_an_old_one_is_announced() -> None:
    old = election.drivers_status(record("d-b/2", **{election.LAST_TAKEOVER: takeover()}), [], None)
    again = record("d-a/3", **{election.LAST_TAKEOVER: takeover("d-b", "d-a", "released",
                                                                "2026-03-01T10:05:00Z", 0.4)})
    announced = election.takeover_to_announce(again, old)
    assert announced is not None and announced.kind == EventReason.HANDED_OFF
    assert announced.to_pod == "d-a"


def test_takeover_messages_name_both_pods_and_the_gap() -> None:
    failed = Takeover.from_json(takeover())
    handed = Takeover.from_json(takeover(reason="released", gap=None))
    assert failed is not None and handed is not None
    assert takeover_message(failed) == "driver failed over (holder-dead) from d-a to d-b; output gap 1.25s"
    assert takeover_message(handed) == "driver handed off from d-a to d-b; output gap not measured"


def query(handoff: str | None) -> dict[str, Any]:
    annotations = {} if handoff is None else {election.QUERY_HANDOFF: handoff}
    return {"metadata": {"name": "totals", "annotations": annotations}}


def test_a_new_handoff_annotation_is_forwarded_to_the_lease() -> None:
    patch = handoff_patch(query("r1"), lease("d-a/1"))
    assert patch == {"metadata": {"annotations": {
        election.HANDOFF_REQUEST: HandoffRequest(id="r1", to="").to_json()}}}
    assert set(patch) == {"metadata"} and set(patch["metadata"]) == {"annotations"}  # nothing else


def test_a_forwarded_or_absent_handoff_writes_nothing() -> None:
    asked = lease("d-a/1", **{election.HANDOFF_REQUEST: HandoffRequest(id="r1").to_json()})
    assert handoff_patch(query("r1"), asked) is None
    assert handoff_patch(query(None), lease("d-a/1")) is None
    assert handoff_patch(query(""), lease("d-a/1")) is None
    assert handoff_patch(query("r2"), asked) is not None  # a new value asks again


def test_driver_selector_matches_the_deployment_selector() -> None:
    assert driver_selector("totals") == "sluice.dev/query=totals,app.kubernetes.io/component=driver"
