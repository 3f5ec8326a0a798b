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

**On an object store** (``s3a://``, :mod:`sluice_runtime.checkpointstore`) there are no hard links
and no atomic rename of a directory, so an epoch is made differently (docs/runtime.md, "Checkpoints
in an object store"):

1. the holder of term ``n`` **claims** it: it creates ``epochs/<n>/_term`` (its Lease identity and
   the term) with a conditional write (``If-None-Match: *``); when the object exists and names
   another holder, another driver started term ``n``: the start is refused (:class:`TermTaken`).
   The same holder finds its own claim and carries on (a retried start, as ``prepare`` is
   idempotent on a volume);
2. it **copies** the source's objects into ``epochs/<n>/`` (one listing, then server-side copies:
   no byte passes through the driver; :func:`copy_plan` says which), then
3. writes ``epochs/<n>/_ready`` (what it was copied from). Only a ready epoch is ever a source
   (:func:`newest_source`): an epoch whose copy never finished is skipped, and one that a zombie
   writes into after it was pruned never becomes ready again.
"""


from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sluice.core.driverreport import Backstop

from sluice_runtime import checkpointstore as cs

log = logging.getLogger(__name__)

EPOCHS = "epochs"
#: epochs kept behind the live one (a zombie may still write into the previous one)
KEEP_BEHIND = 1
BACKSTOPS = "backstops.json"
#: backstop epochs kept (older ones drop out of the list, then are pruned like any other epoch)
KEEP_BACKSTOPS = 3
#: an epoch's claim on an object store (created with If-None-Match: *) and its completion mark
TERM = "_term"
READY = "_ready"
#: server-side copies in flight while an epoch is made on an object store
COPY_THREADS = 16
#: Spark's metadata logs in a checkpoint (one file per batch id) and how many of their newest
#: entries an epoch on an object store copies (:func:`copy_plan`)
METADATA_LOGS = ("offsets", "commits")
LOG_ENTRIES_COPIED = 3

Location = str | Path


class TermTaken(RuntimeError):
    """Another driver already claimed this term's epoch on the object store."""


@dataclass(frozen=True)
class Made:
    """What making an epoch on an object store did (logged; the integration test measures it)."""

    objects: int
    size: int
    list_seconds: float
    copy_seconds: float


def epoch_dir(base: str | Path, epoch: int) -> Path:
    """An epoch's directory on a volume (:func:`epoch_at` for either kind of store)."""
    return Path(base) / EPOCHS / str(epoch)


def epoch_at(base: Location, epoch: int) -> Location:
    """An epoch's location: a :class:`Path` on a volume, an ``s3a://`` URI on an object store."""
    if cs.is_object_store(base):
        return cs.join(base, EPOCHS, str(epoch))
    return epoch_dir(base, epoch)


# --- pure decisions (object store) ----------------------------------------------------------------

def numbered(names: Iterable[str]) -> list[int]:
    """The epoch numbers among the names under ``epochs/``, ascending."""
    return sorted(int(n) for n in names if n.isdigit())


def newest_source(ready: Iterable[int], epoch: int) -> int | None:
    """The epoch the holder of ``epoch`` copies from: the newest *ready* earlier one."""
    earlier = [e for e in ready if e < epoch]
    return max(earlier) if earlier else None


def copy_plan(keys: Iterable[str], from_base: bool, log_entries: int | None = None) -> list[str]:
    """Which objects of a source checkpoint (keys relative to it) make the new epoch.

    Everything Spark wrote (``metadata``, ``offsets/``, ``commits/``, ``sources/``, ``state/``,
    the dead-letter queries' ``dlq/``) and the plan's signature (``sluice/``); not the source
    epoch's own claim and completion marks, not a half-written ``*.tmp`` of a rename-based file
    manager, and, from a checkpoint at the base, neither the other epochs nor ``backstops.json``.

    Of each metadata log (``offsets/``, ``commits/``, the main query's and each dead-letter
    query's) only the newest ``log_entries`` batches (:data:`LOG_ENTRIES_COPIED` by default):
    a restart reads the latest offsets, the one before and the latest commit, and Spark keeps up
    to ``minBatchesToRetain`` (100) entries that nothing reads again; copying those made a
    takeover's epoch cost a server-side copy per batch of history (293 objects, 2.6 s, for a
    stateless query with one dead-letter query)."""
    keep = LOG_ENTRIES_COPIED if log_entries is None else log_entries
    out: list[str] = []
    logs: dict[str, list[tuple[int, str]]] = {}
    for key in keys:
        top = key.split("/", 1)[0]
        if key in (TERM, READY) or key.rpartition("/")[2].endswith(".tmp"):
            continue
        if from_base and (top == EPOCHS or key == BACKSTOPS):
            continue
        parent, _, name = key.rpartition("/")
        if parent.rpartition("/")[2] in METADATA_LOGS and name.isdigit():
            logs.setdefault(parent, []).append((int(name), key))
            continue
        out.append(key)
    for entries in logs.values():
        out += [key for _, key in sorted(entries)[-keep:]]
    return sorted(out)


def doomed(numbers: Iterable[int], live: int, kept: Iterable[int],
           keep_behind: int = KEEP_BEHIND) -> list[int]:
    """The epochs to prune: older than the ``keep_behind`` ones before ``live``, except ``kept``
    (backstops). The one just behind stays: a zombie may still write into it (nobody reads it)."""
    keep = set(kept)
    older = [e for e in sorted(numbers) if e < live]
    return [e for e in older[: max(0, len(older) - keep_behind)] if e not in keep]


def term_record(epoch: int, holder: str, time_text: str) -> bytes:
    return json.dumps({"epoch": epoch, "holder": holder, "time": time_text}, sort_keys=True).encode()


def term_holder(data: bytes | None) -> str | None:
    """The holder named in a ``_term`` object (None when unreadable)."""
    try:
        value = json.loads(data or b"")
    except ValueError:
        return None
    return str(value.get("holder") or "") if isinstance(value, dict) else None


# --- epochs ---------------------------------------------------------------------------------------

def epochs(base: Location) -> list[int]:
    if cs.is_object_store(base):
        return numbered(cs.store_for(base).names(cs.join(base, EPOCHS)))
    root = Path(base) / EPOCHS
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and p.is_dir())


def ready(base: Location, epoch: int) -> bool:
    """Whether an epoch exists (and, on an object store, its copy was finished)."""
    if cs.is_object_store(base):
        return cs.store_for(base).exists(cs.join(base, EPOCHS, str(epoch), READY))
    return epoch_dir(base, epoch).is_dir()


def source_of(base: Location, epoch: int) -> Location | None:
    """The checkpoint the holder of ``epoch`` starts from: the newest earlier epoch, else a
    checkpoint at the base, else none (a new query).

    The checkpoint at the base is not a compatibility path: a driver without election (``sluice
    run``) still writes its checkpoint there today, and without this the first elected holder on
    that base would start an empty epoch and re-read the sources as the plan says (its output
    again, or a gap)."""
    if cs.is_object_store(base):
        store = cs.store_for(base)
        found = newest_source([e for e in epochs(base) if e < epoch and ready(base, e)], epoch)
        if found is not None:
            return epoch_at(base, found)
        return str(base).rstrip("/") if store.exists(cs.join(base, "metadata")) else None
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


def epoch_of(path: Location, base: Location) -> int | None:
    """The number of an epoch directory of ``base`` (None for anything else, e.g. the base)."""
    if cs.is_object_store(base):
        text = str(path).rstrip("/")
        number = cs.name(text)
        inside = cs.parent(text) == cs.join(base, EPOCHS)
        return int(number) if inside and number.isdigit() else None
    path = Path(path)
    if path.parent != Path(base) / EPOCHS or not path.name.isdigit():
        return None
    return int(path.name)


def prepare(base: Location, epoch: int, source: Location | None = None, holder: str = "",
            time_text: str = "") -> tuple[Location, Location | None]:
    """Make ``epochs/<epoch>`` (idempotent); returns (it, the source it was linked from).

    ``source``: link from this checkpoint instead of the newest earlier epoch (a restore).
    ``holder``: the Lease identity claiming the term (object store: :class:`TermTaken` when
    another holder claimed it)."""
    if cs.is_object_store(base):
        remote, made_from, _ = prepare_object_store(base, epoch, source, holder, time_text)
        return remote, made_from
    found = source if source is not None else source_of(base, epoch)
    linked_from = Path(found) if found is not None else None
    target = epoch_dir(base, epoch)
    if target.is_dir():
        return target, linked_from
    started = time.monotonic()
    staging = Path(base) / EPOCHS / f".{epoch}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    files = _link_tree(linked_from, staging, skip={EPOCHS}) if linked_from is not None else 0
    staging.rename(target)
    log.info("checkpoint epoch %s: %s files linked from %s in %.3fs", epoch, files, linked_from,
             time.monotonic() - started)
    return target, linked_from


def prepare_object_store(base: Location, epoch: int, source: Location | None = None, holder: str = "",
                         time_text: str = "") -> tuple[str, str | None, Made | None]:
    """:func:`prepare` on an object store: claim the term, copy the source, mark the epoch ready
    (see the module's docstring). Returns (the epoch, its source, what the copy did: None when
    the epoch was ready already)."""
    store = cs.store_for(base)
    target = cs.join(base, EPOCHS, str(epoch))
    claim = cs.join(target, TERM)
    if not store.create_if_absent(claim, term_record(epoch, holder, time_text)):
        claimed_by = term_holder(store.read(claim))
        if not holder or claimed_by != holder:
            raise TermTaken(f"checkpoint epoch {epoch} was claimed by {claimed_by or 'another driver'!r} "
                            f"(this driver: {holder or 'unnamed'!r}): term {epoch} is lost")
        marked = store.read(cs.join(target, READY))
        if marked is not None:
            recorded = json.loads(marked).get("source")
            return target, (str(recorded) if recorded else None), None
        log.info("checkpoint epoch %s: claimed by this driver before; copying again", epoch)
    from_source = str(source) if source is not None else source_of(base, epoch)
    made = _copy_objects(store, str(from_source), target, from_base=from_source == str(base).rstrip("/")) \
        if from_source is not None else Made(0, 0, 0.0, 0.0)
    store.write(cs.join(target, READY), json.dumps({
        "source": from_source, "objects": made.objects, "bytes": made.size}, sort_keys=True).encode())
    log.info("checkpoint epoch %s: %s objects (%s bytes) copied from %s: listed in %.3fs, copied in %.3fs",
             epoch, made.objects, made.size, from_source, made.list_seconds, made.copy_seconds)
    return target, (str(from_source) if from_source is not None else None), made


def _copy_objects(store: cs.CheckpointStore, source: str, target: str, from_base: bool) -> Made:
    started = time.monotonic()
    entries = {e.key: e for e in store.listing(source)}
    keys = copy_plan(sorted(entries), from_base)
    listed = time.monotonic()

    def one(key: str) -> int:
        # gone since the listing: Spark purging old log entries or state files (a former holder's
        # queries may still run); the copy skips it, as the hard links do
        size = entries[key].size
        return size if store.copy(cs.join(source, key), cs.join(target, key), size=size) else -1

    with ThreadPoolExecutor(max_workers=COPY_THREADS, thread_name_prefix="epoch-copy") as pool:
        sizes = [size for size in pool.map(one, keys) if size >= 0]
    return Made(len(sizes), sum(sizes), listed - started, time.monotonic() - listed)


def backstops(base: Location) -> list[Backstop]:
    """The kept backstop epochs, oldest first."""
    try:
        data = json.loads(cs.store_for(base).read(cs.join(base, BACKSTOPS)) or b"")
    except (OSError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    kept = [Backstop.from_json(json.dumps(item)) for item in data if isinstance(item, dict)]
    return [b for b in kept if b is not None]


def keep_backstop(base: Location, backstop: Backstop, keep: int = KEEP_BACKSTOPS) -> list[Backstop]:
    """Add ``backstop`` to the kept ones (an epoch listed again moves to the end), keep the newest
    ``keep``; returns the list written."""
    kept = [b for b in backstops(base) if b.epoch != backstop.epoch] + [backstop]
    kept = kept[-keep:]
    # a reader sees the old list or the new one, never half of it (a rename on a volume, one PUT
    # on an object store)
    cs.store_for(base).write(cs.join(base, BACKSTOPS),
                             json.dumps([json.loads(b.to_json()) for b in kept], indent=1).encode())
    log.info("checkpoint epoch %s kept as a backstop (plan %s, before %s)", backstop.epoch,
             backstop.plan_hash[:12], backstop.to_plan[:12])
    return kept


def prune(base: Location, live: int, keep_behind: int = KEEP_BEHIND) -> list[int]:
    """Remove epochs older than the ``keep_behind`` ones before ``live``, except backstops."""
    gone = doomed(epochs(base), live, (b.epoch for b in backstops(base)), keep_behind)
    for e in gone:
        if cs.is_object_store(base):
            cs.store_for(base).delete_prefix(cs.join(base, EPOCHS, str(e)))
        else:
            shutil.rmtree(epoch_dir(base, e), ignore_errors=True)
    return gone


def last_commit_time(checkpoint: Location) -> tuple[int, float] | None:
    """(batch id, modification time) of the newest ``commits/N`` (an object store's times are
    its objects' ``Last-Modified``: whole seconds on some stores)."""
    from sluice_runtime.drain import last_commit

    batch = last_commit(checkpoint)
    if batch is None:
        return None
    mtime = cs.store_for(checkpoint).mtime(cs.join(checkpoint, "commits", str(batch)))
    return None if mtime is None else (batch, mtime)
