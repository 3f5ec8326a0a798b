"""A plan's DataFrames, built from its steps alone (the SQL text is never read), and the names
of the streaming queries that run them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sluice.core.plan.model import KafkaSourceV1, Plan

from sluice_runtime.steps import BuildContext, builder_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def query_name(query_id: str, suffix: str = "") -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", query_id)
    return f"sluice-{base}{suffix}"


def source_topics(plan: Plan) -> list[str]:
    """The topics the plan's sources read."""
    return sorted({s.topic for s in plan.steps if isinstance(s, KafkaSourceV1)})


def build_frames(plan: Plan, ctx: BuildContext) -> dict[str, DataFrame]:
    """Build every step's DataFrame, inputs first (the plan is a DAG)."""
    frames: dict[str, DataFrame] = {}
    visiting: set[str] = set()

    def visit(step_id: str) -> DataFrame:
        if step_id in frames:
            return frames[step_id]
        if step_id in visiting:
            raise ValueError(f"plan has a cycle through step {step_id!r}")
        visiting.add(step_id)
        step = plan.step(step_id)
        inputs = [visit(i) for i in step.inputs]
        frames[step_id] = builder_for(step.type)(step, inputs, ctx)
        visiting.discard(step_id)
        return frames[step_id]

    for step in plan.steps:
        visit(step.id)
    return frames
