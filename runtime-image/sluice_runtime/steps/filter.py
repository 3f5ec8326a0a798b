"""filterV1: keep rows where the condition is true."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import FilterV1

from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build(step: FilterV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    from pyspark.sql import functions as F

    del ctx
    return inputs[0].filter(F.expr(step.condition))
