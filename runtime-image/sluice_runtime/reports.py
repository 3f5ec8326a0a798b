"""What a driver reports to the operator (the records are :mod:`sluice.core.driverreport`'s).

* Progress of the term, on the Lease: :class:`ProgressCounter` counts, from the queries' progress
  reports, the micro-batches the main query committed and the progress events seen (idle triggers
  included), and keeps the main query's lag behind its sources from its newest report;
  :class:`TermProgress` hands a changed record to the elector, which writes it with its next
  regular renewal (no write of its own).
* The last error, on the driver's own pod (:func:`report_error`): a query that failed, a start
  that was refused, a warm-up that raised. Best effort: a failed patch is logged, never raised.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.core.driverreport import (
    DRIVER_ERROR,
    HOLDER_PROGRESS,
    MAX_MESSAGE,
    DriverError,
    Progress,
    error_of,
    locate_step,
)
from sluice.core.plan.model import KafkaSourceV1

from sluice_runtime.malformed import observed_counts
from sluice_runtime.metrics import total_lag
from sluice_runtime.progress import ran_a_batch

if TYPE_CHECKING:
    from sluice.core.plan.model import Plan

    from sluice_runtime.elector import Elector
    from sluice_runtime.kubeapi import KubeApi

log = logging.getLogger(__name__)

WARM_UP = "warm-up"
ACTIVE = "active"


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- progress ---------------------------------------------------------------------------------


def idle_trigger(progress: Mapping[str, Any]) -> bool:
    """Whether a report is of a trigger that found no new input: a live, idle loop. A trigger that
    planned input but did not run it (its batch failed, or is still failing) is neither this nor a
    batch: the gate must never count a query that cannot process its input as alive."""
    if ran_a_batch(progress):
        return False
    return all(src.get("startOffset") == src.get("endOffset") for src in progress.get("sources") or [])


class ProgressCounter:
    """Counts one term's committed batches and progress events (batches that ran and idle
    triggers) of the main query from the queries' progress reports; each report is counted once,
    however often it is seen again in ``recentProgress``. Reports come oldest first with rising
    timestamps (and, for batches that ran, rising batch ids), so only the newest counted one of
    each query is remembered: the memory stays the same over a term of any length."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches = 0
        self._last_batch = -1
        self._events = 0
        self._input_rows = 0
        self._dead_letters = 0
        self._lag: int | None = None
        self._last_event: dict[str, str] = {}  # query id -> timestamp of its newest report counted

    def observe(self, progresses: Iterable[Mapping[str, Any]], *, main: bool) -> None:
        with self._lock:
            for p in progresses:
                query, stamp = str(p.get("id") or p.get("name") or ""), str(p.get("timestamp") or "")
                if stamp <= self._last_event.get(query, ""):
                    continue  # seen before (ISO timestamps of one format compare as text)
                self._last_event[query] = stamp
                # only the main query's: a dead-letter query runs its batches (it reads the same
                # source) while a main query that cannot process its input fails every one
                if main and (ran_a_batch(p) or idle_trigger(p)):
                    self._events += 1
                if main:  # the newest report of the main query says how far behind it is
                    self._lag = total_lag(p)
                batch = int(p.get("batchId", -1))
                if main and ran_a_batch(p) and batch > self._last_batch:
                    self._last_batch = batch
                    self._batches += 1
                    self._input_rows += int(p.get("numInputRows") or 0)
                    self._dead_letters += sum(observed_counts(dict(p)).values())

    @property
    def batches(self) -> int:
        with self._lock:
            return self._batches

    @property
    def events(self) -> int:
        with self._lock:
            return self._events

    @property
    def lag_records(self) -> int | None:
        with self._lock:
            return self._lag

    def record(self, plan_hash: str, epoch: int) -> Progress:
        with self._lock:
            return Progress(plan_hash, epoch, self._batches, self._events, self._input_rows,
                            self._dead_letters, self._lag, ENGINE)


class TermProgress:
    """The holder's progress record of one term, reported with the Lease renewals when it changed."""

    def __init__(self, elector: Elector, plan_hash: str, epoch: int) -> None:
        self.elector = elector
        self.plan_hash = plan_hash
        self.epoch = epoch
        self.counter = ProgressCounter()
        self._last = self.counter.record(plan_hash, epoch)  # written with the acquire

    def observe(self, progresses: Iterable[Mapping[str, Any]], *, main: bool) -> None:
        self.counter.observe(progresses, main=main)
        record = self.counter.record(self.plan_hash, self.epoch)
        if record != self._last:
            self.elector.report({HOLDER_PROGRESS: record.to_json()})
            self._last = record


# -- errors -----------------------------------------------------------------------------------

#: Spark's wrapper around the error that stopped a query (Spark 3.5/4.0; 4.1 reports the cause's)
_STREAM_FAILED = re.compile(r"^\s*\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")
_FRAME = re.compile(r"^\s*(?:at\s|\.\.\. \d+ more)")
_THROWABLE_LINE = re.compile(r"^[\w.$]+(?:Exception|Error|Throwable)(?::|$)")


def _headers(stack: str) -> str:
    """A JVM stack text without its frames: the exception lines and their ``Caused by:``s."""
    return "\n".join(line for line in stack.splitlines() if line.strip() and not _FRAME.match(line))


def exception_text(exc: BaseException) -> str:
    """The text of an exception to read the error from: for one of Spark's (a StreamingQueryException,
    an AnalysisException) its description, then the exception lines of its cause's JVM stack (the
    Java class names, innermost last); for any other, ``str(exc)``."""
    desc = getattr(exc, "desc", None) or getattr(exc, "_desc", None)
    if not isinstance(desc, str):
        return str(exc)
    parts = [_STREAM_FAILED.sub("", desc, count=1)]
    own = getattr(exc, "_stackTrace", None)
    if isinstance(own, str) and _THROWABLE_LINE.match(own):  # a JVM exceptionString, not bare frames
        parts.append(_headers(own))
    cause = getattr(exc, "_cause", None)
    cause_stack = getattr(cause, "_stackTrace", None)
    if isinstance(cause_stack, str):
        parts.append(_headers(cause_stack))
    return "\n".join(p for p in parts if p.strip())


#: the error class of a query that stopped because a source's records were gone (``onDataLoss: fail``)
KAFKA_DATA_LOSS = "KafkaDataLoss"
#: Spark's Kafka connector words every data-loss error with this (failOnDataLoss=true)
_DATA_LOSS = re.compile(r"Some data may have been lost")
_LOST_RANGE = re.compile(
    r"Could not read records in offset \[(\d+), (\d+)\) for topic partition (\S+)-(\d+)\b"
)
_LOST_PARTITION = re.compile(r"\b(?:Partition|partitions?) \[?([\w.-]+)-(\d+)\b")


def data_loss(plan: Plan, text: str) -> tuple[str, str | None] | None:
    """(message, source step id) when ``text`` is Spark's data-loss error: a source with
    ``onDataLoss: fail`` found offsets it had not read gone from its topic. None for any other
    error. The message names the source, its topic and partition and the lost range where Spark
    tells them, and ``spec.sources[].onDataLoss``."""
    if not _DATA_LOSS.search(text):
        return None
    sources = [s for s in plan.steps if isinstance(s, KafkaSourceV1)]
    lost = _LOST_RANGE.search(text)
    topic, where = None, ""
    if lost is not None:
        topic = lost.group(3)
        where = f"offsets [{lost.group(1)}, {lost.group(2)}) of partition {lost.group(4)} are"
    else:
        named = [m for m in _LOST_PARTITION.finditer(text) if any(s.topic == m.group(1) for s in sources)]
        if named:
            topic, where = named[0].group(1), f"records of partition {named[0].group(2)} are"
    matching = [s for s in sources if s.topic == topic] or [s for s in sources if s.on_data_loss == "fail"]
    step = matching[0] if len(matching) == 1 else None
    what = (f"source {step.source!r} (topic {step.topic!r})" if step is not None
            else f"a source (topic {topic!r})" if topic else "a source")
    message = (f"{what}: {where or 'records it had not read yet are'} no longer in Kafka (aged out by "
               f"retention, deleted, or the topic was recreated); the query stops because "
               f"spec.sources[].onDataLoss of the source is 'fail'. Set it to 'skip' to go on from the "
               f"earliest offset still in the topic (the lost offsets are counted in "
               f"sluice_source_skipped_offsets_total)")
    return message[:MAX_MESSAGE], step.id if step is not None else None


def driver_error(plan: Plan, plan_hash: str, phase: str, exc: BaseException,
                 time: str | None = None) -> DriverError:
    """The error record of ``exc`` (the class Spark names, else a Java class in it, else the Python
    exception's), with the plan step it points at where the SQL fragment quoted tells; Spark's
    data-loss error is :data:`KAFKA_DATA_LOSS`, pointing at the source (:func:`data_loss`)."""
    text = exception_text(exc)
    lost = data_loss(plan, text)
    if lost is not None:
        return DriverError(plan_hash=plan_hash, phase=phase, error_class=KAFKA_DATA_LOSS, message=lost[0],
                           time=time or now_rfc3339(), step=lost[1])
    error_class, message = error_of(text)
    if error_class == "Error":
        error_class = type(exc).__name__
    if not message:
        message = type(exc).__name__
    steps = [s.model_dump(by_alias=True) for s in plan.steps]
    return DriverError(plan_hash=plan_hash, phase=phase, error_class=error_class, message=message,
                       time=time or now_rfc3339(), step=locate_step(steps, text))


#: the engine digest this process runs on (``SLUICE_ENGINE``), set once at start: every error and
#: progress record names it
ENGINE = ""


def report_error(api: KubeApi | None, namespace: str, pod: str, error: DriverError) -> bool:
    """Annotate this driver's own pod with ``error`` (best effort: False when it could not)."""
    if ENGINE and not error.engine:
        error = dataclasses.replace(error, engine=ENGINE)
    log.error("driver error (%s): %s", error.phase, error.summary())
    if api is None or not pod or not namespace:
        return False
    try:
        api.patch_pod_metadata(namespace, pod, {}, {DRIVER_ERROR: error.to_json()})
        return True
    except Exception as exc:  # never hide the error being reported
        log.warning("cannot annotate pod %s/%s with the error: %s", namespace, pod, exc)
        return False


def report_exception(api: KubeApi | None, namespace: str, pod: str, plan: Plan, plan_hash: str, phase: str,
                     exc: BaseException) -> None:
    """:func:`report_error` for an exception; whatever goes wrong while reporting is logged only."""
    try:
        error = driver_error(plan, plan_hash, phase, exc)
    except Exception as build_exc:
        log.warning("cannot describe the error for the pod: %s", build_exc)
        return
    report_error(api, namespace, pod, error)


def query_failure(queries: Iterable[Any]) -> BaseException | None:
    """The exception of the first query that stopped with one."""
    for q in queries:
        try:
            exc = q.exception()
        except Exception:
            continue
        if exc is not None:
            return exc  # type: ignore[no-any-return]
    return None
