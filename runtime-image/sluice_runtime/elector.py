"""The driver side of the election (:mod:`sluice.core.election` decides, this module acts).

One :class:`Elector` per driver process. A watch thread keeps the newest Lease record; the
caller waits with :meth:`Elector.wait_for_leadership` (standby), then keeps it with a renew
thread (active) until it releases it (:meth:`Elector.release`, after a drain or a hand-off) or
loses it (:attr:`Elector.lost`). :meth:`Elector.may_write` is the write guard of the holder;
:meth:`Elector.report` hands it annotations (its progress) to write with the next renewal.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.core.driverreport import HOLDER_PROGRESS, Progress
from sluice.core.election import (
    HANDOFF_DONE,
    HOLDER_ADDRESS,
    HOLDER_ENGINE,
    HOLDER_PLAN,
    HOLDER_VERSIONS,
    LAST_TAKEOVER,
    PREFERRED_HOLDER,
    QUERY_LABEL,
    SUCCESSOR_COMMITTED,
    SUCCESSOR_NONE,
    HandoffRequest,
    HolderProbe,
    LeaseRecord,
    Observation,
    Takeover,
    Verdict,
    Why,
    api_away,
    decide,
    holder_valid_until,
    observe,
    pending_handoff,
    pod_of,
    probe_verdict,
    renew_interval,
    someone_serving,
    successor_progress,
    write_refusal,
)

from sluice_runtime import versions as versions_mod
from sluice_runtime.kubeapi import KubeApi, KubeApiError

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 0.5


def micro_time(moment: dt.datetime | None = None) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    moment = moment or dt.datetime.now(dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: a lease released longer ago than this was not handed to anyone (a stop, a suspend)
HANDOFF_WINDOW_SECONDS = 60.0


def released_recently(record: LeaseRecord, now: dt.datetime | None = None) -> bool:
    """Whether an empty lease was released within the hand-off window (wall clocks of two pods,
    used only to word the takeover record, never for safety)."""
    if not record.renew_time:
        return False
    try:
        released = dt.datetime.strptime(record.renew_time.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f")
    except ValueError:
        try:
            released = dt.datetime.strptime(record.renew_time.rstrip("Z")[:19], "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            return False
    moment = (now or dt.datetime.now(dt.UTC)).replace(tzinfo=None)
    return (moment - released).total_seconds() < HANDOFF_WINDOW_SECONDS


def probe_holder(address: str | None, holder: str, timeout: float = PROBE_TIMEOUT) -> HolderProbe:
    """Ask the holder's endpoint who it is (``GET /role``). Never raises: a holder killed while it
    answers (headers sent, body cut: ``http.client.IncompleteRead``), or an answer that is no JSON
    object, is UNKNOWN (the Lease's expiry decides then)."""
    if not address:
        return HolderProbe.UNKNOWN
    try:
        with urllib.request.urlopen(f"http://{address}/role", timeout=timeout) as resp:
            body = json.loads(resp.read())
        answered = body.get("identity") if isinstance(body, dict) else None
        return probe_verdict(str(answered) if answered else None, False, holder)
    except urllib.error.URLError as exc:
        refused = isinstance(exc.reason, ConnectionRefusedError)
        return probe_verdict(None, refused, holder)
    except ConnectionRefusedError:
        return HolderProbe.GONE
    except (TimeoutError, OSError, ValueError, http.client.HTTPException):
        return HolderProbe.UNKNOWN


@dataclass
class Leadership:
    """What a driver learns when it takes the Lease."""

    epoch: int
    why: Why
    previous_holder: str  # identity, "" when none
    takeover: Takeover
    previous_plan: str = ""  # the plan hash of the driver that held the Lease before, "" when none
    previous_engine: str = ""  # the engine digest that driver ran on, "" when none or not known
    annotations: dict[str, str] = field(default_factory=dict)  # the Lease's, as found when taken


def _versions_json() -> str:
    """What this runtime carries (``sluice_runtime.versions.summary``) for the Lease; never fails."""
    try:
        return json.dumps(versions_mod.summary(), sort_keys=True, separators=(",", ":"))
    except Exception as exc:  # a report, not a reason to stop a driver
        log.warning("cannot tell the runtime's versions: %s", exc)
        return "{}"


class Elector:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        address: str | None,
        plan_hash: str,
        engine: str = "",
        duration: float = 10.0,
        ride_out: bool = False,
        clock: Callable[[], float] = time.monotonic,
        prober: Callable[[str | None, str], HolderProbe] = probe_holder,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.address = address
        self.plan_hash = plan_hash
        self.engine = engine
        #: what this driver runs on (Spark, connectors), reported with every takeover
        self.versions = _versions_json()
        self.duration = duration
        #: write on through an API server outage (an exactly-once output: Kafka's fence guards it)
        self.ride_out = ride_out
        self.clock = clock
        self.prober = prober
        self._cond = threading.Condition()
        self._lease: dict[str, Any] | None = None
        self._observed: Observation | None = None
        self._valid_until = 0.0
        self._holding = False
        #: since when every renewal failed for want of an API server (None: the last one did not)
        self._away_since: float | None = None
        self._stop = threading.Event()
        self.lost = threading.Event()
        self.handoff = threading.Event()
        self.handoff_request: HandoffRequest | None = None
        self._pending: dict[str, str] = {}  # annotations for the next renewal (report)
        self._renewer: threading.Thread | None = None
        self._listed = threading.Event()  # the watch has read the Lease (or found none) once
        threading.Thread(target=self._watch_loop, name="sluice-lease-watch", daemon=True).start()

    # -- the newest record -------------------------------------------------------------------
    def _update(self, lease: dict[str, Any] | None) -> None:
        with self._cond:
            if lease is not None and self._lease is not None:
                old_rv = int(self._lease["metadata"].get("resourceVersion") or 0)
                if int(lease["metadata"].get("resourceVersion") or 0) < old_rv:
                    return  # an older event than what we already have
            self._lease = lease
            if lease is not None:
                self._observed = observe(self._observed, LeaseRecord.from_lease(lease), self.clock())
                if self._holding:
                    self._check_holding(LeaseRecord.from_lease(lease))
            self._cond.notify_all()

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                lease = self.api.get_lease(self.namespace, self.name)
                self._update(lease)
                self._listed.set()
                if lease is None:
                    self._stop.wait(1.0)
                    continue
                rv = str(lease["metadata"]["resourceVersion"])
                for type_, obj in self.api.watch_lease(self.namespace, self.name, rv, timeout=60):
                    if self._stop.is_set():
                        return
                    self._update(None if type_ == "DELETED" else obj)
            except Exception as exc:  # the API server may restart: relist after a pause
                log.debug("lease watch: %s", exc)
                with self._cond:
                    # unseen changes cannot be ruled out: the record's age counts again from when
                    # it is next seen (a standby never takes over from a holder that renewed
                    # unseen, e.g. right after an API server outage)
                    self._observed = None
                self._stop.wait(1.0)

    def record(self) -> LeaseRecord | None:
        with self._cond:
            return LeaseRecord.from_lease(self._lease) if self._lease is not None else None

    # -- standby -----------------------------------------------------------------------------
    def someone_serving(self, wait: float = 5.0) -> bool:
        """Whether another live driver holds the Lease now (:func:`someone_serving`); True when
        the Lease cannot be read within ``wait`` seconds (warming up is then the safe choice)."""
        if not self._listed.wait(wait):
            return True
        record = self.record()
        return someone_serving(record, self.identity, self._probe(record))

    def _probe(self, record: LeaseRecord | None) -> HolderProbe:
        """Ask another holder's endpoint whether its process lives (UNKNOWN when there is none)."""
        if record is not None and record.holder and record.holder != self.identity:
            return self.prober(record.annotations.get(HOLDER_ADDRESS), record.holder)
        return HolderProbe.UNKNOWN

    def wait_for_leadership(self, stop: threading.Event, poll: float = 0.5,
                            while_held: Callable[[], None] | None = None) -> Leadership | None:
        """Block until this driver holds the Lease (None when ``stop`` is set first).
        ``while_held`` is called once, the first time another driver is seen holding it."""
        while not stop.is_set():
            with self._cond:
                lease = self._lease
                observed = self._observed
            record = LeaseRecord.from_lease(lease) if lease is not None else None
            decision = decide(record, self.identity, observed, self.clock(), self._probe(record))
            if decision.why == Why.HELD and while_held is not None:
                callback, while_held = while_held, None
                callback()
                continue
            try:
                if decision.verdict == Verdict.CREATE:
                    self._create()
                    continue
                if decision.verdict in (Verdict.ACQUIRE, Verdict.RENEW):
                    assert lease is not None
                    got = self._acquire(lease, decision.why)
                    if got is not None:
                        return got
                    continue
            except (KubeApiError, OSError) as exc:  # API server away or RBAC wrong: say so, retry
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                stop.wait(2.0)
                continue
            with self._cond:
                if self._lease is lease:
                    self._cond.wait(poll)
        return None

    def _create(self) -> None:
        existing = self.api.get_lease(self.namespace, self.name)
        if existing is not None:  # the watch has not delivered it yet
            self._update(existing)
            return
        lease = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {QUERY_LABEL: self.name.removesuffix("-driver")}},
            "spec": {"leaseDurationSeconds": int(self.duration)},
        }
        try:
            self._update(self.api.create_lease(lease))
        except KubeApiError as exc:
            if exc.status != 409:
                log.warning("cannot create lease %s: %s", self.name, exc)
                time.sleep(1.0)
            self._update(self.api.get_lease(self.namespace, self.name))

    def _acquire(self, lease: dict[str, Any], why: Why) -> Leadership | None:
        record = LeaseRecord.from_lease(lease)
        now = micro_time()
        epoch = record.transitions + 1
        if record.holder and record.holder != self.identity:
            from_pod = pod_of(record.holder)
        elif not record.holder and released_recently(record):
            from_pod = self._last_holder_pod(record)
        else:
            from_pod = ""  # a first start, a resume after suspend, or this driver again: no takeover
        takeover = Takeover(time=now[:19] + "Z", from_pod=from_pod, to_pod=pod_of(self.identity),
                            reason=str(why), epoch=epoch, plan_hash=self.plan_hash, engine=self.engine)
        annotations = dict(record.annotations)
        annotations.pop(PREFERRED_HOLDER, None)
        # a progress record of this term from the start: one of an older term never survives into it
        progress = Progress(self.plan_hash, epoch, 0, 0, engine=self.engine)
        annotations.update({HOLDER_ADDRESS: self.address or "", HOLDER_PLAN: self.plan_hash,
                            HOLDER_ENGINE: self.engine, LAST_TAKEOVER: takeover.to_json(),
                            HOLDER_PROGRESS: progress.to_json(), HOLDER_VERSIONS: self.versions})
        desired = json.loads(json.dumps(lease))
        desired["metadata"]["annotations"] = annotations
        desired["spec"].update({
            "holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
            "acquireTime": now, "renewTime": now, "leaseTransitions": epoch,
        })
        sent = self.clock()
        try:
            updated = self.api.replace_lease(desired)
        except KubeApiError as exc:
            if exc.status == 409:
                log.info("lease %s: another driver was faster", self.name)
            else:
                log.warning("lease %s: acquire failed: %s", self.name, exc)
            self._update(self.api.get_lease(self.namespace, self.name))
            return None
        with self._cond:
            self._valid_until = holder_valid_until(sent, self.duration)
            self._holding = True
            self.lost.clear()
            self.handoff.clear()
            self.handoff_request = None
            self._pending = {}
            # in one step with _holding: a watch event older than our write must not look like a loss
            self._lease = updated
            self._observed = observe(self._observed, LeaseRecord.from_lease(updated), self.clock())
            self._cond.notify_all()
        log.info("lease %s acquired (%s), epoch %s, previous holder %r", self.name, why, epoch,
                 record.holder or takeover.from_pod)
        self._renewer = threading.Thread(target=self._renew_loop, name="sluice-lease-renew", daemon=True)
        self._renewer.start()
        return Leadership(epoch=epoch, why=why, previous_holder=record.holder, takeover=takeover,
                          previous_plan=record.annotations.get(HOLDER_PLAN, ""),
                          previous_engine=record.annotations.get(HOLDER_ENGINE, ""),
                          annotations=dict(record.annotations))

    def _last_holder_pod(self, record: LeaseRecord) -> str:
        previous = Takeover.from_json(record.annotations.get(LAST_TAKEOVER))
        return previous.to_pod if previous is not None else ""

    # -- holder ------------------------------------------------------------------------------
    def _check_holding(self, record: LeaseRecord) -> None:
        """Called with the lock held, on every new record while we think we hold the Lease."""
        if record.holder != self.identity:
            log.error("lease %s: now held by %r; this driver stops writing", self.name, record.holder)
            self._holding = False
            self._valid_until = 0.0
            self.lost.set()
            return
        request = pending_handoff(record)
        if request is not None and request.to and request.to == pod_of(self.identity):
            # asked to hand over to itself: nothing to do but say it is done (no drain, no gap)
            if self._pending.get(HANDOFF_DONE) != request.id:
                log.info("lease %s: hand-off %s names this driver: done, nothing to hand over", self.name,
                         request.id)
                self.report({HANDOFF_DONE: request.id})
            return
        if request is not None and not self.handoff.is_set():
            log.info("lease %s: hand-off requested (%s)", self.name, request.id)
            self.handoff_request = request
            self.handoff.set()

    def may_write(self) -> str | None:
        """None when this driver may write; else why not (the write guard, :func:`write_refusal`)."""
        with self._cond:
            return write_refusal(holding=self._holding, now=self.clock(), valid_until=self._valid_until,
                                 duration=self.duration, name=self.name, ride_out=self.ride_out,
                                 away_since=self._away_since)

    @property
    def api_away_seconds(self) -> float:
        """How long every renewal has failed for want of an API server (0: the last one did not)."""
        with self._cond:
            return 0.0 if self._away_since is None else max(0.0, self.clock() - self._away_since)

    def _renew_failed(self, status: int | None, exc: Exception) -> None:
        log.warning("lease %s: renew failed: %s", self.name, exc)
        with self._cond:
            if not api_away(status):
                self._away_since = None
            elif self._away_since is None:
                self._away_since = self.clock()

    def _renew_loop(self) -> None:
        interval = renew_interval(self.duration)
        while not self._stop.is_set():
            with self._cond:
                if not self._holding:
                    return
            if self.may_write() is not None:
                with self._cond:
                    if self._holding:
                        log.error("lease %s: validity ran out before a renewal succeeded", self.name)
                        self._holding = False
                        self.lost.set()
                return
            with self._cond:
                pending = dict(self._pending)
            if self._renew_once(pending) and pending:
                self._sent(pending)
            self._stop.wait(interval)

    def _sent(self, annotations: dict[str, str]) -> None:
        """Forget reported annotations once written (unless a newer value came meanwhile)."""
        with self._cond:
            for key, value in annotations.items():
                if self._pending.get(key) == value:
                    del self._pending[key]

    def _renew_once(self, annotations: dict[str, str] | None = None,
                    drop: tuple[str, ...] = ()) -> bool:
        for _ in range(3):
            with self._cond:
                lease = self._lease
                if not self._holding or lease is None:
                    return False
            desired = json.loads(json.dumps(lease))
            if desired["spec"].get("holderIdentity") != self.identity:
                self._update(lease)
                return False
            desired["spec"]["renewTime"] = micro_time()
            meta_ann = desired["metadata"].setdefault("annotations", {})
            meta_ann.update(annotations or {})
            for key in drop:
                meta_ann.pop(key, None)
            sent = self.clock()
            try:
                updated = self.api.replace_lease(desired)
            except KubeApiError as exc:
                if exc.status != 409:
                    self._renew_failed(exc.status, exc)
                    return False
                try:
                    self._update(self.api.get_lease(self.namespace, self.name))
                except (KubeApiError, OSError) as again:
                    self._renew_failed(getattr(again, "status", None), again)
                    return False
                continue
            except OSError as exc:
                self._renew_failed(None, exc)
                return False
            with self._cond:
                if self._holding:
                    self._valid_until = holder_valid_until(sent, self.duration)
                if self._away_since is not None:
                    log.warning("lease %s: renewed again after %.1fs without the API server", self.name,
                                self.clock() - self._away_since)
                    self._away_since = None
            self._update(updated)
            return True
        return False

    def annotate(self, annotations: dict[str, str]) -> bool:
        """Write annotations now, with a renewal of its own (e.g. the measured takeover gap)."""
        with self._cond:
            pending = dict(self._pending)
        written = self._renew_once({**pending, **annotations})
        if written:
            self._sent(pending)
        return written

    def report(self, annotations: dict[str, str]) -> None:
        """Write annotations with the next regular renewal (or the release), not with a write of
        their own: the holder's progress. A later value of a key replaces one not yet written."""
        with self._cond:
            if self._holding:
                self._pending.update(annotations)

    def release(self, preferred_pod: str = "", handoff_id: str | None = None) -> None:
        """Let go at once (after a drain): the holder identity is emptied, a waiting driver
        takes over without waiting for expiry."""
        with self._cond:
            holding = self._holding
            # from here on nothing may write, and our own release is not "losing" the lease
            self._holding = False
            self._valid_until = 0.0
            pending, self._pending = self._pending, {}
        if not holding:
            return
        for _ in range(5):
            with self._cond:
                lease = self._lease
            if lease is None:
                return
            desired = json.loads(json.dumps(lease))
            if desired["spec"].get("holderIdentity") != self.identity:
                break
            desired["spec"]["holderIdentity"] = ""
            desired["spec"]["renewTime"] = micro_time()
            ann = desired["metadata"].setdefault("annotations", {})
            ann.update(pending)  # the last report of the term goes with the release
            ann.pop(HOLDER_ADDRESS, None)
            if preferred_pod:
                ann[PREFERRED_HOLDER] = preferred_pod
            if handoff_id is not None:
                ann[HANDOFF_DONE] = handoff_id
            try:
                self._update(self.api.replace_lease(desired))
                break
            except KubeApiError as exc:
                if exc.status != 409:
                    log.warning("lease %s: release failed: %s", self.name, exc)
                    break
                self._update(self.api.get_lease(self.namespace, self.name))
            except OSError as exc:
                log.warning("lease %s: release failed: %s", self.name, exc)
                break
        log.info("lease %s released%s", self.name, f" to {preferred_pod}" if preferred_pod else "")

    def wait_for_successor(self, my_epoch: int, timeout: float, nobody_within: float = 0.5) -> str:
        """After :meth:`release` at the end of term ``my_epoch``: wait until the successor recorded
        its first commit, at most ``timeout`` seconds, and no longer than ``nobody_within`` while
        nobody takes the Lease. Returns the last :func:`successor_progress` seen."""
        started = time.monotonic()
        with self._cond:
            while True:
                record = LeaseRecord.from_lease(self._lease) if self._lease is not None else None
                seen = successor_progress(record, self.identity, my_epoch)
                waited = time.monotonic() - started
                if (seen == SUCCESSOR_COMMITTED or waited >= timeout
                        or (seen == SUCCESSOR_NONE and waited >= nobody_within)):
                    return seen
                self._cond.wait(0.2)

    def step_down(self) -> None:
        """Stop acting as holder without touching the Lease (it was lost)."""
        with self._cond:
            self._holding = False
            self._valid_until = 0.0
            self._pending = {}

    def close(self) -> None:
        self._stop.set()
