"""kafkaSinkV1: encode rows as Kafka records (the write itself is done by the pipeline).

Value: ``to_json(struct(*))`` of the step's columns; with ``format: avro``, ``to_avro`` of that
struct with the plan's sink schema behind the Confluent wire header of the id the operator
registered it under (``SLUICE_SINK_SCHEMA_ID``, :mod:`sluice_runtime.avro`). Key: none; the column
cast to string when one key column is declared; a JSON object of the key columns when several are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import KafkaSinkV1

from sluice_runtime import avro
from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def encode(step: KafkaSinkV1, df: DataFrame, schema_id: int | None = None) -> DataFrame:
    """``schema_id``: the id of the sink's Avro schema (``format: avro`` only)."""
    from pyspark.sql import functions as F

    names = [f.name for f in step.schema_] or df.columns
    row = F.struct(*[F.col(f"`{n}`") for n in names])
    if step.format == "avro":
        if step.value_schema is None or schema_id is None:
            raise avro.AvroConfigError(
                f"sink {step.topic}: format avro needs a valueSchema and its schema id")
        value = avro.encode(row, step.value_schema.schema_, schema_id)
    else:
        value = F.to_json(row)
    if not step.key:
        key = F.lit(None).cast("string")
    elif len(step.key) == 1:
        key = F.col(f"`{step.key[0]}`").cast("string")
    else:
        key = F.to_json(F.struct(*[F.col(f"`{k}`") for k in step.key]))
    return df.select(key.alias("key"), value.alias("value"))


def build(step: KafkaSinkV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    """The encoded (key, value) frame; ``pipeline`` starts the streaming write."""
    schema_id = None
    if step.format == "avro":
        subject = step.value_schema.subject if step.value_schema is not None else step.topic
        schema_id = ctx.avro.require_sink_id(subject)
    return encode(step, inputs[0], schema_id)
