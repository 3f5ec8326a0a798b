"""Malformed-record handling for ``kafkaSourceV1``.

A record is malformed when its value is null, is not JSON, is not a JSON object, or has a field
whose value does not convert to the declared type (``from_json`` in PERMISSIVE mode fills the
corrupt-record column in all these cases). An Avro source tags its records the same way
(:func:`sluice_runtime.steps.source.tag_avro`) and gives each malformed record its own reason (an
expression evaluated for malformed records only): null, not in the Confluent wire format, or not
decodable with its writer schema.

Policies:

* ``deadLetter`` (default): the record's raw key and value bytes go unchanged to a dead-letter
  topic (default ``<sink topic>.dlq``) with headers ``sluice.error``, ``sluice.source.topic``,
  ``sluice.source.partition``, ``sluice.source.offset``; the query goes on.
* ``skip``: the record is dropped and counted (``sluice_malformed_records_total``).
* ``fail``: the query fails with an error naming topic, partition and offset.

In every policy the count of malformed records of each batch is reported through Spark's
``observe()`` (metric name ``malformed-<source id>``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from sluice.core.plan.model import FieldSpec

    from sluice_runtime.steps.base import BuildContext, DeadLetterRoute

PARSED = "_sluice_parsed"
MALFORMED = "_sluice_malformed"
CORRUPT = "_sluice_corrupt"
OBSERVATION_PREFIX = "malformed-"


def observation_name(source_id: str) -> str:
    return f"{OBSERVATION_PREFIX}{source_id}"


def schema_ddl(columns: list[FieldSpec]) -> str:
    return ", ".join(f"`{c.name}` {c.type}" for c in columns)


def error_text(columns: list[FieldSpec]) -> str:
    return f"record value is not a JSON object matching the declared columns ({schema_ddl(columns)})"


def parse(raw: DataFrame, columns: list[FieldSpec]) -> DataFrame:
    """Add ``_sluice_parsed`` (struct of declared columns) and ``_sluice_malformed`` (boolean)."""
    from pyspark.sql import functions as F

    ddl = schema_ddl(columns) + f", `{CORRUPT}` string"
    parsed = F.from_json(
        F.col("value").cast("string"),
        ddl,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT},
    )
    df = raw.withColumn(PARSED, parsed)
    bad = F.col("value").isNull() | F.col(PARSED).isNull() | F.col(f"{PARSED}.{CORRUPT}").isNotNull()
    return df.withColumn(MALFORMED, bad)


def observe(tagged: DataFrame, source_id: str, ctx: BuildContext | None) -> DataFrame:
    """``tagged`` observing its malformed count per batch (``malformed-<source id>``)."""
    from pyspark.sql import functions as F

    name = observation_name(source_id)
    if ctx is not None:
        ctx.observations[source_id] = name
    return tagged.observe(name, F.sum(F.col(MALFORMED).cast("long")).alias("malformed"))


def apply_policy(tagged: DataFrame, policy: str, source_id: str, ctx: BuildContext | None,
                 reason: Column | None = None) -> DataFrame:
    """Count malformed records and keep only the good ones (or fail on the first bad one, with
    ``reason`` when the format gives one)."""
    from pyspark.sql import functions as F

    observed = tagged if ctx is not None and not ctx.observe else observe(tagged, source_id, ctx)
    if policy == "fail":
        default = F.lit("record value does not parse against the declared columns")
        why = reason if reason is not None else default
        message = F.concat(
            F.lit("malformed record in topic "),
            F.col("topic"),
            F.lit(" partition "),
            F.col("partition").cast("string"),
            F.lit(" offset "),
            F.col("offset").cast("string"),
            F.lit(" (policy fail): "),
            why,
        )
        checked = observed.withColumn(
            MALFORMED, F.when(F.col(MALFORMED), F.raise_error(message)).otherwise(F.lit(False))
        )
        return checked.filter(~F.col(MALFORMED))
    return observed.filter(~F.col(MALFORMED))


def dead_letter_frame(tagged: DataFrame, columns: list[FieldSpec] | None = None,
                      reason: Column | None = None) -> DataFrame:
    """The records to send to the dead-letter topic: raw bytes plus error (``reason`` when the
    format gives one) and origin headers."""
    from pyspark.sql import functions as F

    err = error_text(columns) if columns else "record value does not parse against the declared columns"
    why = reason if reason is not None else F.lit(err)
    headers = F.array(
        F.struct(F.lit("sluice.error").alias("key"), why.cast("binary").alias("value")),
        F.struct(F.lit("sluice.source.topic").alias("key"), F.col("topic").cast("binary").alias("value")),
        F.struct(
            F.lit("sluice.source.partition").alias("key"),
            F.col("partition").cast("string").cast("binary").alias("value"),
        ),
        F.struct(
            F.lit("sluice.source.offset").alias("key"),
            F.col("offset").cast("string").cast("binary").alias("value"),
        ),
    )
    return tagged.filter(F.col(MALFORMED)).select("key", "value", headers.alias("headers"))


#: Spark's Kafka sink's ``headers`` column: a dead letter's
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def with_dead_letters(encoded: DataFrame, topic: str, routes: list[DeadLetterRoute]) -> DataFrame:
    """The main query's frame with the batch's dead letters: the encoded output rows (to
    ``topic``, without headers) and each route's dead letters (to its topic, with their headers),
    as (key, value, topic, headers) rows: Spark's Kafka sink takes each row's topic from the row,
    and so do the exactly-once sinks (:func:`sluice_runtime.sink_exactly_once.out_record`)."""
    from pyspark.sql import functions as F

    def routed(frame: DataFrame, to: str, headers: Any) -> DataFrame:
        return frame.select(F.col("key").cast("binary").alias("key"),
                            F.col("value").cast("binary").alias("value"),
                            F.lit(to).alias("topic"), headers.cast(HEADERS_TYPE).alias("headers"))

    out = routed(encoded, topic, F.lit(None))
    for route in routes:
        out = out.unionByName(routed(route.frame, route.topic, F.col("headers")))
    return out


def observed_counts(progress: dict[str, Any]) -> dict[str, int]:
    """Malformed counts of one progress report: source id -> count."""
    out: dict[str, int] = {}
    for name, row in (progress.get("observedMetrics") or {}).items():
        if name.startswith(OBSERVATION_PREFIX):
            if hasattr(row, "asDict"):  # pyspark Row
                row = row.asDict()
            value = row.get("malformed") if isinstance(row, dict) else None
            out[name[len(OBSERVATION_PREFIX) :]] = int(value or 0)
    return out
