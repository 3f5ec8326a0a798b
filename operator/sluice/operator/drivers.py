"""``status.drivers``, the query's readiness and the fail-over events, from the driver Lease and
pods (called by the Deployment and Lease watches; the reconcile keeps readiness current too).

Which driver runs the query is decided by the drivers alone, on the Lease, without the operator;
this module only reports it. A takeover the new holder recorded (``LAST_TAKEOVER``) is announced
exactly once: the status is written with the query's ``resourceVersion``, and the event is posted
only by the writer that won.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from sluice.core import election, gate
from sluice.core.naming import QueryNames
from sluice.core.records import QueryRecords
from sluice.core.rollout import GATED
from sluice.core.status import EventReason, Facts, Reason, StatusProblem, get_condition
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator.env import Env, QueryRun, _facts
from sluice.operator.kube import KubeError
from sluice.operator.lease import driver_selector

log = logging.getLogger("sluice.operator")

#: optimistic-concurrency attempts of one refresh
ATTEMPTS = 3


def takeover_message(takeover: election.Takeover) -> str:
    gap = "not measured" if takeover.gap_seconds is None else f"{takeover.gap_seconds:.2f}s"
    how = "handed off" if takeover.kind == EventReason.HANDED_OFF else f"failed over ({takeover.reason})"
    return f"driver {how} from {takeover.from_pod} to {takeover.to_pod}; output gap {gap}"


def _current_problem(status: dict[str, Any]) -> StatusProblem | None:
    degraded = get_condition(status.get("conditions") or [], "Degraded")
    if not degraded or degraded.get("status") != "True":
        return None
    try:
        return StatusProblem(Reason(degraded["reason"]), degraded.get("message", ""))
    except ValueError:
        return None


def driver_problem(env: Env, ctx: Any, plan_hash: str, ready: bool) -> StatusProblem | None:
    """A failed or crash-looping driver of the pinned plan, outside a rollout (reads Lease, pods)."""
    if ready:
        return None
    lease = env.kube.get("Lease", ctx.namespace, election.lease_name(ctx.names.base))
    record = election.LeaseRecord.from_lease(lease) if lease is not None else None
    pods = env.kube.list("Pod", ctx.namespace, driver_selector(ctx.names.base))
    message = gate.driver_problem(record, pods, plan_hash, ready)
    return StatusProblem(Reason.DRIVER_FAILED, message) if message else None


def _problem_now(status: dict[str, Any], record: election.LeaseRecord | None, pods: list[dict[str, Any]],
                 ready: bool, suspended: bool) -> StatusProblem | None:
    """The standing problem, with the driver failure (outside a rollout) brought up to date."""
    problem = _current_problem(status)
    if problem is not None and problem.reason != Reason.DRIVER_FAILED:
        return problem
    records = QueryRecords.of(status)
    if records.plan is None or suspended or (records.rollout is not None and records.rollout.step in GATED):
        return problem
    message = gate.driver_problem(record, pods, records.plan.hash, ready)
    return StatusProblem(Reason.DRIVER_FAILED, message) if message else None


def refresh_readiness(env: Env, body: dict[str, Any], driver_ready: bool, updates: dict[str, Any],
                      problem: StatusProblem | None) -> bool:
    """Recompute the conditions of a query whose active driver's readiness (or ``updates``, e.g.
    ``drivers``) changed, with ``problem`` (see ``_problem_now``) and the observed generation;
    returns whether the status was written (only if the query is still at the ``resourceVersion``
    of ``body``)."""
    run = QueryRun(env, body, dict(body.get("status") or {}))
    if body["metadata"].get("deletionTimestamp") or run.records.plan is None:
        return False
    try:
        spec = StreamingQuerySpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return False
    facts = _facts(run, spec, problem=problem, driver_ready=driver_ready)
    facts = Facts(**{**facts.__dict__, "generation": run.status.get("observedGeneration")})
    return run.write(updates, facts, resource_version=body["metadata"].get("resourceVersion"))


def refresh_drivers(env: Env, namespace: str, query: str, lease: dict[str, Any] | None = None) -> None:
    """Bring ``status.drivers`` and ``ready`` of ``query`` in line with its Lease and driver pods;
    announce a new takeover once (event + metric)."""
    names = QueryNames.for_query(query)
    for _attempt in range(ATTEMPTS):
        body = env.kube.get("StreamingQuery", namespace, query)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        if lease is None:
            lease = env.kube.get("Lease", namespace, election.lease_name(names.base))
        record = election.LeaseRecord.from_lease(lease) if lease is not None else None
        pods = env.kube.list("Pod", namespace, driver_selector(names.base))
        previous = (body.get("status") or {}).get("drivers")
        drivers = election.drivers_status(record, pods, previous)
        takeover = election.takeover_to_announce(record, previous)
        suspended = bool((body.get("spec") or {}).get("suspend"))
        ready = not suspended and election.active_driver_ready(record, pods)
        # the API server stores no nulls (a merge patch deletes the key): compare without them,
        # but send them, so that a driver that is gone is removed from the stored status
        unchanged = {k: v for k, v in drivers.items() if v is not None} == previous
        try:
            problem = _problem_now(body.get("status") or {}, record, pods, ready, suspended)
            written = refresh_readiness(env, body, ready, {} if unchanged else {"drivers": drivers}, problem)
        except KubeError as exc:
            if exc.status != 409:
                raise
            lease = None  # somebody else wrote first: read everything again
            continue
        if written and takeover is not None:
            kind = takeover.kind
            env.events(body, "Normal", str(EventReason(kind)), takeover_message(takeover))
            env.metrics.failover(namespace, query, kind, takeover.gap_seconds)
        return
    log.info("%s/%s: drivers status not written (kept conflicting)", namespace, query)
