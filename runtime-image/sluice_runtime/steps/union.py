"""unionV1: union of inputs with the same columns (by name)."""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from sluice.core.plan.model import UnionV1

from sluice_runtime.steps.base import BuildContext, select_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build(step: UnionV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    del ctx
    aligned = [select_schema(df, step) for df in inputs]
    return reduce(lambda a, b: a.unionByName(b), aligned)
