"""The health gate of a rollout, and the driver problems outside one (pure).

A rollout switches the driver Deployment to a target plan and then waits here. It passes only on
the word of the driver that holds the Lease *for a term that began after the switch*
(``start_epoch``) and runs the *target plan hash*: its progress record (see
``sluice.core.driverreport``) must show ``batches_needed`` committed micro-batches, or as many
progress events of a live (idle) trigger loop. Readiness of any driver, a progress record of an
older term (the same plan rolled out before), or of another plan never counts.

It fails on the first of:

* an error a driver of the target plan reported after the rollout began (a query terminated with
  an exception, a warm-up that failed, a checkpoint the plan cannot use);
* a driver of the target plan restarting ``max_restarts`` times (a crash loop that never got as
  far as reporting);
* the dead-letter share of the target plan's input above ``max_dead_letter_ratio``;
* no pass before ``timeout`` seconds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sluice.core.driverreport import DRIVER_ERROR, HOLDER_PROGRESS, DriverError, Progress, same_engine
from sluice.core.election import HOLDER_PLAN, LAST_TAKEOVER, LeaseRecord, Takeover

PLAN_LABEL = "sluice.dev/plan-hash"
#: label of a driver pod: the first 12 characters of the engine digest its template was built with
ENGINE_LABEL = "sluice.dev/engine"
#: restarts of a target-plan driver container that count as a crash loop
MAX_RESTARTS = 3
#: container states in which a driver pod can never start: its image cannot be had, or its
#: configuration is refused (the gate fails at once rather than waiting out its deadline)
CANNOT_START = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                          "CreateContainerConfigError", "CreateContainerError"})


class Verdict(StrEnum):
    PASS = "pass"
    WAIT = "wait"
    FAIL = "fail"


@dataclass(frozen=True)
class GateResult:
    verdict: Verdict
    message: str
    error: DriverError | None = None
    progress: Progress | None = None


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _pod_plan(pod: dict[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(PLAN_LABEL) or "")


def runs_plan(pod: dict[str, Any], plan_hash: str, engine: str | None = None) -> bool:
    """Whether ``pod`` belongs to the driver template of ``plan_hash`` (label holds a prefix) and,
    when ``engine`` is given, of that engine."""
    label = _pod_plan(pod)
    if not label or not plan_hash.startswith(label):
        return False
    if engine:
        pod_engine = str(((pod.get("metadata") or {}).get("labels") or {}).get(ENGINE_LABEL) or "")
        return bool(pod_engine) and engine.startswith(pod_engine)
    return True


def cannot_start(pod: dict[str, Any]) -> str | None:
    """Why the pod's container can never start (``Reason: message``), if it cannot."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in CANNOT_START:
            return f"{waiting['reason']}: {waiting.get('message') or status.get('image') or ''}".strip()
    return None


def restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return max((int(s.get("restartCount") or 0) for s in statuses), default=0)


def driver_errors(pods: list[dict[str, Any]], plan_hash: str, since: dt.datetime | None,
                  engine: str | None = None) -> list[DriverError]:
    """Errors drivers of ``plan_hash`` (on ``engine``, when given) reported at or after ``since``,
    newest first."""
    found: list[tuple[dt.datetime, DriverError]] = []
    for pod in pods:
        text = ((pod.get("metadata") or {}).get("annotations") or {}).get(DRIVER_ERROR)
        error = DriverError.from_json(text)
        if error is None or error.plan_hash != plan_hash or not same_engine(error.engine, engine):
            continue
        when = parse_time(error.time) or dt.datetime.min.replace(tzinfo=dt.UTC)
        if since is not None and when < since:
            continue
        found.append((when, error))
    return [e for _, e in sorted(found, key=lambda item: item[0], reverse=True)]


def target_progress(record: LeaseRecord | None, plan_hash: str, start_epoch: int,
                    engine: str | None = None) -> Progress | None:
    """The holder's progress, if it runs ``plan_hash`` (on ``engine``, when given) in a term that
    began after ``start_epoch``."""
    if record is None or not record.holder:
        return None
    progress = Progress.from_json(record.annotations.get(HOLDER_PROGRESS))
    if progress is None or progress.plan_hash != plan_hash or not same_engine(progress.engine, engine):
        return None
    if progress.epoch <= start_epoch or progress.epoch != record.transitions:
        return None
    return progress


def dead_letter_ratio(progress: Progress) -> float | None:
    """The share of its input rows the holder sent to the dead-letter topic this term, if any."""
    return progress.dead_letters / progress.input_rows if progress.input_rows > 0 else None


def evaluate(
    *,
    plan_hash: str,
    start_epoch: int,
    started: dt.datetime,
    now: dt.datetime,
    record: LeaseRecord | None,
    pods: list[dict[str, Any]],
    batches_needed: int,
    timeout: float,
    max_dead_letter_ratio: float | None = None,
    max_restarts: int = MAX_RESTARTS,
    errors_since: dt.datetime | None = None,
    engine: str | None = None,
) -> GateResult:
    """Whether the driver of ``plan_hash`` (on ``engine``, when the rollout changes the engine: the
    old engine runs the same plan) passed, failed, or is still being waited for.

    The deadline counts from ``started`` (the gate's start); errors count from ``errors_since``
    (the rollout's start: a driver of the new plan may fail before the gate started), by default
    ``started``."""
    progress = target_progress(record, plan_hash, start_epoch, engine)
    errors = driver_errors(pods, plan_hash, errors_since or started, engine)
    if errors:
        error = errors[0]
        where = "while warming up" if error.phase == "warm-up" else "while running"
        return GateResult(Verdict.FAIL,
                          f"the driver on plan {plan_hash[:12]} failed {where}: {error.summary()}",
                          error, progress)
    stuck = [(p, why) for p in pods if runs_plan(p, plan_hash, engine) and (why := cannot_start(p))]
    if stuck:
        pod, why = stuck[0]
        name = (pod.get("metadata") or {}).get("name", "?")
        error = DriverError(plan_hash, "warm-up", "PodCannotStart", why, "", engine=engine or "")
        return GateResult(Verdict.FAIL, f"the driver pod {name} on plan {plan_hash[:12]} cannot start: {why}",
                          error, progress)
    looping = [p for p in pods if runs_plan(p, plan_hash, engine) and restarts(p) >= max_restarts]
    if looping:
        name = (looping[0].get("metadata") or {}).get("name", "?")
        return GateResult(Verdict.FAIL, f"the driver pod {name} on plan {plan_hash[:12]} restarted "
                          f"{restarts(looping[0])} times", None, progress)
    if progress is not None and max_dead_letter_ratio is not None:
        ratio = dead_letter_ratio(progress)
        if ratio is not None and ratio > max_dead_letter_ratio:
            return GateResult(Verdict.FAIL, f"{ratio:.1%} of the input went to the dead-letter topic "
                              f"(at most {max_dead_letter_ratio:.1%} allowed)", None, progress)
    if progress is not None and max(progress.batches, progress.progress_events) >= batches_needed:
        return GateResult(Verdict.PASS, f"the driver on plan {plan_hash[:12]} committed {progress.batches} "
                          f"batches ({progress.progress_events} progress events) in term {progress.epoch}",
                          None, progress)
    waited = (now - started).total_seconds()
    if waited > timeout:
        seen = "no progress" if progress is None else (
            f"{progress.batches} batches and {progress.progress_events} progress events")
        return GateResult(Verdict.FAIL, f"the driver on plan {plan_hash[:12]} showed {seen} within "
                          f"{timeout:.0f}s (needs {batches_needed})", None, progress)
    if progress is None:
        holder_plan = (record.annotations.get(HOLDER_PLAN, "") if record else "")[:12]
        where = f"the active driver runs plan {holder_plan}" if holder_plan else "no driver holds the Lease"
        return GateResult(Verdict.WAIT, f"waiting for the driver on plan {plan_hash[:12]} to take over "
                          f"({where})", None, None)
    return GateResult(Verdict.WAIT, f"the driver on plan {plan_hash[:12]} committed {progress.batches} of "
                      f"{batches_needed} batches", None, progress)


def driver_problem(record: LeaseRecord | None, pods: list[dict[str, Any]], plan_hash: str,
                   active_ready: bool) -> str | None:
    """Outside a rollout: why the query is Degraded because of its drivers, if it is.

    Only while no driver runs the query ready, and only for errors since the last takeover: a
    driver that failed and now runs again (or a standby that took over) clears it."""
    if active_ready:
        return None
    last = Takeover.from_json(record.annotations.get(LAST_TAKEOVER)) if record is not None else None
    # an error older than the last takeover was followed by a driver that ran again: not current
    errors = driver_errors(pods, plan_hash, parse_time(last.time) if last is not None else None)
    if errors:
        newest = errors[0]
        return f"the driver failed: {newest.summary()}"
    looping = [p for p in pods if runs_plan(p, plan_hash) and restarts(p) >= 1 and not _ready(p)]
    if looping:
        name = (looping[0].get("metadata") or {}).get("name", "?")
        return f"the driver pod {name} is restarting ({restarts(looping[0])} restarts)"
    return None


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def backfill_lag(progress: Progress | None, max_lag: int) -> tuple[bool, str]:
    """Whether a backfill that passed its gate is close enough to the end of its sources to take
    over (its holder's last reported lag at most ``max_lag`` records), and what it waits for."""
    lag = progress.lag_records if progress is not None else None
    if lag is None:
        return False, "the backfill has not reported its lag yet"
    if lag > max_lag:
        return False, f"the backfill is {lag} records behind its sources (takes over at {max_lag} or fewer)"
    return True, f"the backfill is {lag} records behind its sources (at most {max_lag})"
