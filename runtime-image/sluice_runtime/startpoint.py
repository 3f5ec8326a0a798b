"""Which checkpoint a new Lease holder starts from, and whether its plan may start on it.

Called once per term, before the exactly-once producer is initialised and before any query starts:

1. a **restore request** of the operator for this plan (``sluice.dev/restore-request`` on the
   Lease, not yet done): the new epoch is linked from the requested backstop epoch instead of the
   newest one; the holder then writes ``sluice.dev/restore-done`` with the request's id. A
   requested epoch that no longer exists refuses the start (``BackstopMissing``);
2. otherwise the newest earlier epoch, as always (:mod:`sluice_runtime.epochs`). When the driver
   before ran **another plan or another engine** (the plan and engine the source epoch's state
   signature names, else the Lease's ``sluice.dev/holder-plan-hash`` and ``sluice.dev/holder-engine``
   before this driver took it: an engine upgrade keeps the plan), that source epoch is kept
   untouched as a **backstop** (``<base>/backstops.json``, never pruned while listed) and
   announced on the Lease (``sluice.dev/backstop``);
3. after a switch of plan (or a restore) the new epoch is **verified** against the plan
   (:func:`sluice_runtime.backstop.verify`: pinned Spark settings, stateful operators, the state
   signature): problems refuse the start (``CheckpointIncompatible``). The plan's state signature
   is then recorded in the epoch (also in the first epoch of a new query).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.driverreport import BACKSTOP, RESTORE_DONE, Backstop, RestoreRequest, pending_restore

from sluice_runtime import backstop as backstop_mod
from sluice_runtime import epochs

if TYPE_CHECKING:
    from sluice.core.plan.model import Plan

log = logging.getLogger(__name__)

CHECKPOINT_INCOMPATIBLE = "CheckpointIncompatible"
BACKSTOP_MISSING = "BackstopMissing"
#: another driver claimed this term's epoch on the object store (the term is lost)
TERM_TAKEN = "CheckpointTermTaken"


class StartRefused(RuntimeError):
    """The plan may not start on this checkpoint (reported on the pod, the term fails)."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message


@dataclass
class StartPoint:
    checkpoint: str | Path  # this term's epoch (an s3a:// URI on an object store)
    source: str | Path | None  # what it was linked (copied) from
    backstop: Backstop | None = None  # the epoch kept before a switch of plan
    restored: RestoreRequest | None = None  # the restore request carried out

    def annotations(self) -> dict[str, str]:
        """What the holder writes on the Lease about its start."""
        out: dict[str, str] = {}
        if self.backstop is not None:
            out[BACKSTOP] = self.backstop.to_json()
        if self.restored is not None:
            out[RESTORE_DONE] = self.restored.id
        return out


def prepare_start(base: str | Path, epoch: int, plan: Plan, plan_hash: str, previous_plan: str,
                  lease_annotations: dict[str, str], time: str, *, engine: str = "",
                  previous_engine: str = "", holder: str = "") -> StartPoint:
    """Make this term's checkpoint epoch and check it (raises :class:`StartRefused`). ``engine``:
    the engine this driver runs on; a switch of engine keeps a backstop like a switch of plan.
    ``holder``: this driver's Lease identity (an object store's epoch is claimed in its name;
    another driver's claim of the term refuses the start: ``TermTaken``)."""
    request = pending_restore(lease_annotations, plan_hash, engine)
    override: str | Path | None = None
    if request is not None:
        override = epochs.epoch_at(base, request.epoch)
        if not epochs.ready(base, request.epoch):
            raise StartRefused(BACKSTOP_MISSING, f"restore request {request.id}: checkpoint epoch "
                               f"{request.epoch} does not exist (kept: "
                               f"{[b.epoch for b in epochs.backstops(base)] or 'none'})")
        log.info("restore request %s: starting from checkpoint epoch %s", request.id, request.epoch)
    try:
        checkpoint, source = epochs.prepare(base, epoch, source=override, holder=holder, time_text=time)
    except epochs.TermTaken as taken:
        raise StartRefused(TERM_TAKEN, str(taken)) from None
    start = StartPoint(checkpoint, source, restored=request)
    # the plan that ran on the source last: the one its signature names (a holder whose start was
    # refused left its plan on the Lease, not on the checkpoint), else the Lease's previous holder's
    writer = (backstop_mod.recorded_plan(source) if source is not None else None) or previous_plan
    writer_engine = (backstop_mod.recorded_engine(source) if source is not None else None) or previous_engine
    switched = (bool(writer) and writer != plan_hash) or (bool(writer_engine and engine)
                                                           and writer_engine != engine)
    source_epoch = epochs.epoch_of(source, base) if source is not None else None
    if switched and request is None and source_epoch is not None:
        start.backstop = Backstop(epoch=source_epoch, plan_hash=writer or plan_hash, to_plan=plan_hash,
                                  time=time, engine=writer_engine, to_engine=engine)
        epochs.keep_backstop(base, start.backstop)
    verified = switched or request is not None
    if verified:
        problems = backstop_mod.verify(checkpoint, plan)
        if problems:
            raise StartRefused(CHECKPOINT_INCOMPATIBLE, "; ".join(problems))
    # the signature of the plan that runs on it: a new query's, one verified, or one written by
    # this same plan that records none this runtime compares (none at all, or one of another
    # signature version); never for a checkpoint of an unknown plan
    unsigned_same_plan = previous_plan == plan_hash and not backstop_mod.has_signature(checkpoint)
    if source is None or verified or unsigned_same_plan:
        backstop_mod.record(checkpoint, plan, engine)
    return start
