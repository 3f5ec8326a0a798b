"""The active driver's part of the clean-up of retired plan versions (:mod:`sluice.core.cleanup`).

The state volume is mounted in the driver pods only, so the operator asks the Lease holder to
remove the checkpoint directories of retired versions (``sluice.dev/cleanup-request`` on the Lease).
The holder removes each path that is another version's checkpoint of the same query (a sibling of
its own checkpoint base; never its own, never anything else), in the background, then answers with
``sluice.dev/cleanup-done``.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Protocol

from sluice.core.cleanup import CLEANUP_DONE, pending_cleanup, refusal
from sluice.core.election import LeaseRecord

log = logging.getLogger(__name__)


class _Lease(Protocol):
    def record(self) -> LeaseRecord | None: ...

    def annotate(self, annotations: dict[str, str]) -> bool: ...


def remove(paths: tuple[str, ...], own_checkpoint: str) -> list[str]:
    """Remove the paths a driver may remove; returns those removed (gone already counts)."""
    removed = []
    for path in paths:
        why = refusal(path, own_checkpoint)
        if why is not None:
            log.warning("clean-up: not removed: %s", why)
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not Path(path).exists():
            removed.append(path)
            log.info("clean-up: removed the checkpoint %s of a retired plan version", path)
    return removed


class CheckpointCleaner:
    """Polled by the active driver: carries out a pending clean-up request once."""

    def __init__(self, lease: _Lease, own_checkpoint: str) -> None:
        self.lease = lease
        self.own_checkpoint = own_checkpoint
        self._started: str | None = None

    def poll(self) -> None:
        record = self.lease.record()
        request = pending_cleanup(record.annotations) if record is not None else None
        if request is None or request.id == self._started:
            return
        self._started = request.id

        def run() -> None:
            remove(request.paths, self.own_checkpoint)
            if not self.lease.annotate({CLEANUP_DONE: request.id}):
                self._started = None  # not written (Lease lost or conflict): again on the next poll

        threading.Thread(target=run, name="checkpoint-cleanup", daemon=True).start()
