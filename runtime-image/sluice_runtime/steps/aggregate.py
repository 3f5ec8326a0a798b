"""aggregateV1: grouped aggregation (stateful)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import AggregateCall, AggregateV1, NamedExpr

from sluice_runtime.steps.base import BuildContext, select_schema

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def key_columns(keys: list[NamedExpr]) -> list[Column]:
    from pyspark.sql import functions as F

    return [F.expr(k.expr).alias(k.name) for k in keys]


def aggregate_columns(aggregates: list[AggregateCall]) -> list[Column]:
    from pyspark.sql import functions as F

    return [F.expr(a.expr).alias(a.name) for a in aggregates]


def build(step: AggregateV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    del ctx
    out = inputs[0].groupBy(*key_columns(step.keys)).agg(*aggregate_columns(step.aggregates))
    return select_schema(out, step)
