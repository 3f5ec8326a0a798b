"""The first term of a replaced plan version: start where the previous version's output ends.

A replace with hand-off (:mod:`sluice.core.replace`) starts plan version N+1 on a new, empty
checkpoint. Its first holder, before any query starts:

1. fences the previous version's transactional id (``init_transactions`` bumps the producer epoch
   and aborts a transaction left open): a paused driver of version N can commit nothing more;
2. reads the batch version N's output ends with: its exactly-once commit marker (now final), or
   its checkpoint's last commit;
3. reads that batch's end offsets from version N's newest checkpoint epoch (``offsets/<batch>``)
   and starts every source of the new plan there. A topic version N did not read starts as the
   plan says (``startingOffsets``), and is logged.

Version N's checkpoint is only read, never written: a rollback resumes it as it was.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sluice.core.plan.model import Plan
from sluice.core.replace import (
    PreviousVersion,
    last_output_batch,
    merged_offsets,
    parse_offsets_log,
    starting_offsets,
)

from sluice_runtime import checkpointstore as cs
from sluice_runtime import epochs
from sluice_runtime.drain import last_commit
from sluice_runtime.eos_markers import PartialBatch, hand_off_batch
from sluice_runtime.eos_tasks import fence_and_read_last_batch, fence_group
from sluice_runtime.frames import source_topics
from sluice_runtime.kafka_security import KafkaSecurity, librdkafka_config
from sluice_runtime.sink_exactly_once import TransactionalSink

log = logging.getLogger(__name__)


class HandOffError(RuntimeError):
    """The previous version's checkpoint cannot say where to start."""


@dataclass
class HandOffStart:
    """Where the new version's sources start."""

    checkpoint: str | Path | None  # the previous version's newest epoch (None: it never ran)
    batch: int | None  # the last batch of the previous version with output
    offsets: dict[str, str] = field(default_factory=dict)  # topic -> startingOffsets JSON
    missing: list[str] = field(default_factory=list)  # topics that start as the plan says


def newest_checkpoint(base: str | Path) -> str | Path | None:
    """The previous version's live checkpoint: its newest epoch (on an object store: its newest
    ready one), else a checkpoint at the base."""
    if cs.is_object_store(base):
        return epochs.source_of(base, sys.maxsize)
    numbers = epochs.epochs(base)
    if numbers:
        return epochs.epoch_dir(base, numbers[-1])
    return Path(base) if (Path(base) / "metadata").is_file() else None


def fence_and_read_marker(previous: PreviousVersion, checkpoint: str | Path, bootstrap: str,
                          security: KafkaSecurity, writers: str = "driver") -> int | None:
    """Fence the previous version's transactional id, then read its commit marker (offset): what
    a restarted driver of that version does, with its own exactly-once sink. ``writers="tasks"``:
    the previous version's tasks wrote its output (:mod:`sluice_runtime.eos_tasks`): its fence
    group is joined instead, and the marker is its checkpoint's last commit, refused when a task
    committed a later batch (:func:`sluice_runtime.eos_markers.hand_off_batch`)."""
    if writers == "tasks":
        group = fence_group("", previous.consumer_group)
        task_batch = fence_and_read_last_batch(librdkafka_config(bootstrap, security), group,
                                               previous.sink_topic)
        log.info("replace: fenced the previous version's tasks (%s); their last batch %s", group, task_batch)
        try:
            batch = hand_off_batch(task_batch, last_commit(checkpoint))
        except PartialBatch as exc:
            raise HandOffError(f"version {previous.version}: {exc}") from exc
        return None if batch is None else batch + 1
    sink = TransactionalSink(bootstrap=bootstrap, topic=previous.sink_topic, query_id="",
                             checkpoint=str(checkpoint), security=security,
                             transactional_id=previous.transactional_id,
                             consumer_group=previous.consumer_group)
    try:
        last = sink.fence()
        log.info("replace: fenced the previous version's transactional id %s", previous.transactional_id)
        return None if last is None else last + 1
    finally:
        sink.close()


def hand_off_start(previous: PreviousVersion, plan: Plan, bootstrap: str,
                   security: KafkaSecurity, writers: str = "driver") -> HandOffStart:
    """Where the new version starts (fences the previous version's producer first)."""
    checkpoint = newest_checkpoint(previous.checkpoint)
    if checkpoint is None:
        log.warning("replace: version %s left no checkpoint under %s; sources start as the plan says",
                    previous.version, previous.checkpoint)
        return HandOffStart(None, None, missing=source_topics(plan))
    marker = None
    if previous.exactly_once:
        marker = fence_and_read_marker(previous, checkpoint, bootstrap, security, writers)
    batch = last_output_batch(exactly_once=previous.exactly_once, marker=marker,
                              last_commit=last_commit(checkpoint))
    if batch is None:
        log.warning("replace: version %s committed no batch; sources start as the plan says",
                    previous.version)
        return HandOffStart(checkpoint, None, missing=source_topics(plan))
    log_file = cs.join(checkpoint, "offsets", str(batch))
    try:
        data = cs.store_for(checkpoint).read(log_file)
        if data is None:
            raise FileNotFoundError(f"{log_file} does not exist")
        committed = merged_offsets(parse_offsets_log(data.decode("utf-8")))
    except (OSError, ValueError) as exc:
        raise HandOffError(f"version {previous.version}: cannot read {log_file}: {exc}") from exc
    offsets, missing = starting_offsets(source_topics(plan), committed)
    log.info("replace: version %s ends with batch %s; starting at %s%s", previous.version, batch, offsets,
             f" ({', '.join(missing)} as the plan says)" if missing else "")
    return HandOffStart(checkpoint, batch, offsets, missing)
