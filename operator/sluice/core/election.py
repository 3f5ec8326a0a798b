"""Driver election on a per-query Lease (pure): who runs the query, when a standby may take over,
and the records drivers and the operator exchange through the Lease.

Every driver pod of a query runs the same loop: warm up, then compete for the query's
``coordination.k8s.io/v1`` Lease. The holder runs the streaming query; the others wait, warm.

Expiry is judged the way client-go's leader election judges it, on the *observer's* clock: a
standby remembers when it first saw the current lease record, and the record is expired once it
has not changed for ``leaseDurationSeconds`` since. No wall clocks are compared across pods.

Two faster signals let a standby take over before expiry, both safe:

* the holder released the lease (``holderIdentity`` empty: a drain or a hand-off finished);
* the holder's *process* is gone: its HTTP endpoint (``sluice.dev/holder-address``) refuses the
  connection, or answers with another identity (the container restarted). An identity names one
  process incarnation (``<pod>/<random>``), so a live holder can never be mistaken for a dead one.
  A holder that is merely slow or partitioned times out instead, and only expiry counts then.

The holder guards its own writes with :func:`holder_valid_until`: it stops writing once
``leaseDurationSeconds`` (minus a margin) have passed since it *sent* its last successful renewal,
which is never later than the moment a standby may consider the record expired.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sluice.core.driverreport import load_object

#: label of the Lease and of every driver pod: the query's base name
QUERY_LABEL = "sluice.dev/query"
#: label of a driver pod: ``active`` (holds the Lease) or ``standby``; kept current by the runtime
ROLE_LABEL = "sluice.dev/role"
ROLE_ACTIVE = "active"
ROLE_STANDBY = "standby"
#: the ReplicaSet controller removes pods with a lower cost first: the active driver goes last
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
ACTIVE_DELETION_COST = "1000"
STANDBY_DELETION_COST = "0"

#: Lease annotations written by the holder
HOLDER_ADDRESS = "sluice.dev/holder-address"
HOLDER_PLAN = "sluice.dev/holder-plan-hash"
#: the engine digest the holder runs on (``SLUICE_ENGINE``), and what it reports it carries (Spark,
#: connectors: JSON)
HOLDER_ENGINE = "sluice.dev/holder-engine"
HOLDER_VERSIONS = "sluice.dev/holder-versions"
LAST_TAKEOVER = "sluice.dev/last-takeover"
HANDOFF_DONE = "sluice.dev/handoff-done"
#: Lease annotation written by the releasing holder: the pod that should take over first
PREFERRED_HOLDER = "sluice.dev/preferred-holder"
#: Lease annotation written by the operator (or a user): ``{"id": ..., "to": pod or ""}``
HANDOFF_REQUEST = "sluice.dev/handoff-request"
#: StreamingQuery annotation: any new value asks the active driver to hand over
QUERY_HANDOFF = "sluice.dev/handoff"

DEFAULT_LEASE_SECONDS = 10
#: a holder stops writing this long before its lease could be seen as expired
SAFETY_MARGIN_SECONDS = 1.5
#: a released lease is left to the preferred pod for this long
PREFERRED_GRACE_SECONDS = 3.0


def lease_name(query_base: str) -> str:
    """The query's driver Lease (same name as its driver workload)."""
    return f"{query_base}-driver"


def pod_of(identity: str) -> str:
    """The pod part of a holder identity ``<pod>/<incarnation>``."""
    return identity.split("/", 1)[0]


def renew_interval(duration: float) -> float:
    return max(0.5, duration / 5)


@dataclass(frozen=True)
class LeaseRecord:
    """The parts of a Lease the election reads (``holder`` is ``""`` when released)."""

    holder: str
    duration: float
    transitions: int
    renew_time: str | None
    resource_version: str
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str | None, int]:
        """What changes whenever the holder renews, releases or changes."""
        return (self.holder, self.renew_time, self.transitions)

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        meta = lease.get("metadata") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=float(spec.get("leaseDurationSeconds") or DEFAULT_LEASE_SECONDS),
            transitions=int(spec.get("leaseTransitions") or 0),
            renew_time=spec.get("renewTime"),
            resource_version=str(meta.get("resourceVersion") or ""),
            annotations=dict(meta.get("annotations") or {}),
        )


@dataclass(frozen=True)
class Observation:
    """When this observer first saw ``key`` (its own monotonic clock)."""

    key: tuple[str, str | None, int]
    since: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    if previous is not None and previous.key == record.key:
        return previous
    return Observation(record.key, now)


class Verdict(StrEnum):
    CREATE = "create"  # no Lease yet
    ACQUIRE = "acquire"  # take it (released, expired or holder dead)
    RENEW = "renew"  # we hold it
    WAIT = "wait"


class Why(StrEnum):
    NEW = "new"
    RELEASED = "released"
    EXPIRED = "expired"
    HOLDER_DEAD = "holder-dead"
    HOLDING = "holding"
    HELD = "held"
    DEFERRING = "deferring"


class HolderProbe(StrEnum):
    """What the holder's endpoint answered."""

    ALIVE = "alive"  # answered with the holder's identity
    GONE = "gone"  # refused, or answered with another identity: the holding process is dead
    UNKNOWN = "unknown"  # timed out, no address, not asked


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    why: Why


def decide(
    record: LeaseRecord | None,
    me: str,
    observed: Observation | None,
    now: float,
    probe: HolderProbe = HolderProbe.UNKNOWN,
    preferred_grace: float = PREFERRED_GRACE_SECONDS,
) -> Decision:
    """What a driver identified as ``me`` should do about the Lease ``record`` right now."""
    if record is None:
        return Decision(Verdict.CREATE, Why.NEW)
    if record.holder == me:
        return Decision(Verdict.RENEW, Why.HOLDING)
    since = observed.since if observed is not None and observed.key == record.key else now
    if not record.holder:
        preferred = record.annotations.get(PREFERRED_HOLDER, "")
        if preferred and preferred != pod_of(me) and now - since < preferred_grace:
            return Decision(Verdict.WAIT, Why.DEFERRING)
        return Decision(Verdict.ACQUIRE, Why.RELEASED)
    if probe == HolderProbe.GONE:
        return Decision(Verdict.ACQUIRE, Why.HOLDER_DEAD)
    if now - since >= record.duration:
        return Decision(Verdict.ACQUIRE, Why.EXPIRED)
    return Decision(Verdict.WAIT, Why.HELD)


def someone_serving(record: LeaseRecord | None, me: str, probe: HolderProbe) -> bool:
    """Whether another driver holds the Lease and may be alive: then a starting driver has time
    to warm up on its plan before it can take over. With nobody serving (no Lease, released, or
    a holder whose process is gone) every second of warm-up would be a second without output."""
    if record is None or not record.holder or record.holder == me:
        return False
    return probe != HolderProbe.GONE


#: HTTP statuses of a failed renewal that say the API server is away or overloaded, not that the
#: Lease is gone or forbidden (a request that got no answer at all counts as away too)
API_AWAY_STATUSES = frozenset({429, 500, 502, 503, 504})


def api_away(status: int | None) -> bool:
    """Whether a renewal that failed with ``status`` (None: no HTTP answer, e.g. connection
    refused or timed out) failed because the API server cannot be reached, as opposed to an answer
    that ends the term (404: the Lease was deleted; 401/403: no longer allowed)."""
    return status is None or status in API_AWAY_STATUSES


def write_refusal(*, holding: bool, now: float, valid_until: float, duration: float, name: str,
                  ride_out: bool, away_since: float | None) -> str | None:
    """The holder's write guard: None when it may write, else why not.

    A holder writes while its last successful renewal is recent enough (:func:`holder_valid_until`).
    Past that, a holder that *rides out* an API server outage (``ride_out``: its output is
    protected by Kafka's transactional fence, whatever another driver does) goes on writing as long
    as every renewal since has failed for want of an API server (``away_since``). No driver takes
    the Lease without the API server; one that does (once it is back, or through a partition that
    cut off only this driver) initialises the same transactional id before its first batch, which
    fences this driver's producer: its next commit fails and nothing it writes becomes visible to
    ``read_committed`` readers. Any answer that ends the term (another holder, the Lease deleted)
    clears ``holding`` and stops it."""
    if not holding:
        return "this driver does not hold the lease"
    if now < valid_until:
        return None
    if ride_out and away_since is not None:
        return None
    return f"lease {name} not renewed within {duration:.0f}s"


def holder_valid_until(renew_sent_at: float, duration: float, margin: float = SAFETY_MARGIN_SECONDS) -> float:
    """Until when (monotonic) a holder whose last successful renewal was *sent* at
    ``renew_sent_at`` may still write."""
    return renew_sent_at + max(0.0, duration - margin)


def probe_verdict(answered_identity: str | None, refused: bool, holder: str) -> HolderProbe:
    """Interpret one probe of the holder's endpoint."""
    if refused:
        return HolderProbe.GONE
    if answered_identity is None:
        return HolderProbe.UNKNOWN
    return HolderProbe.ALIVE if answered_identity == holder else HolderProbe.GONE


# -- records exchanged through the Lease -----------------------------------------------------


@dataclass(frozen=True)
class Takeover:
    """One change of holder, as the new holder recorded it (``LAST_TAKEOVER``)."""

    time: str  # RFC 3339, when the new holder acquired the lease
    from_pod: str  # "" for the first holder
    to_pod: str
    reason: str  # a Why value: released (hand-off or drain), expired or holder-dead (fail-over)
    epoch: int  # leaseTransitions after the takeover
    gap_seconds: float | None = None  # last commit of the old holder -> first commit of the new one
    plan_hash: str = ""
    engine: str = ""  # the engine digest the new holder runs on

    @property
    def kind(self) -> str:
        """``HandedOff`` (the old holder let go) or ``FailedOver`` (it died or went silent)."""
        return "HandedOff" if self.reason == Why.RELEASED else "FailedOver"

    def to_json(self) -> str:
        data = {"time": self.time, "from": self.from_pod, "to": self.to_pod, "reason": self.reason,
                "epoch": self.epoch, "gapSeconds": self.gap_seconds, "planHash": self.plan_hash}
        if self.engine:
            data["engine"] = self.engine
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Takeover | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            gap = data.get("gapSeconds")
            return cls(time=str(data["time"]), from_pod=str(data.get("from") or ""), to_pod=str(data["to"]),
                       reason=str(data["reason"]), epoch=int(data.get("epoch") or 0),
                       gap_seconds=None if gap is None else float(gap),
                       plan_hash=str(data.get("planHash") or ""), engine=str(data.get("engine") or ""))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class HandoffRequest:
    """Asks the holder to finish its batch, commit, stop and release (``HANDOFF_REQUEST``)."""

    id: str
    to: str = ""  # preferred pod, "" for any waiting driver

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "to": self.to}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> HandoffRequest | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(id=str(data["id"]), to=str(data.get("to") or ""))
        except (ValueError, KeyError, TypeError):
            return None


def pending_handoff(record: LeaseRecord) -> HandoffRequest | None:
    """The hand-off request the holder has not carried out yet."""
    request = HandoffRequest.from_json(record.annotations.get(HANDOFF_REQUEST))
    if request is None or record.annotations.get(HANDOFF_DONE) == request.id:
        return None
    return request


def drivers_status(
    record: LeaseRecord | None, pods: list[dict[str, Any]], previous: dict[str, Any] | None
) -> dict[str, Any]:
    """``status.drivers`` from the Lease and the query's driver pods (running, not deleting)."""
    active = pod_of(record.holder) if record is not None and record.holder else None
    standbys = sorted(
        p["metadata"]["name"] for p in pods
        if p["metadata"]["name"] != active
        and not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") in ("Pending", "Running")
    )
    out: dict[str, Any] = {"active": active, "standbys": standbys}
    takeover = Takeover.from_json(record.annotations.get(LAST_TAKEOVER)) if record is not None else None
    last = (previous or {}).get("lastFailover")
    if takeover is not None and takeover.from_pod:
        last = {"time": takeover.time, "from": takeover.from_pod, "to": takeover.to_pod,
                "reason": takeover.kind, "gapSeconds": takeover.gap_seconds}
    if last:
        out["lastFailover"] = last
    versions = _load_versions(record.annotations.get(HOLDER_VERSIONS)) if record is not None else None
    if versions:
        out["versions"] = versions
    return out


def _load_versions(text: str | None) -> dict[str, str] | None:
    """What the holder reported it runs on (``HOLDER_VERSIONS``: a JSON object of strings)."""
    data = load_object(text)
    return {str(k): str(v) for k, v in data.items()} if data is not None else None


# -- helpers for the operator (added with the operator side of standby drivers) ---------------


def pod_ready(pod: dict[str, Any]) -> bool:
    """The pod's ``Ready`` condition is True (a draining holder stays ready until it lets go)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def active_driver_ready(record: LeaseRecord | None, pods: list[dict[str, Any]]) -> bool:
    """The query's driver is ready when the Lease holder's pod is among ``pods`` and Ready
    (standbys are Ready once warm, so a count of ready pods says nothing about the active one)."""
    if record is None or not record.holder:
        return False
    active = pod_of(record.holder)
    return any(p["metadata"]["name"] == active and pod_ready(p) for p in pods)


def takeover_to_announce(record: LeaseRecord | None, previous: dict[str, Any] | None) -> Takeover | None:
    """The Lease's last takeover when it replaced a driver (``from`` set) and is not yet the
    ``lastFailover`` of ``previous`` (the ``status.drivers`` written before): announce it once."""
    if record is None:
        return None
    takeover = Takeover.from_json(record.annotations.get(LAST_TAKEOVER))
    if takeover is None or not takeover.from_pod:
        return None
    last = (previous or {}).get("lastFailover") or {}
    if (last.get("time"), last.get("to")) == (takeover.time, takeover.to_pod):
        return None
    return takeover


#: what a driver that released the Lease at the end of its term sees of its successor
SUCCESSOR_NONE, SUCCESSOR_STARTING, SUCCESSOR_COMMITTED = "none", "starting", "committed"


def successor_progress(record: LeaseRecord | None, me: str, my_epoch: int) -> str:
    """After this driver (``me``) released the Lease at the end of term ``my_epoch``: nobody holds it
    yet (:data:`SUCCESSOR_NONE`), a successor holds it and has not committed a batch yet
    (:data:`SUCCESSOR_STARTING`), or the successor recorded its first commit
    (:data:`SUCCESSOR_COMMITTED`: its ``LAST_TAKEOVER`` of a later term has its gap)."""
    if record is None:
        return SUCCESSOR_NONE
    takeover = Takeover.from_json(record.annotations.get(LAST_TAKEOVER))
    if takeover is not None and takeover.epoch > my_epoch and takeover.gap_seconds is not None:
        return SUCCESSOR_COMMITTED
    if record.holder and record.holder != me:
        return SUCCESSOR_STARTING
    return SUCCESSOR_NONE
