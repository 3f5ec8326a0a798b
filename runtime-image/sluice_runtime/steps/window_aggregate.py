"""windowAggregateV1: tumbling or sliding event-time window aggregation (stateful)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import WindowAggregateV1

from sluice_runtime.steps.aggregate import aggregate_columns, key_columns
from sluice_runtime.steps.base import BuildContext, select_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build(step: WindowAggregateV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    from pyspark.sql import functions as F

    del ctx
    w = step.window
    if w.slide:
        window = F.window(F.expr(w.column), w.size, w.slide)
    else:
        window = F.window(F.expr(w.column), w.size)
    grouped = inputs[0].groupBy(window.alias(w.name), *key_columns(step.keys))
    return select_schema(grouped.agg(*aggregate_columns(step.aggregates)), step)
