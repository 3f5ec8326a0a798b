"""What the main query runs and writes: the plan's output rows and, for each source whose malformed
policy is ``deadLetter``, its dead letters **with the batch that read them** (every row naming its
topic, :func:`sluice_runtime.malformed.with_dead_letters`), so one query, one checkpoint and one
trigger cover both, and an exactly-once sink writes the dead letters in the batch's transactions.

* A plan of one source without a stateful step (:func:`one_read_source`): the streaming query
  reads and parses the source (its records tagged, the malformed ones counted); each micro-batch
  is persisted and the plan's steps are built over it as a batch (:func:`build_read_once`): the
  output rows and the dead letters come from **one read and one parse**.
* Any other plan: the streaming frame is the union of the encoded output rows and the dead
  letters. Each branch scans the batch's offset range of the source (Spark reuses no scan across
  branches), so a dead-letter source is read twice per batch, in the same batch; Spark sums both
  scans into the source's ``numInputRows``, which :func:`source_scans` and
  :class:`sluice_runtime.progress.ProgressTail` correct.

The driver's pipeline (:mod:`sluice_runtime.pipeline`) and a standby's warm-up on the plan
(:mod:`sluice_runtime.warmup`) both run what :func:`main_output` gives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.core.plan.model import KafkaSourceV1, Plan

from sluice_runtime import malformed
from sluice_runtime.frames import build_frames
from sluice_runtime.steps.base import BuildContext, DeadLetterRoute

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: step types that keep no state from one micro-batch to the next
STATELESS_STEPS = frozenset({"kafkaSourceV1", "watermarkV1", "filterV1", "projectV1", "unionV1",
                             "kafkaSinkV1"})

#: what a batch is written with: the encoded frame and, when known, how many partitions its output
#: rows have (the tasks' writer partitions; the frame's own otherwise)
SinkWrite = Callable[["DataFrame", "int | None"], Any]


def source_scans(plan: Plan, routes: list[DeadLetterRoute]) -> dict[str, int]:
    """Topic -> scans per batch of a main query whose frame is the union of the output rows and
    the dead letters of ``routes``: one for every source, one more for each of its routes."""
    ids = {r.source_id for r in routes}
    return {s.topic: 1 + (s.id in ids) for s in plan.steps if isinstance(s, KafkaSourceV1)}


def one_read_source(plan: Plan) -> KafkaSourceV1 | None:
    """The source whose micro-batches are read and parsed once for both outputs: the plan's only
    source, when its malformed records go to a dead-letter topic and no step keeps state (a
    stateful step's state lives in the streaming query, so its input must stay in there: such a
    plan gets its dead letters from a second branch of the streaming query, which scans the source
    again)."""
    sources = [s for s in plan.steps if isinstance(s, KafkaSourceV1)]
    if len(sources) != 1 or sources[0].malformed.policy != "deadLetter":
        return None
    if any(s.type not in STATELESS_STEPS for s in plan.steps):
        return None
    return sources[0]


def build_read_once(plan: Plan, ctx: BuildContext, source_id: str, frame: DataFrame,
                    reason: Any) -> tuple[DataFrame, int]:
    """A micro-batch of :func:`one_read_source`'s records, tagged by the streaming query (and
    persisted by the caller), built into what the sink writes: the plan's steps over it as a
    batch, the output rows and their dead letters; and how many partitions the output rows have."""
    batch_ctx = dataclasses.replace(ctx, tagged={source_id: (frame, reason)}, dead_letters=[],
                                    observations={}, observe=False)
    frames = build_frames(plan, batch_ctx)
    out = frames[plan.sink.id]
    routed = malformed.with_dead_letters(out, plan.sink.topic, batch_ctx.dead_letters)
    return routed, out.rdd.getNumPartitions()


@dataclass
class MainOutput:
    """The main query's streaming frame, how each of its micro-batches is written, and how many
    times it scans each source per batch."""

    plan: Plan
    ctx: BuildContext
    frame: DataFrame
    scans: dict[str, int]
    #: (source id, malformed reason) when each batch is built from one read (:func:`one_read_source`)
    read_once: tuple[str, Any] | None = None

    def write(self, frame: DataFrame, sink: SinkWrite) -> Any:
        """Write one micro-batch of :attr:`frame` with ``sink``."""
        if self.read_once is None:
            return sink(frame, None)
        frame.persist()
        try:
            source_id, reason = self.read_once
            built, partitions = build_read_once(self.plan, self.ctx, source_id, frame, reason)
            return sink(built, partitions)
        finally:
            frame.unpersist()


def main_output(plan: Plan, ctx: BuildContext, frames: dict[str, DataFrame],
                routes: list[DeadLetterRoute]) -> MainOutput:
    """What the main query of ``plan`` (built in ``ctx`` into ``frames``) runs, with the dead
    letters of ``routes`` (none: a checkpoint whose dead letters keep queries of their own)."""
    sink = plan.sink
    once = one_read_source(plan) if routes else None
    if once is not None:
        tagged, reason = ctx.tagged[once.id]
        return MainOutput(plan, ctx, malformed.observe(tagged, once.id, None), source_scans(plan, []),
                          read_once=(once.id, reason))
    if routes:
        frame = malformed.with_dead_letters(frames[sink.id], sink.topic, routes)
        return MainOutput(plan, ctx, frame, source_scans(plan, routes))
    return MainOutput(plan, ctx, frames[sink.id], source_scans(plan, []))
