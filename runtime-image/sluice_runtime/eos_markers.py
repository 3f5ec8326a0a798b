"""The decisions of the task-side exactly-once sink (:mod:`sluice_runtime.eos_tasks`), free of I/O.

A task that writes output partition ``p`` of batch ``B`` commits, in the same Kafka transaction as
its records, a *partition marker*: offset ``B + 1`` on partition 0 of the sink topic for the
consumer group ``<marker group>.p<p>``, with metadata naming the batch's partition count and the
driver run that wrote it. A replayed batch reads the marker of each partition first: a partition
whose marker already says ``B`` (or later) is skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum


class LayoutChanged(RuntimeError):
    """A replayed batch has another number of output partitions than when it was partly written:
    which of its records are already out can no longer be told, so it is not written again."""


@dataclass(frozen=True)
class PartitionMarker:
    """What a partition's marker says: the last batch committed (None: never), the batch's
    partition count and the driver run that committed it."""

    batch: int | None
    partitions: int | None = None
    run: str = ""

    def metadata(self) -> str:
        """The offset metadata the marker is committed with."""
        return json.dumps({"n": self.partitions, "r": self.run}, separators=(",", ":"))

    @classmethod
    def parse(cls, offset: int | None, metadata: str | None) -> PartitionMarker:
        """A marker from a committed offset (negative or None: no commit yet) and its metadata."""
        if offset is None or offset <= 0:
            return cls(None)
        try:
            meta = json.loads(metadata or "{}")
        except ValueError:
            meta = {}
        partitions = meta.get("n") if isinstance(meta, dict) else None
        run = meta.get("r", "") if isinstance(meta, dict) else ""
        return cls(offset - 1, partitions if isinstance(partitions, int) else None, str(run))


class Decision(Enum):
    WRITE = "write"
    SKIP = "skip"


def decide(marker: PartitionMarker, batch: int, partitions: int, partition: int) -> Decision:
    """Whether partition ``partition`` of ``batch`` (computed with ``partitions`` output partitions)
    is written or was already committed. A marker of this very batch written with another partition
    count means the batch's layout changed across a restart: :class:`LayoutChanged`."""
    if marker.batch is None or marker.batch < batch:
        return Decision.WRITE
    if marker.batch == batch and marker.partitions is not None and marker.partitions != partitions:
        raise LayoutChanged(
            f"output partition {partition} of batch {batch} was committed when the batch had "
            f"{marker.partitions} output partitions (driver run {marker.run or '?'}); it now has "
            f"{partitions}: the records of the batch already written can no longer be told apart, "
            "so it is not written again. Run the plan that wrote the batch until it is committed "
            "(the batch's partition count follows the source's partitions, minPartitions and "
            "spec.shufflePartitions)")
    return Decision.SKIP


def marker_group_of(marker_group: str, partition: int) -> str:
    """The consumer group holding output partition ``partition``'s marker."""
    return f"{marker_group}.p{partition}"


def task_transactional_id(base: str, partition: int) -> str:
    """The transactional id of every attempt at output partition ``partition`` (of any batch, of
    any driver run): a newer attempt's ``init_transactions()`` aborts what an older one left open
    and fences it."""
    return f"{base}-p{partition}"


#: the text a task's error carries when the driver run it belongs to was fenced by a newer one
FENCED_TEXT = "SLUICE_DRIVER_FENCED"


def is_fenced_failure(text: str) -> bool:
    """Whether a failed batch's error says its driver run was fenced (a task's FENCED_INSTANCE_ID,
    wrapped by Spark and Py4J)."""
    return FENCED_TEXT in text or "FENCED_INSTANCE_ID" in text


class PartialBatch(RuntimeError):
    """The previous version's tasks committed output of a batch its checkpoint does not record:
    whether every partition of it is out cannot be told, so a hand-off cannot start after it."""


def hand_off_batch(task_batch: int | None, last_commit: int | None) -> int | None:
    """The last batch of a previous version written by tasks whose output is wholly out: its
    checkpoint's last commit (Spark records a batch only after every task of it committed). A batch
    some task committed beyond that one may be partly out: :class:`PartialBatch`."""
    if task_batch is not None and (last_commit is None or task_batch > last_commit):
        raise PartialBatch(
            f"the previous version's tasks committed output of batch {task_batch}, which its "
            f"checkpoint does not record (last commit: {last_commit}): the batch may be partly "
            "written. Let the previous version's driver finish it (scale it up again), then replace")
    return last_commit
