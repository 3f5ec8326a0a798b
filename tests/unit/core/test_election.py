"""Driver election (pure): lease decisions, the holder's write window, records, drivers status."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.core.election import (
    HANDOFF_DONE,
    HANDOFF_REQUEST,
    LAST_TAKEOVER,
    PREFERRED_HOLDER,
    HandoffRequest,
    HolderProbe,
    LeaseRecord,
    Observation,
    Takeover,
    Verdict,
    Why,
    decide,
    drivers_status,
    holder_valid_until,
    observe,
    pending_handoff,
    pod_of,
    probe_verdict,
    someone_serving,
    successor_progress,
)


def record(holder: str = "a-0/x1", renew: str | None = "t1", transitions: int = 1,
           annotations: dict[str, str] | None = None, duration: float = 10) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration=duration, transitions=transitions, renew_time=renew,
                       resource_version="7", annotations=annotations or {})


def test_no_lease_is_created() -> None:
    assert decide(None, "b/1", None, 0.0).verdict == Verdict.CREATE


def test_the_holder_renews() -> None:
    assert decide(record("b/1"), "b/1", None, 0.0) == decide(record("b/1"), "b/1", None, 99.0)
    assert decide(record("b/1"), "b/1", None, 0.0).verdict == Verdict.RENEW


def test_a_live_holder_is_left_alone_until_its_record_is_stale_on_the_observers_clock() -> None:
    rec = record()
    seen = observe(None, rec, now=100.0)
    assert decide(rec, "b/1", seen, 105.0).verdict == Verdict.WAIT
    assert decide(rec, "b/1", seen, 109.9).why == Why.HELD
    expired = decide(rec, "b/1", seen, 110.0)
    assert (expired.verdict, expired.why) == (Verdict.ACQUIRE, Why.EXPIRED)


def test_a_renewal_restarts_the_observers_clock() -> None:
    seen = observe(None, record(renew="t1"), now=100.0)
    renewed = record(renew="t2")
    seen = observe(seen, renewed, now=108.0)
    assert seen.since == 108.0
    assert decide(renewed, "b/1", seen, 115.0).verdict == Verdict.WAIT
    # the same record seen again keeps its first sighting
    assert observe(seen, renewed, now=120.0) is seen


def test_an_observation_of_another_record_does_not_count() -> None:
    stale = Observation(("someone-else", "t0", 0), since=0.0)
    assert decide(record(), "b/1", stale, 1000.0).verdict == Verdict.WAIT


def test_a_released_lease_is_taken_at_once() -> None:
    d = decide(record(holder=""), "b/1", None, 0.0)
    assert (d.verdict, d.why) == (Verdict.ACQUIRE, Why.RELEASED)


def test_a_released_lease_waits_briefly_for_the_preferred_pod() -> None:
    rec = record(holder="", annotations={PREFERRED_HOLDER: "c"})
    seen = observe(None, rec, 50.0)
    assert decide(rec, "b/1", seen, 51.0).why == Why.DEFERRING
    assert decide(rec, "c/9", seen, 50.0).why == Why.RELEASED
    assert decide(rec, "b/1", seen, 54.0).why == Why.RELEASED  # the preferred pod never came


def test_a_dead_holder_process_is_replaced_before_expiry() -> None:
    rec = record()
    seen = observe(None, rec, 100.0)
    d = decide(rec, "b/1", seen, 100.5, probe=HolderProbe.GONE)
    assert (d.verdict, d.why) == (Verdict.ACQUIRE, Why.HOLDER_DEAD)
    assert decide(rec, "b/1", seen, 100.5, probe=HolderProbe.UNKNOWN).verdict == Verdict.WAIT
    assert decide(rec, "b/1", seen, 100.5, probe=HolderProbe.ALIVE).verdict == Verdict.WAIT


@pytest.mark.parametrize(("answered", "refused", "verdict"), [
    (None, True, HolderProbe.GONE),  # nothing listens: the process is gone
    ("a-0/x1", False, HolderProbe.ALIVE),
    ("a-0/x2", False, HolderProbe.GONE),  # the container restarted: a new incarnation answers
    (None, False, HolderProbe.UNKNOWN),  # timed out: paused or partitioned, wait for expiry
])
def test_probe_verdicts(answered: str | None, refused: bool, verdict: HolderProbe) -> None:
    assert probe_verdict(answered, refused, "a-0/x1") == verdict


def test_the_holder_stops_writing_before_any_standby_may_take_over() -> None:
    # renewal sent at 10.0; the API server stores it later; a standby sees it at 10.2 at the earliest
    valid_until = holder_valid_until(10.0, 10.0, margin=1.5)
    assert valid_until == 18.5
    standby_takeover = observe(None, record(renew="r"), 10.2).since + 10.0
    assert valid_until < standby_takeover


def test_takeover_records_round_trip_and_kind() -> None:
    t = Takeover(time="2026-11-22T10:00:00Z", from_pod="q-driver-a", to_pod="q-driver-b",
                 reason=Why.HOLDER_DEAD, epoch=3, gap_seconds=1.25, plan_hash="ab")
    assert Takeover.from_json(t.to_json()) == t
    assert t.kind == "FailedOver"
    assert Takeover(time="x", from_pod="a", to_pod="b", reason=Why.RELEASED, epoch=1).kind == "HandedOff"
    assert Takeover.from_json("not json") is None
    assert Takeover.from_json(None) is None


def test_a_drained_driver_sees_its_successor_start_and_commit() -> None:
    """The old holder (me, term 2) released: it waits while nobody or a successor without a commit
    holds the Lease, and is done once the successor of a later term recorded its first commit."""
    me = "q-driver-a/x1"
    assert successor_progress(None, me, 2) == "none"
    assert successor_progress(record(holder=""), me, 2) == "none"
    assert successor_progress(record(holder=me), me, 2) == "none"  # our own record, before the release
    mine = Takeover(time="t", from_pod="", to_pod="q-driver-a", reason=Why.RELEASED, epoch=2, gap_seconds=0.9)
    taken = record(holder="q-driver-b/x2", transitions=3, annotations={LAST_TAKEOVER: mine.to_json()})
    assert successor_progress(taken, me, 2) == "starting"  # still our own term's record
    starting = Takeover(time="t", from_pod="q-driver-a", to_pod="q-driver-b", reason=Why.RELEASED, epoch=3)
    taken = record(holder="q-driver-b/x2", transitions=3, annotations={LAST_TAKEOVER: starting.to_json()})
    assert successor_progress(taken, me, 2) == "starting"
    committed = Takeover(**{**starting.__dict__, "gap_seconds": 1.4})
    done = record(holder="q-driver-b/x2", transitions=3, annotations={LAST_TAKEOVER: committed.to_json()})
    assert successor_progress(done, me, 2) == "committed"


def test_pending_handoff_until_done() -> None:
    req = HandoffRequest(id="n1", to="q-driver-b")
    assert HandoffRequest.from_json(req.to_json()) == req
    rec = record(annotations={HANDOFF_REQUEST: req.to_json()})
    assert pending_handoff(rec) == req
    done = record(annotations={HANDOFF_REQUEST: req.to_json(), HANDOFF_DONE: "n1"})
    assert pending_handoff(done) is None
    assert pending_handoff(record(annotations={HANDOFF_REQUEST: "{"})) is None


def pod(name: str, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_drivers_status_from_the_lease_and_pods() -> None:
    takeover = Takeover(time="T", from_pod="q-a", to_pod="q-b", reason=Why.EXPIRED, epoch=2, gap_seconds=2.5)
    rec = record(holder="q-b/1", annotations={LAST_TAKEOVER: takeover.to_json()})
    status = drivers_status(rec, [pod("q-b"), pod("q-c"), pod("q-a", deleting=True), pod("q-d", "Failed")],
                            None)
    assert status == {
        "active": "q-b", "standbys": ["q-c"],
        "lastFailover": {"time": "T", "from": "q-a", "to": "q-b", "reason": "FailedOver", "gapSeconds": 2.5},
    }


def test_drivers_status_keeps_the_last_failover_when_the_first_holder_takes_over() -> None:
    first = Takeover(time="T2", from_pod="", to_pod="q-a", reason=Why.NEW, epoch=1)
    rec = record(holder="q-a/1", annotations={LAST_TAKEOVER: first.to_json()})
    previous = {"lastFailover": {"time": "T1", "from": "x", "to": "y", "reason": "HandedOff",
                                 "gapSeconds": 1}}
    assert drivers_status(rec, [pod("q-a")], previous)["lastFailover"] == previous["lastFailover"]
    assert drivers_status(None, [pod("q-a")], None) == {"active": None, "standbys": ["q-a"]}


def test_pod_of_identity() -> None:
    assert pod_of("q-driver-7c9f-abcde/1a2b3c4d") == "q-driver-7c9f-abcde"
    assert pod_of("plain") == "plain"


def test_lease_record_from_a_lease_object() -> None:
    lease = {"metadata": {"resourceVersion": "42", "annotations": {"k": "v"}},
             "spec": {"holderIdentity": "a/1", "leaseDurationSeconds": 15, "leaseTransitions": 4,
                      "renewTime": "2026-11-22T10:00:00.000001Z"}}
    rec = LeaseRecord.from_lease(lease)
    assert (rec.holder, rec.duration, rec.transitions, rec.resource_version) == ("a/1", 15.0, 4, "42")
    empty = LeaseRecord.from_lease({"metadata": {}, "spec": {}})
    assert (empty.holder, empty.transitions, empty.duration) == ("", 0, 10.0)


def test_a_starting_driver_warms_up_only_while_another_live_driver_serves() -> None:
    # another holder that answers (or cannot be asked): time to warm up before taking over
    assert someone_serving(record("a-0/x1"), "b/1", HolderProbe.ALIVE)
    assert someone_serving(record("a-0/x1"), "b/1", HolderProbe.UNKNOWN)
    # nobody serves: no Lease yet, released, a holder whose process is gone, or this driver itself
    assert not someone_serving(None, "b/1", HolderProbe.UNKNOWN)
    assert not someone_serving(record(""), "b/1", HolderProbe.UNKNOWN)
    assert not someone_serving(record("a-0/x1"), "b/1", HolderProbe.GONE)
    assert not someone_serving(record("b/1"), "b/1", HolderProbe.UNKNOWN)


def test_a_renewal_failure_is_an_outage_only_without_an_answer_that_ends_the_term() -> None:
    from sluice.core.election import api_away

    assert [s for s in (None, 404, 401, 403, 409, 429, 500, 502, 503, 504, 422) if api_away(s)] == [
        None, 429, 500, 502, 503, 504]


def test_the_write_guard_rides_out_an_outage_only_for_an_exactly_once_holder() -> None:
    from sluice.core.election import write_refusal

    def guard(*, holding: bool = True, now: float = 20.0, ride_out: bool = True,
              away_since: float | None = 9.0) -> str | None:
        return write_refusal(holding=holding, now=now, valid_until=18.5, duration=10.0, name="q-driver",
                             ride_out=ride_out, away_since=away_since)

    assert guard(now=10.0) is None  # renewed recently: everyone writes
    assert guard() is None  # expired while the API server is away: the exactly-once holder writes on
    assert guard(ride_out=False) == "lease q-driver not renewed within 10s"
    assert guard(away_since=None) == "lease q-driver not renewed within 10s"  # an answer, not an outage
    assert guard(holding=False) == "this driver does not hold the lease"
