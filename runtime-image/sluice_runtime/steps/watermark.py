"""watermarkV1: event-time watermark on a column."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import WatermarkV1

from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build(step: WatermarkV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    del ctx
    return inputs[0].withWatermark(step.column, step.delay)
