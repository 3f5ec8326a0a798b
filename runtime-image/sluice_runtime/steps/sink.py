"""kafkaSinkV1: encode rows as JSON Kafka records (the write itself is done by the pipeline).

Value: ``to_json(struct(*))`` of the step's columns. Key: none; the column cast to string when
one key column is declared; a JSON object of the key columns when several are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import KafkaSinkV1

from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def encode(step: KafkaSinkV1, df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    names = [f.name for f in step.schema_] or df.columns
    value = F.to_json(F.struct(*[F.col(f"`{n}`") for n in names]))
    if not step.key:
        key = F.lit(None).cast("string")
    elif len(step.key) == 1:
        key = F.col(f"`{step.key[0]}`").cast("string")
    else:
        key = F.to_json(F.struct(*[F.col(f"`{k}`") for k in step.key]))
    return df.select(key.alias("key"), value.alias("value"))


def build(step: KafkaSinkV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    """The encoded (key, value) frame; ``pipeline`` starts the streaming write."""
    del ctx
    return encode(step, inputs[0])
