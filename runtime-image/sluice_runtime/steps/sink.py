"""kafkaSinkV1: encode rows as Kafka records (the write itself is done by the pipeline).

Value: ``to_json(struct(*))`` of the step's columns; with ``format: avro``, ``to_avro`` of that
struct with the plan's sink schema behind the Confluent wire header of the id the operator
registered it under (``SLUICE_SINK_SCHEMA_ID``, :mod:`sluice_runtime.avro`); with ``format: protobuf``
the pinned message built from it (:mod:`sluice_runtime.protobuf`). Key: none; without a
``keyFormat``, the column cast to string when one key column is declared, a JSON object of the key
columns when several are; else in the key format (:func:`sluice_runtime.keys.encode`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.plan.model import KafkaSinkV1
from sluice.core.spec import REGISTRY_FORMATS

from sluice_runtime import avro, keys, protobuf
from sluice_runtime.steps.base import BuildContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def encode(step: KafkaSinkV1, df: DataFrame, schema_id: int | None = None,
           key_schema_id: int | None = None) -> DataFrame:
    """``schema_id``: the id of the sink's Avro or Protobuf schema (``format: avro``, ``protobuf``);
    ``key_schema_id``:
    of its key's (``keyFormat: avro`` only)."""
    from pyspark.sql import functions as F

    names = [f.name for f in step.schema_] or df.columns
    row = F.struct(*[F.col(f"`{n}`") for n in names])
    if step.format == "avro":
        if step.value_schema is None or schema_id is None:
            raise avro.AvroConfigError(
                f"sink {step.topic}: format avro needs a valueSchema and its schema id")
        value = avro.encode(row, step.value_schema.schema_, schema_id)
    elif step.format == "protobuf":
        if step.value_schema is None or schema_id is None:
            raise protobuf.ProtobufConfigError(
                f"sink {step.topic}: format protobuf needs a valueSchema and its schema id")
        value = protobuf.encode(row, step.value_schema, schema_id)
    else:
        value = F.to_json(row)
    return df.select(keys.encode(step, key_schema_id).alias("key"), value.alias("value"))


def build(step: KafkaSinkV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    """The encoded (key, value) frame; ``pipeline`` starts the streaming write."""
    schema_id = None
    if step.format != "json":
        subject = step.value_schema.subject if step.value_schema is not None else step.topic
        schema_id = ctx.avro.require_sink_id(subject)
    key_schema_id = None
    if step.key_format in REGISTRY_FORMATS:
        key_subject = step.key_schema.subject if step.key_schema is not None else step.topic
        key_schema_id = ctx.avro.require_sink_key_id(key_subject)
    return encode(step, inputs[0], schema_id, key_schema_id)
