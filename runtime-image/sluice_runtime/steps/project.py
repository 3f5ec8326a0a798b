"""projectV1: compute named expressions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import ProjectV1

from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build(step: ProjectV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    from pyspark.sql import functions as F

    del ctx
    return inputs[0].select(*[F.expr(e.expr).alias(e.name) for e in step.expressions])
