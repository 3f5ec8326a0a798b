"""Graceful drain: finish the micro-batch in flight, make sure its commit is written, then stop.

Every streaming write of a Sluice pipeline goes through ``foreachBatch`` and a :class:`BatchGate`.
A drain closes the gate:

1. a batch already inside the gate finishes its write; Spark then writes ``commits/N``;
2. a batch that Spark plans after the gate closed is held at the gate before it writes anything
   (its frame is never executed, so neither output nor state is produced for it);
3. once no batch is inside the gate and every batch that passed it has its ``commits/N``, held
   batches are released (they raise without writing) and the queries are stopped;
4. offset-log entries of batches that never passed the gate (``offsets/N`` with no
   ``commits/N``) are removed, so the checkpoint ends on a committed batch and a restart plans the
   next batch afresh from the committed offsets: nothing is read twice, nothing is skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_runtime import checkpointstore as cs

log = logging.getLogger(__name__)


class Draining(RuntimeError):
    """Raised in a batch held at a closed gate once its query has been stopped."""


class NotHolder(RuntimeError):
    """Raised in a batch when the write guard says this driver may not write (lease lost)."""


@dataclass
class BatchGate:
    """Admits micro-batch writes until a drain closes it."""

    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False
    _inside: int = 0
    _released: bool = False
    #: query name -> last batch id that passed the gate and finished writing
    completed: dict[str, int] = field(default_factory=dict)
    #: query name -> batch ids held at the gate
    held: dict[str, list[int]] = field(default_factory=dict)
    #: the write guard: None when writing is allowed, else why not (checked before a batch writes
    #: and again before Spark may commit it)
    guard: Callable[[], str | None] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, name: str, batch_id: int, write: Callable[[], object]) -> None:
        """Run ``write`` for a batch unless the gate is closed; then hold the batch until stop."""
        with self._cond:
            if self._closed:
                self.held.setdefault(name, []).append(batch_id)
                while not self._released:
                    self._cond.wait(1.0)
                raise Draining(f"query {name}: batch {batch_id} not run: draining")
            self._inside += 1
        try:
            self._check(name, batch_id, "before writing")
            write()
            # a driver paused past its lease must not let Spark commit what it wrote meanwhile
            self._check(name, batch_id, "after writing")
            with self._cond:
                self.completed[name] = batch_id
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    def _check(self, name: str, batch_id: int, when: str) -> None:
        reason = self.guard() if self.guard is not None else None
        if reason is not None:
            raise NotHolder(f"query {name}: batch {batch_id} refused {when}: {reason}")

    def close(self, timeout: float | None = None) -> bool:
        """Close the gate and wait until no batch is writing; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._closed = True
            while self._inside:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining if remaining is not None else 1.0)
        return True

    def release(self) -> None:
        """Let held batches raise (call after the queries are stopped)."""
        with self._cond:
            self._released = True
            self._cond.notify_all()


def _batch_ids(directory: str | Path) -> list[int]:
    """The batch ids of a metadata log directory (``offsets/``, ``commits/``), on a volume or in
    an object store (:mod:`sluice_runtime.checkpointstore`)."""
    names = cs.store_for(directory).names(str(directory))
    return sorted(int(n) for n in names if n.isdigit())


def last_commit(checkpoint: str | Path) -> int | None:
    ids = _batch_ids(cs.join(checkpoint, "commits"))
    return ids[-1] if ids else None


def last_offsets(checkpoint: str | Path) -> int | None:
    ids = _batch_ids(cs.join(checkpoint, "offsets"))
    return ids[-1] if ids else None


def wait_for_commit(checkpoint: str | Path, batch_id: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    store, path = cs.store_for(checkpoint), cs.join(checkpoint, "commits", str(batch_id))
    while time.monotonic() < deadline:
        if store.exists(path):
            return True
        time.sleep(0.05)
    return store.exists(path)


def roll_back_unstarted(checkpoint: str | Path) -> list[int]:
    """Remove ``offsets/N`` (and its checksum) for batches after the last commit."""
    store = cs.store_for(checkpoint)
    committed = last_commit(checkpoint)
    removed = []
    for batch in _batch_ids(cs.join(checkpoint, "offsets")):
        if committed is None or batch > committed:
            for name in (str(batch), f".{batch}.crc"):
                store.delete(cs.join(checkpoint, "offsets", name))
            removed.append(batch)
    return removed


@dataclass
class Drainable:
    name: str
    query: Any  # pyspark StreamingQuery
    checkpoint: str


def close(gate: BatchGate, queries: Iterable[Drainable], timeout: float = 300.0) -> bool:
    """Steps 1 and 2 of a drain: close the gate, let the batch inside it finish, wait for its
    ``commits/N``. Afterwards nothing more is written, neither output nor a commit: a driver under
    election may release its Lease now and stop its queries after (:func:`stop`). True when every
    query's last batch through the gate is committed."""
    log.info("drain: closing the batch gate")
    if not gate.close(timeout):
        log.error("drain: a batch is still writing after %ss; stopping anyway", timeout)
    clean = True
    for q in queries:
        done = gate.completed.get(q.name)
        if done is not None and not wait_for_commit(q.checkpoint, done, timeout=60.0):
            log.error("drain: commits/%s of %s did not appear", done, q.name)
            clean = False
    return clean


def stop(gate: BatchGate, queries: Iterable[Drainable]) -> None:
    """Steps 3 and 4 of a drain (after :func:`close`): stop the queries, and remove the offset-log
    entries of batches held at the gate."""
    queries = list(queries)
    # Held batches must give up their py4j callback before stop(): a JVM thread blocked in a
    # Python callback does not react to stop()'s interrupt.
    gate.release()
    for q in queries:
        try:
            q.query.stop()
        except Exception as exc:  # the query may already have failed
            log.warning("drain: stopping %s: %s", q.name, exc)
    for q in queries:
        removed = roll_back_unstarted(q.checkpoint)
        if removed:
            log.info("drain: %s: removed unstarted batches %s from the offset log", q.name, removed)


def drain(gate: BatchGate, queries: Iterable[Drainable], timeout: float = 300.0) -> bool:
    """Drain the queries (:func:`close`, then :func:`stop`); True when every query ended on a
    committed batch."""
    queries = list(queries)
    clean = close(gate, queries, timeout)
    stop(gate, queries)
    return clean
