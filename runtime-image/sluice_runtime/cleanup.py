"""The active driver's part of the clean-up of retired plan versions (:mod:`sluice.core.cleanup`).

The state volume is mounted in the driver pods only, so the operator asks the Lease holder to
remove the checkpoint directories of retired versions (``sluice.dev/cleanup-request`` on the Lease).
The holder removes each path that is another version's checkpoint of the same query (a sibling of
its own checkpoint base; never its own, never anything else), in the background, then answers with
``sluice.dev/cleanup-done``.

With checkpoints in an object store (``s3a://bucket/...``) the same rule holds for the prefixes:
only a sibling prefix of its own base, in the same bucket (:func:`object_store_refusal`); the
objects under it are deleted through the checkpoint store.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Protocol

from sluice.core.cleanup import CLEANUP_DONE, pending_cleanup, refusal
from sluice.core.election import LeaseRecord

from sluice_runtime import checkpointstore as cs

log = logging.getLogger(__name__)


class _Lease(Protocol):
    def record(self) -> LeaseRecord | None: ...

    def annotate(self, annotations: dict[str, str]) -> bool: ...


def object_store_refusal(path: str, own_checkpoint: str) -> str | None:
    """:func:`sluice.core.cleanup.refusal` for ``s3a://`` locations: the same rule on the keys,
    and the same bucket."""
    if not (cs.is_object_store(path) and cs.is_object_store(own_checkpoint)):
        return f"{path}: not a checkpoint of this query (not beside {own_checkpoint})"
    try:
        bucket, key = cs.split_uri(path)
        own_bucket, own_key = cs.split_uri(own_checkpoint)
    except ValueError as exc:
        return str(exc)
    if bucket != own_bucket:
        return f"{path}: not a checkpoint of this query (another bucket than {own_checkpoint})"
    why = refusal("/" + key, "/" + own_key)
    return None if why is None else why.replace("/" + key, path, 1)


def remove(paths: tuple[str, ...], own_checkpoint: str) -> list[str]:
    """Remove the paths a driver may remove; returns those removed (gone already counts)."""
    removed = []
    for path in paths:
        remote = cs.is_object_store(path) or cs.is_object_store(own_checkpoint)
        why = object_store_refusal(path, own_checkpoint) if remote else refusal(path, own_checkpoint)
        if why is not None:
            log.warning("clean-up: not removed: %s", why)
            continue
        if remote:
            store = cs.store_for(path)
            store.delete_prefix(path)
            if not store.listing(path):
                removed.append(path)
                log.info("clean-up: removed the checkpoint %s of a retired plan version", path)
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
