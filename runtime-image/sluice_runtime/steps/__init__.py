"""Step builders: one module per plan step type, looked up by the step's ``type``.

A builder is ``build(step, inputs, ctx) -> DataFrame``; ``inputs`` are the frames of the step's
``inputs`` in order. A step type's builder never changes meaning: a new meaning is a new type.
"""

from __future__ import annotations

from sluice_runtime.steps import (
    aggregate,
    deduplicate,
    filter,
    join,
    project,
    session_window_aggregate,
    sink,
    source,
    union,
    watermark,
    window_aggregate,
)
from sluice_runtime.steps.base import BuildContext, Builder

REGISTRY: dict[str, Builder] = {
    "kafkaSourceV1": source.build,
    "watermarkV1": watermark.build,
    "filterV1": filter.build,
    "projectV1": project.build,
    "aggregateV1": aggregate.build,
    "windowAggregateV1": window_aggregate.build,
    "sessionWindowAggregateV1": session_window_aggregate.build,
    "streamStreamJoinV1": join.build,
    "unionV1": union.build,
    "deduplicateV1": deduplicate.build,
    "kafkaSinkV1": sink.build,
}


def builder_for(step_type: str) -> Builder:
    try:
        return REGISTRY[step_type]
    except KeyError:
        raise ValueError(f"this runtime has no implementation of plan step type {step_type!r}") from None


__all__ = ["REGISTRY", "BuildContext", "Builder", "builder_for"]
