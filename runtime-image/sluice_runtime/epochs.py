"""Checkpoint epochs: each Lease holder runs on its own copy of the checkpoint.

With election on, the checkpoint directory the operator assigns (``SLUICE_CHECKPOINT``, the base)
holds ``epochs/<n>``, one per Lease holder (``n`` = the Lease's ``leaseTransitions`` when it took
over). A new holder makes ``epochs/<n>`` from the newest earlier epoch with hard links (Spark
never modifies a checkpoint file in place: offsets, commits, state files and changelogs are all
written to a temporary name and renamed), then runs its queries there.

This is the checkpoint's fence against a zombie: a former holder that was paused or partitioned
past its lease keeps writing (if at all) into *its* epoch, which no driver reads again, so it can
neither add a batch nor delete a file of the live checkpoint. Copying is cheap (one link per
file, no data copied) and bounded by Spark's own retention (``minBatchesToRetain``).

A base that already holds a checkpoint (``metadata`` at the top: a query started before election
existed, or by ``sluice run``) is the source of the first epoch.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)

EPOCHS = "epochs"
#: epochs kept behind the live one (a zombie may still write into the previous one)
KEEP_BEHIND = 1


def epoch_dir(base: str | Path, epoch: int) -> Path:
    return Path(base) / EPOCHS / str(epoch)


def epochs(base: str | Path) -> list[int]:
    root = Path(base) / EPOCHS
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and p.is_dir())


def source_of(base: str | Path, epoch: int) -> Path | None:
    """The checkpoint the holder of ``epoch`` starts from: the newest earlier epoch, else a legacy
    checkpoint at the base, else none (a new query)."""
    earlier = [e for e in epochs(base) if e < epoch]
    if earlier:
        return epoch_dir(base, earlier[-1])
    if (Path(base) / "metadata").is_file():
        return Path(base)
    return None


def _link_tree(src: Path, dst: Path, skip: set[str]) -> int:
    count = 0
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in skip]
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            if name.endswith(".tmp"):
                continue  # a write that never finished (Spark renames when done)
            os.link(Path(root) / name, dst / rel / name)
            count += 1
    return count


def prepare(base: str | Path, epoch: int) -> tuple[Path, Path | None]:
    """Make ``epochs/<epoch>`` (idempotent); returns (it, the source it was linked from)."""
    target = epoch_dir(base, epoch)
    if target.is_dir():
        return target, source_of(base, epoch)
    started = time.monotonic()
    source = source_of(base, epoch)
    staging = Path(base) / EPOCHS / f".{epoch}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    files = _link_tree(source, staging, skip={EPOCHS}) if source is not None else 0
    staging.rename(target)
    log.info("checkpoint epoch %s: %s files linked from %s in %.3fs", epoch, files, source,
             time.monotonic() - started)
    return target, source


def prune(base: str | Path, live: int, keep_behind: int = KEEP_BEHIND) -> list[int]:
    """Remove epochs older than the ``keep_behind`` ones before ``live``."""
    older = [e for e in epochs(base) if e < live]
    doomed = older[: max(0, len(older) - keep_behind)]
    for e in doomed:
        shutil.rmtree(epoch_dir(base, e), ignore_errors=True)
    return doomed


def last_commit_time(checkpoint: str | Path) -> tuple[int, float] | None:
    """(batch id, modification time) of the newest ``commits/N``."""
    from sluice_runtime.drain import last_commit

    batch = last_commit(checkpoint)
    if batch is None:
        return None
    return batch, (Path(checkpoint) / "commits" / str(batch)).stat().st_mtime
