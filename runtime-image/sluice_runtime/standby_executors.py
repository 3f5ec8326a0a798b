"""Executor pods for the active driver only (QueryCluster ``spec.standbyExecutors``).

With executors (Spark's Kubernetes scheduler, a ``k8s://`` master) every driver pod of a query
starts its SparkContext at once, standbys included. What a standby does with executor pods:

* ``hold`` (the default): every standby runs the query's executors and warms up on the plan
  through them, as the active driver does: the shortest takeover, for the pods' cost.
* ``release``: a standby holds none. Its SparkContext starts with
  ``spark.executor.instances=0`` (:func:`start_conf`) and does not warm up on the plan (that needs
  executors to run its tasks). When it takes the Lease it asks Spark's scheduler for the query's
  executors (:meth:`ExecutorHold.acquire`: ``requestTotalExecutors``), before it prepares its
  checkpoint epoch and starts its queries, so the pods start meanwhile; the first batch's tasks wait
  for them. A driver that loses or hands off the Lease and stands by again gives them back
  (:meth:`ExecutorHold.release`: the target set to 0, the registered executors killed; Spark deletes
  their pods). An executor whose pod was still starting then (a replacement for a lost one) registers
  later, and Spark's scheduler keeps a registered executor whatever its target: while the driver
  stands by, every executor that registers is killed too (:class:`LateExecutors`, every
  :data:`REAP_SECONDS`). A takeover then costs the executor pods' start (a JVM mapping the image's class-data
  archive, then registration), cold executors and a driver that never ran the plan: measured
  several times longer than with ``hold`` (docs/performance.md).

Local mode (no executors) is unaffected by either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.core.naming import STANDBY_EXECUTORS_ENV

from sluice_runtime.session import EXECUTOR_INSTANCES as INSTANCES

log = logging.getLogger(__name__)

__all__ = ["HOLD", "MODES", "REAP_SECONDS", "RELEASE", "STANDBY_EXECUTORS_ENV", "ExecutorHold",
           "LateExecutors", "StandbyExecutors", "plan_for", "start_conf"]

RELEASE = "release"
HOLD = "hold"
MODES = (RELEASE, HOLD)
#: Spark's default of ``spark.executor.instances`` with static allocation
SPARK_DEFAULT_INSTANCES = 2
#: how often a driver standing by without executors kills the ones that registered since
REAP_SECONDS = 5.0


@dataclass(frozen=True)
class StandbyExecutors:
    """What this driver does with executor pods while it stands by."""

    mode: str  # RELEASE or HOLD
    executors: int  # the query's executors (the active driver's)

    @property
    def released(self) -> bool:
        """Whether a standby holds no executor pods (release mode, with executors)."""
        return self.mode == RELEASE and self.executors > 0


def plan_for(conf: Mapping[str, str], master: str, mode: str, elected: bool) -> StandbyExecutors:
    """The standby policy of a driver: ``conf`` its Spark settings, ``master`` Spark's master,
    ``mode`` one of :data:`MODES`, ``elected`` whether it runs under a Lease (a driver without
    election is always active). Executors: ``spark.executor.instances`` of a ``k8s://`` master
    (Spark's default 2 when unset), 0 otherwise. ValueError for an unknown mode or count."""
    if mode not in MODES:
        raise ValueError(f"{STANDBY_EXECUTORS_ENV}: {mode!r} is neither of {', '.join(MODES)}")
    if not master.startswith("k8s://"):
        return StandbyExecutors(mode, 0)
    text = conf.get(INSTANCES, str(SPARK_DEFAULT_INSTANCES)).strip()
    try:
        executors = int(text)
    except ValueError:
        raise ValueError(f"{INSTANCES} must be a whole number, got {text!r}") from None
    if executors < 0:
        raise ValueError(f"{INSTANCES} must not be negative, got {text!r}")
    return StandbyExecutors(mode if elected else HOLD, executors)


def start_conf(conf: Mapping[str, str], policy: StandbyExecutors) -> dict[str, str]:
    """The Spark settings a driver's SparkContext starts with: no executors when standbys release
    them (the Lease's holder asks for them, :class:`ExecutorHold`)."""
    out = dict(conf)
    if policy.released:
        out[INSTANCES] = "0"
    return out


def _request_total(spark_context: Any, executors: int) -> bool:
    """Set the scheduler's executor target; whether the scheduler accepted it."""
    sc, jvm = spark_context._jsc.sc(), spark_context._jvm
    empty = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
    return bool(sc.requestTotalExecutors(executors, 0, empty))


def _kill_registered(spark_context: Any) -> int:
    """Set the scheduler's executor target to 0 and kill every registered executor (Spark deletes
    their pods); how many there were."""
    _request_total(spark_context, 0)  # no replacement for the ones killed below
    sc = spark_context._jsc.sc()
    registered = sc.getExecutorIds()  # a Scala Seq, handed back as it is
    count = int(registered.size())
    if count:
        sc.killExecutors(registered)
    return count


class LateExecutors:
    """While a driver stands by without executors: every :data:`REAP_SECONDS`, kill the executors
    that registered since it gave its own back (pods that were starting then). :meth:`stop` before
    asking for executors again: after it returns nothing is killed any more."""

    def __init__(self, spark_context: Any, every: float = REAP_SECONDS) -> None:
        self._spark_context, self._every = spark_context, every
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # a kill in progress finishes before stop() returns
        self._thread = threading.Thread(target=self._run, name="late-executors", daemon=True)

    def start(self) -> LateExecutors:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self._every):
            with self._lock:
                if self._stopped.is_set():
                    return
                try:
                    count = _kill_registered(self._spark_context)
                except Exception as exc:  # the context stopping with the process
                    log.warning("executors: cannot look for late ones: %s", exc)
                    continue
            if count:
                log.info("executors: %s registered while standing by, given back", count)


class ExecutorHold:
    """Asks Spark's scheduler for the query's executors at a takeover and gives them back when the
    driver stands by again (``release`` mode; nothing in ``hold`` mode or local mode)."""

    def __init__(self, policy: StandbyExecutors) -> None:
        self.policy = policy
        self.held = not policy.released  # hold mode: the context started with them
        self._late: LateExecutors | None = None

    def acquire(self, spark_context: Any) -> None:
        if self.held:
            return
        if self._late is not None:
            self._late.stop()
            self._late = None
        accepted = _request_total(spark_context, self.policy.executors)
        self.held = True
        log.info("executors: %s asked of Spark's scheduler (%s)", self.policy.executors,
                 "accepted" if accepted else "not accepted")

    def release(self, spark_context: Any) -> None:
        if not self.held or not self.policy.released:
            return
        count = _kill_registered(spark_context)
        self.held = False
        self._late = LateExecutors(spark_context).start()
        log.info("executors: %s given back (standing by)", count)
