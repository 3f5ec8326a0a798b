"""Executor pods held by the active driver only (issue 31).

With ``executors: N > 0`` every driver pod starts Spark in client mode with N executor pods
(``spark.executor.instances``). A standby needs them only for its warm-up on the plan (its jobs run
on executors, never in the driver): once warmed, it gives them back, and it asks for N again the
moment it takes the Lease, before its queries start. A driver that loses its term or hands off
gives them back as it stands by.

* giving back: ``SparkContext.killExecutors`` of every executor, which also lowers Spark's target
  to 0 (static allocation: nothing replaces them); Spark's Kubernetes scheduler deletes their pods;
* asking again: ``SparkContext.requestTotalExecutors(N)``, the absolute target, so a repeated call
  asks for nothing more; the first batch's tasks wait until executors register (a pod start).

One lock orders the two: a warm-up that ends while the driver takes over never gives back the
executors the new term asked for. Both are Spark developer APIs of the scheduler backend; in
local mode (no executors) nothing is called.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("sluice.executors")

#: how long, and how often, a standby gives back executors that register after it gave its own back
SWEEP_SECONDS, SWEEP_INTERVAL = 120.0, 5.0


def wanted_executors(master: str, instances: str | None) -> int:
    """The executor count a driver runs with: ``spark.executor.instances`` under a Kubernetes
    master, 0 in local mode (the tasks run in the driver)."""
    if not master.startswith("k8s://"):
        return 0
    try:
        return max(0, int(instances or "0"))
    except ValueError:
        return 0


class ExecutorHold:
    """Whether this driver holds its executors: while active, and for a standby's warm-up."""

    def __init__(self, spark: Any, wanted: int) -> None:
        self._spark = spark
        self.wanted = wanted
        self._lock = threading.Lock()
        self._active = False
        self._sweeper: threading.Thread | None = None

    def _sc(self) -> Any:
        return self._spark.sparkContext._jsc.sc()

    def release(self) -> int:
        """A standby gives back every executor (none while the driver is active); the count given.
        An executor that registers later (one the scheduler was starting, one a paused driver saw
        only once resumed) is given back by a sweep every :data:`SWEEP_INTERVAL` seconds for
        :data:`SWEEP_SECONDS`, until the driver is active again."""
        with self._lock:
            if self.wanted == 0 or self._active:
                return 0
            given = self._give_back()
            log.info("standby: gave back %d executor(s): %s", len(given), ", ".join(given) or "none")
            if self._sweeper is None or not self._sweeper.is_alive():
                self._sweeper = threading.Thread(target=self._sweep, name="executor-sweep", daemon=True)
                self._sweeper.start()
            return len(given)

    def _give_back(self) -> list[str]:
        sc = self._sc()
        sc.requestTotalExecutors(0, 0, self._empty_map())  # first: nothing replaces them
        ids = [i for i in str(sc.getExecutorIds().mkString(",")).split(",") if i]
        if ids:
            sc.killExecutors(self._spark._jvm.org.apache.spark.api.python.PythonUtils.toSeq(ids))
        return ids

    def _sweep(self) -> None:
        deadline = time.monotonic() + SWEEP_SECONDS
        while time.monotonic() < deadline:
            time.sleep(SWEEP_INTERVAL)
            with self._lock:
                if self._active:
                    return
                try:
                    late = self._give_back()
                except Exception as exc:  # the session stopping: nothing left to give back
                    log.debug("executor sweep ended: %s", exc)
                    return
                if late:
                    log.info("standby: gave back %d executor(s) registered late: %s", len(late),
                             ", ".join(late))

    def acquire(self) -> None:
        """The driver takes its term: ask for its executors again (before its queries start)."""
        with self._lock:
            self._active = True
            if self.wanted == 0:
                return
            asked = self._sc().requestTotalExecutors(self.wanted, 0, self._empty_map())
            log.info("active: asked for %d executor(s)%s", self.wanted,
                     "" if asked else " (Spark's scheduler refused)")

    def stand_by(self) -> int:
        """The term ended and the driver waits as a standby: give the executors back."""
        with self._lock:
            self._active = False
        return self.release()

    def _empty_map(self) -> Any:
        jvm = self._spark._jvm
        return jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
