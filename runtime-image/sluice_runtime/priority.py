"""Standby drivers run at a lower CPU priority than the active one: where pods share CPU without
cgroups (a container's threads all live in the pod's cgroup, where this changes nothing), a standby
warming up after a restart must not slow the active driver's batches. The driver raises its
threads back to normal when it takes over."""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)

#: how much lower a standby runs than the active driver (``nice``): a standby warming up after a
#: restart must not slow the active driver's batches where pods share CPU without cgroups (a
#: container's threads all live in the pod's cgroup, where this changes nothing)
STANDBY_NICE = 10


def lower_priority() -> None:
    """Run this process (and the JVM it starts later, which inherits it) as background work."""
    try:
        os.nice(STANDBY_NICE)
    except OSError as exc:
        log.debug("cannot lower priority: %s", exc)


def set_priority(pids: list[int], nice: int) -> int:
    """``nice`` for every thread of ``pids`` (this process and Spark's JVM); returns how many
    threads took it (raising priority back to 0 needs CAP_SYS_NICE: where it is not permitted the
    driver keeps running, at the standby's priority)."""
    changed = 0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed += 1
            except OSError:
                pass
    return changed


def own_pids(spark: Any) -> list[int]:
    """This process and the JVM of its SparkSession."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    return [os.getpid(), *([int(proc.pid)] if proc is not None else [])]
