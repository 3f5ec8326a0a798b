"""sessionWindowAggregateV1: session-window aggregation (stateful)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import SessionWindowAggregateV1

from sluice_runtime.steps.aggregate import aggregate_columns, key_columns
from sluice_runtime.steps.base import BuildContext, select_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build(step: SessionWindowAggregateV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    from pyspark.sql import functions as F

    del ctx
    s = step.session
    window = F.session_window(F.expr(s.column), s.gap).alias(s.name)
    grouped = inputs[0].groupBy(window, *key_columns(step.keys))
    return select_schema(grouped.agg(*aggregate_columns(step.aggregates)), step)
