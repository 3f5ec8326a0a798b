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

A base that already holds a checkpoint (``metadata`` at the top) is the source of the first epoch:
a driver without a Lease (``sluice run``, no ``SLUICE_LEASE_NAME``) runs on the base itself, and an
elected driver given that base must continue that checkpoint, not start the query over.

Backstops: when a holder takes over from a driver of another plan, the epoch it starts from (the
last one the other plan wrote) is kept untouched in ``<base>/backstops.json`` (the newest
:data:`KEEP_BACKSTOPS`): :func:`prune` never deletes an epoch listed there, and a restore request
of the operator makes a new epoch from it instead of the newest one (``prepare(source=...)``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

from sluice.core.driverreport import Backstop

log = logging.getLogger(__name__)

EPOCHS = "epochs"
#: epochs kept behind the live one (a zombie may still write into the previous one)
KEEP_BEHIND = 1
BACKSTOPS = "backstops.json"
#: backstop epochs kept (older ones drop out of the list, then are pruned like any other epoch)
KEEP_BACKSTOPS = 3


def epoch_dir(base: str | Path, epoch: int) -> Path:
    return Path(base) / EPOCHS / str(epoch)


def epochs(base: str | Path) -> list[int]:
    root = Path(base) / EPOCHS
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and p.is_dir())


def source_of(base: str | Path, epoch: int) -> Path | None:
    """The checkpoint the holder of ``epoch`` starts from: the newest earlier epoch, else a
    checkpoint at the base, else none (a new query).

    The checkpoint at the base is not a compatibility path: a driver without election (``sluice
    run``) still writes its checkpoint there today, and without this the first elected holder on
    that base would start an empty epoch and re-read the sources as the plan says (its output
    again, or a gap)."""
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
            try:
                os.link(Path(root) / name, dst / rel / name)
            except FileNotFoundError:
                # removed since the walk listed it: Spark purging old log entries or state files
                # (a former holder's queries may still run, held at their closed gate)
                continue
            count += 1
    return count


def epoch_of(path: str | Path, base: str | Path) -> int | None:
    """The number of an epoch directory of ``base`` (None for anything else, e.g. the base)."""
    path = Path(path)
    if path.parent != Path(base) / EPOCHS or not path.name.isdigit():
        return None
    return int(path.name)


def prepare(base: str | Path, epoch: int, source: Path | None = None) -> tuple[Path, Path | None]:
    """Make ``epochs/<epoch>`` (idempotent); returns (it, the source it was linked from).

    ``source``: link from this checkpoint instead of the newest earlier epoch (a restore)."""
    target = epoch_dir(base, epoch)
    if target.is_dir():
        return target, source or source_of(base, epoch)
    started = time.monotonic()
    source = source or source_of(base, epoch)
    staging = Path(base) / EPOCHS / f".{epoch}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    files = _link_tree(source, staging, skip={EPOCHS}) if source is not None else 0
    staging.rename(target)
    log.info("checkpoint epoch %s: %s files linked from %s in %.3fs", epoch, files, source,
             time.monotonic() - started)
    return target, source


def backstops(base: str | Path) -> list[Backstop]:
    """The kept backstop epochs, oldest first."""
    path = Path(base) / BACKSTOPS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    kept = [Backstop.from_json(json.dumps(item)) for item in data if isinstance(item, dict)]
    return [b for b in kept if b is not None]


def keep_backstop(base: str | Path, backstop: Backstop, keep: int = KEEP_BACKSTOPS) -> list[Backstop]:
    """Add ``backstop`` to the kept ones (an epoch listed again moves to the end), keep the newest
    ``keep``; returns the list written."""
    kept = [b for b in backstops(base) if b.epoch != backstop.epoch] + [backstop]
    kept = kept[-keep:]
    path = Path(base) / BACKSTOPS
    staging = path.with_name(f".{BACKSTOPS}.tmp")
    staging.write_text(json.dumps([json.loads(b.to_json()) for b in kept], indent=1), encoding="utf-8")
    os.replace(staging, path)  # a reader sees the old list or the new one, never half of it
    log.info("checkpoint epoch %s kept as a backstop (plan %s, before %s)", backstop.epoch,
             backstop.plan_hash[:12], backstop.to_plan[:12])
    return kept


def prune(base: str | Path, live: int, keep_behind: int = KEEP_BEHIND) -> list[int]:
    """Remove epochs older than the ``keep_behind`` ones before ``live``, except backstops."""
    kept = {b.epoch for b in backstops(base)}
    older = [e for e in epochs(base) if e < live]
    doomed = [e for e in older[: max(0, len(older) - keep_behind)] if e not in kept]
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
