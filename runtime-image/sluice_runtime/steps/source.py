"""kafkaSourceV1: read a topic, parse the JSON value against the declared columns, or decode the
Avro value (Confluent wire format) with the pinned reader schema (``format: avro``, see
:mod:`sluice_runtime.avro`), or the Protobuf value with the pinned descriptor (``format: protobuf``,
:mod:`sluice_runtime.protobuf`).

Malformed records (value not JSON, not an object, or a field of the wrong type; for Avro: null, not
in the wire format, or not decodable) are tagged and handled by the step's policy (see
``sluice_runtime.malformed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sluice.core.plan.model import FieldSpec, KafkaSourceV1, Plan, RegistrySchema
from sluice.core.versions import default_dead_letter_topic

from sluice_runtime import avro, keys, malformed, protobuf
from sluice_runtime.config import start_from_options
from sluice_runtime.steps.base import BuildContext, DeadLetterRoute

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def starting_options(step: KafkaSourceV1, ctx: BuildContext) -> dict[str, str]:
    """Where the source starts on an empty checkpoint (Spark ignores these options on one with
    offsets): a warm-up's own offsets (``latest`` for a topic it has none for); else a replaced
    version's hand-off offsets for the topic; else the backfill's start (``start_from``); else the
    plan's ``startingOffsets``."""
    if ctx.warm_offsets is not None:
        return {"startingOffsets": ctx.warm_offsets.get(step.topic, "latest")}
    handed = (ctx.start_offsets or {}).get(step.topic)
    if handed is not None:
        return {"startingOffsets": handed}
    if ctx.start_from is not None:
        return start_from_options(ctx.start_from)
    return {"startingOffsets": step.starting_offsets}


def fail_on_data_loss(step: KafkaSourceV1) -> str:
    """Spark's ``failOnDataLoss`` of a source: ``true`` for ``onDataLoss: fail``; ``false`` for
    ``skip`` and for a plan compiled before the field existed (which always ran with ``false``)."""
    return "true" if step.on_data_loss == "fail" else "false"


def skipping_sources(plan: Plan) -> dict[str, str]:
    """Topic -> source name of the plan's sources that go on past lost offsets (``skip``, or a plan
    compiled before ``onDataLoss`` existed): those whose skipped offsets the driver counts."""
    return {s.topic: s.source for s in plan.steps
            if isinstance(s, KafkaSourceV1) and fail_on_data_loss(s) == "false"}


def read_kafka(step: KafkaSourceV1, ctx: BuildContext) -> DataFrame:
    reader = ctx.spark.readStream.format("kafka").options(**ctx.source_options())
    reader = reader.option("subscribe", step.topic).options(**starting_options(step, ctx))
    reader = reader.option("failOnDataLoss", fail_on_data_loss(step))
    if step.isolation_level is not None:  # a plan compiled before the field: Kafka's read_uncommitted
        reader = reader.option("kafka.isolation.level", step.isolation_level)
    if step.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(step.max_offsets_per_trigger))
    if step.min_partitions is not None:
        reader = reader.option("minPartitions", str(step.min_partitions))
    return reader.load()


def tag_avro(raw: DataFrame, schema: RegistrySchema, writers: Mapping[int, str]) -> DataFrame:
    """Kafka records tagged as :func:`sluice_runtime.malformed.parse` tags JSON ones: the decoded
    struct in ``PARSED``, and ``MALFORMED``. A record with a schema id not in ``writers`` fails the
    batch (:func:`sluice_runtime.avro.unknown_id_error`)."""
    from pyspark.sql import functions as F

    df = avro.wire_columns(raw).withColumn(malformed.PARSED, avro.decode(writers, schema.schema_))
    unknown = F.col(avro.WIRE_OK) & ~F.col(avro.SCHEMA_ID).isin(sorted(writers))
    bad = (~F.col(avro.WIRE_OK) | F.col(malformed.PARSED).isNull()
           | F.col(f"{malformed.PARSED}.`{avro.decoded_field(schema.schema_)}`").isNull())
    failed = avro.unknown_id_error(schema.subject, writers)
    return df.withColumn(malformed.MALFORMED, F.when(unknown, failed).otherwise(bad))


def tag_protobuf(raw: DataFrame, schema: RegistrySchema,
                 columns: list[FieldSpec]) -> tuple[DataFrame, Column]:
    """Kafka records tagged as :func:`tag_avro` tags them, decoded with the pinned descriptor
    (:func:`sluice_runtime.protobuf.decode`), and a malformed record's reason."""
    from pyspark.sql import functions as F

    df = raw.withColumn(protobuf.DECODED, protobuf.decode(schema, columns))
    df = df.withColumn(malformed.PARSED, F.col(f"{protobuf.DECODED}.value"))
    return (df.withColumn(malformed.MALFORMED, ~F.col(f"{protobuf.DECODED}.ok")),
            F.col(f"{protobuf.DECODED}.reason"))


def tag(step: KafkaSourceV1, raw: DataFrame, ctx: BuildContext) -> tuple[DataFrame, Column | None]:
    """The records tagged by their format (``_sluice_parsed``, ``_sluice_malformed``), and a
    malformed record's own reason when the format gives one (Avro); with a key read
    (``keyFormat``), the key too (:mod:`sluice_runtime.keys`): a key that does not decode makes the
    record malformed, with the key's reason."""
    tagged, reason = _tag_value(step, raw, ctx)
    if step.key_format is None:
        return tagged, reason
    from pyspark.sql import functions as F

    tagged, key_reason = keys.tag(step, tagged, ctx)
    bad_key = F.col(keys.KEY_BAD)
    value_reason = reason if reason is not None else F.lit(malformed.error_text(step.columns))
    return (tagged.withColumn(malformed.MALFORMED, F.col(malformed.MALFORMED) | bad_key),
            F.when(bad_key, key_reason).otherwise(value_reason))


def _tag_value(step: KafkaSourceV1, raw: DataFrame, ctx: BuildContext) -> tuple[DataFrame, Column | None]:
    if step.format == "avro":
        if step.value_schema is None:
            raise avro.AvroConfigError(f"source {step.source}: format avro without a valueSchema in the plan")
        tagged = tag_avro(raw, step.value_schema, ctx.avro.writer_schemas(step.value_schema))
        return tagged, avro.reason(step.value_schema.subject, step.value_schema)
    if step.format == "protobuf":
        if step.value_schema is None:
            raise protobuf.ProtobufConfigError(
                f"source {step.source}: format protobuf without a valueSchema in the plan")
        return tag_protobuf(raw, step.value_schema, step.columns)
    return malformed.parse(raw, step.columns), None


def build(step: KafkaSourceV1, inputs: list[DataFrame], ctx: BuildContext) -> DataFrame:
    del inputs
    if step.id in ctx.tagged:  # a micro-batch's records, read once
        tagged, reason = ctx.tagged[step.id]
    else:
        tagged, reason = tag(step, read_kafka(step, ctx), ctx)
        ctx.tagged[step.id] = (tagged, reason)
    policy = step.malformed.policy
    if policy == "deadLetter":
        topic = step.malformed.topic or default_dead_letter_topic(ctx.plan.sink.topic)
        frame = malformed.dead_letter_frame(tagged, step.columns, reason)
        ctx.dead_letters.append(DeadLetterRoute(source_id=step.id, frame=frame, topic=topic))
    good = malformed.apply_policy(tagged, policy, step.id, ctx, reason)
    declared = {c.name: c.type for c in step.columns}
    key_names = keys.fields_by_sql_name(step)
    cols = []
    for f in step.schema_:
        if f.name in key_names:
            cols.append(keys.column(step, good, f.name))
        elif f.name in declared:
            value = good[f"{malformed.PARSED}.`{f.name}`"]
            if step.format != "json":  # the plan's type: the decoder's own for what the compiler maps
                value = value.cast(declared[f.name])
            cols.append(value.alias(f.name))
        else:  # Kafka metadata columns (key, topic, partition, offset, timestamp)
            cols.append(good[f"`{f.name}`"].alias(f.name))
    return good.select(*cols)
