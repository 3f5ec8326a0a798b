"""A takeover's timing: the gap it caused, where its first batch spent its time, and the old
holder's manners (it waits for its successor's first commit before it stops, and then stops at once).

* :class:`GapMeter`: the previous holder's last ``commits/N`` to this holder's first, from the
  checkpoint (what ``gapSeconds`` on the Lease reports);
* :class:`FirstBatchLog`: Spark's ``durationMs`` of the first batch of a term, logged;
* :func:`stay_out_of_the_way` and :func:`exit_at_once`: a driver drained by SIGTERM (a rollout
  replaced its pod) stays idle until its successor committed, and then ends without stopping
  Spark: a graceful stop and the container's teardown cost CPU the successor's first batches need;
* :data:`DEAD_LETTER_DEFER`: the successor starts its dead-letter queries after its main query's
  first commit (``start_pipeline(defer_dead_letters=True)``), for the same reason.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice_runtime import epochs

if TYPE_CHECKING:
    from sluice_runtime.elector import Elector

log = logging.getLogger("sluice_runtime")


@dataclass
class GapMeter:
    """Measures a takeover's gap from the checkpoint: the previous holder's last ``commits/N``
    to this holder's first ``commits/M`` (M > N), by their modification times."""

    checkpoint: str | Path  # this term's epoch (an s3a:// URI on an object store)
    before: tuple[int, float] | None
    acquired_at: float  # wall clock, used when the previous holder never committed
    gap: float | None = None

    def poll(self) -> float | None:
        if self.gap is not None:
            return None
        latest = epochs.last_commit_time(self.checkpoint)
        if latest is None or (self.before is not None and latest[0] <= self.before[0]):
            return None
        start = self.before[1] if self.before is not None else self.acquired_at
        self.gap = max(0.0, latest[1] - start)
        return self.gap


@dataclass
class FirstBatchLog:
    """Logs where the first batch of a term spent its time (Spark's ``durationMs`` of the main
    query's first progress after the takeover): what a takeover's gap is made of."""

    query: Any
    meter: GapMeter
    done: bool = False

    def poll(self) -> None:
        if self.done or self.meter.gap is None:
            return
        after = self.meter.before[0] if self.meter.before is not None else -1
        for progress in self.query.recentProgress:
            if int(progress["batchId"]) > after:
                durations = dict(progress["durationMs"] or {})
                log.info("active: first batch %s: %s ms %s", progress["batchId"],
                         durations.get("triggerExecution"), durations)
                self.done = True
                return


#: a takeover starts the dead-letter queries after the main query's first commit, or this long after
#: it started (idle input: no commit comes)
DEAD_LETTER_DEFER = 10.0
#: at most this long a drained driver waits for its successor's first commit before it exits
SUCCESSOR_WAIT = 8.0


def stay_out_of_the_way(elector: Elector, epoch: int, timeout: float = SUCCESSOR_WAIT) -> None:
    """A driver that drained and released on SIGTERM stops its JVM only once the driver that took
    over has committed its first batch (or nobody took over): stopping Spark and the container's
    teardown take CPU the successor's first batch needs; idle, a drained driver costs nothing."""
    started = time.monotonic()
    seen = elector.wait_for_successor(epoch, timeout)
    log.info("successor %s after %.1fs: stopping", seen, time.monotonic() - started)


def exit_at_once(code: int) -> None:
    """End the process now, without stopping Spark: after a drain the checkpoint is consistent,
    the producer flushed and the Lease released, and with a local master nothing outside the
    process needs stopping (no executor pods). A graceful ``SparkSession.stop()`` and the JVM's
    shutdown hooks cost a second of CPU that the successor's next batches need; in a container the
    JVM ends with its init process."""
    log.info("exiting (%s) without stopping Spark", code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
