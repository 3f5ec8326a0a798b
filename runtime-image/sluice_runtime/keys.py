"""Record keys in the runtime (``keyFormat``, issue 30): a source's key decoded into its key columns,
a sink's key columns encoded.

Formats (the plan's ``keyFormat``; absent: a source does not read the key, a sink writes one key
column as text and several as a JSON object, as before the field):

* ``string``, ``kafka:string``: UTF-8 text.
* ``json``: a JSON object (``from_json``/``to_json``).
* ``avro``: the Confluent wire format: a source decodes with the writer schemas of the key subject
  resolved against the pinned ``keySchema`` (:func:`sluice_runtime.avro.decode`): a record into its
  fields, a schema that is no record (``"long"``, as Confluent's serializer writes a ``Long`` key)
  into the one key column; a sink writes ``to_avro`` behind the header of
  ``SLUICE_SINK_KEY_SCHEMA_ID``.
* ``protobuf``: the Confluent wire format decoded with the pinned descriptor's message, as a protobuf
  value is (:func:`sluice_runtime.protobuf.decode`); a sink encodes the key columns' message
  (:func:`sluice_runtime.protobuf.encode`) behind the header of ``SLUICE_SINK_KEY_SCHEMA_ID``.
* ``kafka:long``, ``kafka:int``, ``kafka:short``, ``kafka:double``, ``kafka:float``: Kafka's
  ``LongSerializer`` (8 bytes), ``IntegerSerializer`` (4 bytes), ``ShortSerializer`` (2 bytes),
  ``DoubleSerializer`` (8 bytes IEEE 754), ``FloatSerializer`` (4 bytes IEEE 754), all big-endian. The
  bytes are read and written with Spark's own functions (``hex``/``conv``/``unhex``; a double or a
  float through Avro's little-endian encoding with its bytes reversed): nothing leaves the JVM.
* ``kafka:bytes``: ``ByteArraySerializer``/``BytesSerializer``: the key's bytes as they are (binary).
* ``kafka:uuid``: ``UUIDSerializer``: the UUID's canonical text (``UUID.toString()``: 8-4-4-4-12 hex
  digits, lower case) in UTF-8. A source reads the text in lower case (upper-case hex digits are the
  same UUID); a key that is not such a text is malformed. A sink writes its string column in lower case,
  and a value that is not a UUID's text fails the batch (Kafka's serializer is given a ``UUID``: it
  cannot write one).

A key that does not decode (a primitive of the wrong length, a kafka:uuid key that is no UUID's text,
a json key that is no object of the key columns, an avro key not in the wire format or that does not
decode) makes its record malformed, with its own reason (``record key ...``). A null key gives nulls in
every key column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sluice.core.plan.model import KafkaSinkV1, KafkaSourceV1
from sluice.core.spec import REGISTRY_FORMATS

from sluice_runtime import avro, malformed, protobuf

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from sluice_runtime.steps.base import BuildContext

#: the decoded key: a struct of the key columns
KEY_PARSED: Final = "_sluice_key"
#: whether the key does not decode
KEY_BAD: Final = "_sluice_key_bad"
KEY_CORRUPT: Final = "_sluice_key_corrupt"
KEY_WIRE_OK: Final = "_sluice_key_wire_ok"
KEY_SCHEMA_ID: Final = "_sluice_key_schema_id"
#: a protobuf key's decoder result (``ok``, ``reason``, ``value``)
KEY_DECODED: Final = "_sluice_key_decoded"
#: the length in bytes of Kafka's serializers' primitives
PRIMITIVE_LENGTHS: Final = {"kafka:long": 8, "kafka:int": 4, "kafka:short": 2, "kafka:double": 8,
                             "kafka:float": 4}
#: the text of a UUID as ``UUID.toString()`` writes it (upper-case hex digits accepted as the same UUID),
#: of :data:`UUID_LENGTH` characters (Java's ``$``, as Python's, also matches before a final line break)
UUID_PATTERN: Final = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
UUID_LENGTH: Final = 36


def _reversed_bytes(data: Column, length: int) -> Column:
    """``data`` (``length`` bytes) with its bytes in the reverse order."""
    from pyspark.sql import functions as F

    text = F.hex(data)
    return F.unhex(F.concat(*[F.substring(text, 2 * i + 1, 2) for i in reversed(range(length))]))


def _is_uuid(text: Column) -> Column:
    """Whether ``text`` is a UUID's text (:data:`UUID_PATTERN`, :data:`UUID_LENGTH`)."""
    from pyspark.sql import functions as F

    return (F.length(text) == UUID_LENGTH) & text.rlike(UUID_PATTERN)


def _primitive(fmt: str, key: Column) -> Column:
    """A ``kafka:<type>`` key's value (null when the key is null or of another length)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    if fmt == "kafka:long":  # conv to a negative base reads the 64 bits as a signed number
        value = F.conv(F.hex(key), 16, -10).cast("bigint")
    elif fmt in ("kafka:int", "kafka:short"):
        bits = 8 * PRIMITIVE_LENGTHS[fmt]
        unsigned = F.conv(F.hex(key), 16, 10).cast("bigint")
        value = F.when(unsigned >= 2 ** (bits - 1), unsigned - 2**bits).otherwise(unsigned)
        value = value.cast("int" if fmt == "kafka:int" else "smallint")
    elif fmt == "kafka:float":  # Avro's float is the same 4 bytes, little-endian
        value = from_avro(_reversed_bytes(key, 4), '"float"')
    else:  # kafka:double: Avro's double is the same 8 bytes, little-endian
        value = from_avro(_reversed_bytes(key, 8), '"double"')
    return F.when(F.length(key) == PRIMITIVE_LENGTHS[fmt], value)


def tag(step: KafkaSourceV1, df: DataFrame, ctx: BuildContext) -> tuple[DataFrame, Column]:
    """``df`` (Kafka records) with :data:`KEY_PARSED` and :data:`KEY_BAD`, and why a key is bad."""
    from pyspark.sql import functions as F

    fmt, columns = step.key_format, step.key_columns or []
    key = F.col("key")
    reason = F.lit(f"record key is not a {fmt} key of the columns ({malformed.schema_ddl(columns)})")
    if fmt in ("string", "kafka:string"):
        parsed, bad = F.struct(key.cast("string").alias(columns[0].name)), F.lit(False)
    elif fmt == "kafka:bytes":
        parsed, bad = F.struct(key.alias(columns[0].name)), F.lit(False)
    elif fmt == "kafka:uuid":
        text = key.cast("string")
        valid = _is_uuid(text)
        parsed = F.struct(F.when(valid, F.lower(text)).alias(columns[0].name))
        bad = key.isNotNull() & ~valid
        reason = F.lit("record key is not a kafka:uuid key (a UUID's text, 8-4-4-4-12 hex digits, in UTF-8, "
                       "as Kafka's serializer writes it)")
    elif fmt in PRIMITIVE_LENGTHS:
        parsed = F.struct(_primitive(str(fmt), key).alias(columns[0].name))
        bad = key.isNotNull() & (F.length(key) != PRIMITIVE_LENGTHS[str(fmt)])
        reason = F.lit(f"record key is not a {fmt} key ({PRIMITIVE_LENGTHS[str(fmt)]} bytes, big-endian, "
                       "as Kafka's serializer writes it)")
    elif fmt == "json":
        ddl = malformed.schema_ddl(columns) + f", `{KEY_CORRUPT}` string"
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": KEY_CORRUPT}
        parsed = F.from_json(key.cast("string"), ddl, options)
        df = df.withColumn(KEY_PARSED, parsed)
        corrupt = F.col(f"{KEY_PARSED}.{KEY_CORRUPT}").isNotNull()
        bad = key.isNotNull() & (F.col(KEY_PARSED).isNull() | corrupt)
        reason = F.lit("record key is not a JSON object matching the key columns "
                       f"({malformed.schema_ddl(columns)})")
        parsed = F.col(KEY_PARSED)
    elif fmt == "avro":
        return _tag_avro(step, df, ctx)
    elif fmt == "protobuf":
        if step.key_schema is None:
            raise protobuf.ProtobufConfigError(
                f"source {step.source}: keyFormat protobuf without a keySchema in the plan")
        df = df.withColumn(KEY_DECODED, protobuf.decode(step.key_schema, columns, "key"))
        parsed, bad = F.col(f"{KEY_DECODED}.value"), key.isNotNull() & ~F.col(f"{KEY_DECODED}.ok")
        reason = F.col(f"{KEY_DECODED}.reason")
    else:
        raise avro.AvroConfigError(f"source {step.source}: unknown keyFormat {fmt}")
    return df.withColumn(KEY_PARSED, parsed).withColumn(KEY_BAD, F.coalesce(bad, F.lit(False))), reason


def _tag_avro(step: KafkaSourceV1, df: DataFrame, ctx: BuildContext) -> tuple[DataFrame, Column]:
    from pyspark.sql import functions as F

    schema = step.key_schema
    if schema is None:
        raise avro.AvroConfigError(f"source {step.source}: keyFormat avro without a keySchema in the plan")
    writers = ctx.avro.writer_schemas(schema)
    df = avro.wire_columns(df, "key", KEY_WIRE_OK, KEY_SCHEMA_ID)
    decoded = avro.decode(writers, schema.schema_, "key", KEY_WIRE_OK, KEY_SCHEMA_ID)
    if avro.is_record(schema.schema_):
        check = avro.decoded_field(schema.schema_)
    else:  # one value (the compiler allows no union with null): the key's one column
        check = (step.key_columns or [])[0].name
        decoded = F.struct(decoded.alias(check))
    df = df.withColumn(KEY_PARSED, decoded)
    key = F.col("key")
    unknown = F.col(KEY_WIRE_OK) & ~F.col(KEY_SCHEMA_ID).isin(sorted(writers))
    bad = key.isNotNull() & (~F.col(KEY_WIRE_OK) | F.col(KEY_PARSED).isNull()
                             | F.col(f"{KEY_PARSED}.`{check}`").isNull())
    failed = avro.unknown_id_error(schema.subject, writers, KEY_SCHEMA_ID)
    pinned = f"version {schema.version}, id {schema.id}" if schema.id is not None else "pinned"
    reason = F.when(~F.col(KEY_WIRE_OK), F.lit(
        "record key is not in the Confluent wire format (magic byte 0, a 4-byte schema id, Avro binary)")
    ).otherwise(F.concat(
        F.lit("record key does not decode as Avro written with schema id "),
        F.col(KEY_SCHEMA_ID).cast("string"),
        F.lit(f" of subject {schema.subject}, read with the reader schema ({pinned})")))
    return df.withColumn(KEY_BAD, F.when(unknown, failed).otherwise(F.coalesce(bad, F.lit(False)))), reason


def fields_by_sql_name(step: KafkaSourceV1) -> dict[str, str]:
    """The key's fields by their column names in the step's schema (``keyPrefix`` before them)."""
    return {f"{step.key_prefix or ''}{c.name}": c.name for c in step.key_columns or []}


def column(step: KafkaSourceV1, df: DataFrame, sql_name: str) -> Column:
    """The key column ``sql_name`` of the step's schema from a tagged frame, as the plan types it."""
    name = fields_by_sql_name(step)[sql_name]
    types = {c.name: c.type for c in step.key_columns or []}
    return df[f"{KEY_PARSED}.`{name}`"].cast(types[name]).alias(sql_name)


def encode(step: KafkaSinkV1, key_schema_id: int | None = None) -> Column:
    """A sink's record key (``key_schema_id``: the id of an avro key's schema)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    fmt, names = step.key_format, step.key
    if not names:
        return F.lit(None).cast("string")
    cols = [F.col(f"`{k}`") for k in names]
    if fmt is None or fmt == "string":  # as before the field
        return cols[0].cast("string") if len(cols) == 1 else F.to_json(F.struct(*cols))
    if fmt == "kafka:string":
        return cols[0].cast("string")
    if fmt == "json":
        return F.to_json(F.struct(*cols))
    if fmt in REGISTRY_FORMATS:
        if step.key_schema is None or key_schema_id is None:
            raise avro.AvroConfigError(
                f"sink {step.topic}: keyFormat {fmt} needs a keySchema and its schema id")
        if fmt == "protobuf":
            return protobuf.encode(F.struct(*cols), step.key_schema, key_schema_id)
        return avro.encode(F.struct(*cols), step.key_schema.schema_, key_schema_id)
    value = cols[0]
    if fmt == "kafka:long":
        return F.unhex(F.lpad(F.hex(value.cast("bigint")), 16, "0"))
    if fmt == "kafka:int":
        return F.unhex(F.lpad(F.hex(value.cast("bigint").bitwiseAND(F.lit(0xFFFFFFFF))), 8, "0"))
    if fmt == "kafka:short":
        return F.unhex(F.lpad(F.hex(value.cast("bigint").bitwiseAND(F.lit(0xFFFF))), 4, "0"))
    if fmt == "kafka:double":  # Avro's double is the IEEE 754 bits little-endian
        little = to_avro(F.coalesce(value.cast("double"), F.lit(0.0)), '"double"')
        return F.when(value.isNotNull(), _reversed_bytes(little, 8))
    if fmt == "kafka:float":  # Avro's float is the IEEE 754 bits little-endian
        little = to_avro(F.coalesce(value.cast("float"), F.lit(0.0).cast("float")), '"float"')
        return F.when(value.isNotNull(), _reversed_bytes(little, 4))
    if fmt == "kafka:bytes":
        return value.cast("binary")
    if fmt == "kafka:uuid":  # UUIDSerializer writes UUID.toString(): lower case
        text = value.cast("string")
        return F.when(text.isNull(), F.lit(None).cast("string")).when(
            _is_uuid(text), F.lower(text)).otherwise(F.raise_error(F.concat(
                F.lit(f"sink {step.topic}: key column '{names[0]}' is not a UUID's text (kafka:uuid): "),
                text)))
    raise avro.AvroConfigError(f"sink {step.topic}: unknown keyFormat {fmt}")
