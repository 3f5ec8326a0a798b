"""deduplicateV1: drop rows whose columns repeat an earlier row (stateful; bounded by a watermark
when the input has one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import DeduplicateV1

from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def build(step: DeduplicateV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    del ctx
    return inputs[0].dropDuplicates(step.columns)
