"""Avro values in the Confluent wire format: the registry settings of a driver, the writer schemas
of a source's subject, and the Spark expressions that decode and encode.

The wire format: byte 0 is the magic byte ``0``, bytes 1-4 the schema id (big-endian), the rest the
Avro binary encoding of one datum written with that schema.

Decoding (``kafkaSourceV1``, ``format: avro``) is Spark's own ``from_avro`` with Avro schema
resolution: the writer schema of the record's id, the plan's pinned reader schema as
``avroSchema``. The writer schemas are every version of the source's subject, fetched from the
registry once, when the pipeline is built (the driver never asks the registry on the data path);
the value expression is a CASE over their ids (:func:`sluice_runtime.steps.source.tag_avro`). A
record whose id the subject did not have then fails the batch with an error naming the id and the
subject (:data:`UNKNOWN_SCHEMA_ID`); the driver fetches the subject anew and starts the query again
on the same checkpoint (:func:`sluice_runtime.pipeline.renewed_avro`). A record that is not in the
wire format, or whose bytes do not decode, is malformed, with its reason (:func:`reason`).

Encoding (``kafkaSinkV1``, ``format: avro``) is ``to_avro`` with the plan's sink schema, behind
the header of the id the operator registered that schema under (``SLUICE_SINK_SCHEMA_ID``).

The registry is read with the standard library (its Confluent-compatible REST API: ``GET
/subjects/<subject>/versions`` and ``/subjects/<subject>/versions/<n>``), so the runtime image needs
no client library for it.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import struct
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from sluice.core.plan.model import Plan, RegistrySchema

log = logging.getLogger(__name__)

REGISTRY_URL_ENV: Final = "SLUICE_SCHEMA_REGISTRY_URL"
REGISTRY_USERNAME_ENV: Final = "SLUICE_SCHEMA_REGISTRY_USERNAME"
REGISTRY_PASSWORD_ENV: Final = "SLUICE_SCHEMA_REGISTRY_PASSWORD"
#: the PEM text of the CA that signed an ``https`` registry's certificate (else the system's CAs)
REGISTRY_CA_ENV: Final = "SLUICE_SCHEMA_REGISTRY_CA"
SINK_SCHEMA_ID_ENV: Final = "SLUICE_SINK_SCHEMA_ID"
#: the id the operator registered an avro sink key's schema under (``keyFormat: avro``)
SINK_KEY_SCHEMA_ID_ENV: Final = "SLUICE_SINK_KEY_SCHEMA_ID"

MAGIC: Final = 0
HEADER_LENGTH: Final = 5
#: the largest schema id the header holds (a signed 32-bit integer, as the Confluent clients read it)
MAX_SCHEMA_ID: Final = 2**31 - 1
#: the start of the error that fails a batch on a schema id the subject did not have at build
UNKNOWN_SCHEMA_ID: Final = "SLUICE_UNKNOWN_SCHEMA_ID"
#: a field added to the reader schema with a default: set in every record that decodes, null in the
#: all-null row ``from_avro`` gives (``PERMISSIVE``) for one that does not
DECODED: Final = "_sluice_decoded"
#: temporary columns of a decoded source
SCHEMA_ID: Final = "_sluice_schema_id"
WIRE_OK: Final = "_sluice_wire_ok"


class AvroConfigError(ValueError):
    """Avro settings that cannot be used (a missing or invalid variable, an unreachable subject)."""


def wire_header(schema_id: int) -> bytes:
    """The 5 bytes before an Avro datum written with ``schema_id``."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} is not between 0 and {MAX_SCHEMA_ID}")
    return struct.pack(">bI", MAGIC, schema_id)


def parse_wire_header(value: bytes | None) -> int | None:
    """The schema id of a value in the wire format; None when it is not (null, short, other magic).
    The same test :func:`wire_columns` makes in Spark."""
    if value is None or len(value) < HEADER_LENGTH or value[0] != MAGIC:
        return None
    return int(struct.unpack(">I", value[1:HEADER_LENGTH])[0])


def parse_schema_id(text: str | None, variable: str = SINK_SCHEMA_ID_ENV) -> int | None:
    """A schema id from the environment; None when unset or blank."""
    value = (text or "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) > MAX_SCHEMA_ID:
        raise AvroConfigError(
            f"{variable} must be a schema id (an integer from 0 to {MAX_SCHEMA_ID}), got {text!r}")
    return int(value)


def _nullable(field_type: Any) -> bool:
    return field_type == "null" or (isinstance(field_type, list) and "null" in field_type)


def decoded_field(reader_schema: str) -> str:
    """The field of a decoded value that is null only when the record did not decode: the reader's
    first field that cannot be null (``from_avro`` in ``PERMISSIVE`` mode gives a row of nulls for a
    record that does not decode), else :data:`DECODED`, which :func:`reader_for` then adds."""
    schema = json.loads(reader_schema)
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if not _nullable(f.get("type")):
            return str(f["name"])
    return DECODED


def is_record(reader_schema: str) -> bool:
    """Is the schema a record (a key may be a single value instead: ``"long"``)?"""
    schema = json.loads(reader_schema)
    return isinstance(schema, dict) and schema.get("type") == "record"


def reader_for(reader_schema: str) -> str:
    """The reader schema ``from_avro`` is given: the pinned one, with :data:`DECODED` added when
    every field of a record can be null (:func:`decoded_field`); a schema that is no record (a
    key's ``"long"``, which cannot be null) as it is: it decodes to null only when it fails."""
    if not is_record(reader_schema) or decoded_field(reader_schema) != DECODED:
        return reader_schema
    return reader_with_marker(reader_schema)


def reader_with_marker(reader_schema: str) -> str:
    """The reader schema with :data:`DECODED` (boolean, default true) added to its record."""
    schema = json.loads(reader_schema)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise AvroConfigError("an avro source's reader schema must be a record schema")
    fields = [f for f in schema.get("fields", []) if f.get("name") != DECODED]
    schema["fields"] = [*fields, {"name": DECODED, "type": "boolean", "default": True}]
    return json.dumps(schema, separators=(",", ":"))


@dataclass(frozen=True)
class Registry:
    """A Confluent-compatible schema registry (its base URL, e.g. Apicurio's ``.../apis/ccompat/v7``)."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: PEM text of the CA of an ``https`` registry (None: the system's)
    ca: str | None = field(default=None, repr=False)
    timeout: float = 10.0

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(
            self.url.rstrip("/") + path, headers={"Accept": "application/vnd.schemaregistry.v1+json"})
        if self.username is not None:
            token = base64.b64encode(f"{self.username}:{self.password or ''}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cadata=self.ca) if self.ca else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise AvroConfigError(
                f"schema registry {self.url}: GET {path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise AvroConfigError(f"schema registry {self.url}: GET {path}: {exc}") from None

    def versions(self, subject: str) -> list[int]:
        quoted = urllib.parse.quote(subject, safe="")
        return sorted(int(v) for v in self._get(f"/subjects/{quoted}/versions"))

    def version(self, subject: str, version: int) -> dict[str, Any]:
        quoted = urllib.parse.quote(subject, safe="")
        answer = self._get(f"/subjects/{quoted}/versions/{version}")
        if not isinstance(answer, dict):
            raise AvroConfigError(f"schema registry {self.url}: {subject} version {version}: not an object")
        return answer

    def writer_schemas(self, subject: str) -> dict[int, str]:
        """Schema id -> schema text of every Avro version of ``subject``."""
        out: dict[int, str] = {}
        for number in self.versions(subject):
            answer = self.version(subject, number)
            if answer.get("schemaType", "AVRO") == "AVRO":
                out[int(answer["id"])] = str(answer["schema"])
        return out


@dataclass
class AvroSettings:
    """What a driver knows for avro sources and sinks: the registry, the sink schema's id, and the
    writer schemas fetched so far (subject -> id -> schema text; a test may give them)."""

    registry: Registry | None = None
    sink_schema_id: int | None = None
    sink_key_schema_id: int | None = None
    writers: dict[str, dict[int, str]] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AvroSettings:
        url = (env.get(REGISTRY_URL_ENV) or "").strip()
        username = env.get(REGISTRY_USERNAME_ENV) or None
        password = env.get(REGISTRY_PASSWORD_ENV) or None
        if (username is None) != (password is None):
            raise AvroConfigError(f"{REGISTRY_USERNAME_ENV} and {REGISTRY_PASSWORD_ENV} go together")
        if not url and username is not None:
            raise AvroConfigError(f"{REGISTRY_USERNAME_ENV} is set without {REGISTRY_URL_ENV}")
        ca = (env.get(REGISTRY_CA_ENV) or "").strip() or None
        if ca is not None:
            try:
                ssl.create_default_context(cadata=ca)
            except (ssl.SSLError, ValueError) as exc:
                raise AvroConfigError(f"{REGISTRY_CA_ENV} is not a PEM certificate: {exc}") from None
        registry = Registry(url, username, password, ca) if url else None
        return cls(registry=registry, sink_schema_id=parse_schema_id(env.get(SINK_SCHEMA_ID_ENV)),
                   sink_key_schema_id=parse_schema_id(env.get(SINK_KEY_SCHEMA_ID_ENV),
                                                      SINK_KEY_SCHEMA_ID_ENV))

    def writer_schemas(self, schema: RegistrySchema) -> dict[int, str]:
        """The writer schemas of a source's subject (fetched once per subject). The pinned schema is
        among them under its pinned id, whatever the registry answers."""
        if schema.subject not in self.writers:
            if self.registry is None:
                raise AvroConfigError(
                    f"{REGISTRY_URL_ENV} is not set: an avro source (subject {schema.subject}) needs the "
                    "schema registry for the writer schemas of its records")
            self.writers[schema.subject] = self.registry.writer_schemas(schema.subject)
        found = dict(self.writers[schema.subject])
        if schema.id is not None:
            found.setdefault(schema.id, schema.schema_)
        return found

    def require_sink_id(self, subject: str) -> int:
        if self.sink_schema_id is None:
            raise AvroConfigError(
                f"{SINK_SCHEMA_ID_ENV} is not set: the avro sink writes the id the operator registered "
                f"its schema under (subject {subject}) in every record's header")
        return self.sink_schema_id

    def require_sink_key_id(self, subject: str) -> int:
        if self.sink_key_schema_id is None:
            raise AvroConfigError(
                f"{SINK_KEY_SCHEMA_ID_ENV} is not set: the sink's registry key writes the id the operator "
                f"registered its schema under (subject {subject}) in every record key's header")
        return self.sink_key_schema_id


# -- Spark expressions ---------------------------------------------------------------------
def wire_columns(raw: DataFrame, column: str = "value", ok_name: str = WIRE_OK,
                 id_name: str = SCHEMA_ID) -> DataFrame:
    """``raw`` (Kafka records) with :data:`WIRE_OK` (value in the wire format) and
    :data:`SCHEMA_ID` (its id, null when not); ``column``: ``key`` for a key (named ``ok_name``,
    ``id_name``)."""
    from pyspark.sql import functions as F

    value = F.col(column)
    ok = value.isNotNull() & (F.length(value) >= HEADER_LENGTH) & (F.hex(F.substring(value, 1, 1)) == "00")
    schema_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("bigint")
    return raw.withColumn(ok_name, F.coalesce(ok, F.lit(False))).withColumn(
        id_name, F.when(F.col(ok_name), schema_id))


def payload(column: str = "value") -> Column:
    """The Avro datum of a value (``column``: ``key`` for a key) in the wire format (the bytes after
    the header)."""
    from pyspark.sql import functions as F

    value = F.col(column)
    return value.substr(F.lit(HEADER_LENGTH + 1), F.length(value) - HEADER_LENGTH)


def decode(writers: Mapping[int, str], reader_schema: str, column: str = "value", ok_name: str = WIRE_OK,
           id_name: str = SCHEMA_ID) -> Column:
    """The decoded value (a struct of the reader schema's fields, and :data:`DECODED` when
    :func:`reader_for` adds it): a CASE over the writer schema ids; null for an id not among them or
    a value not in the wire format. A writer schema that is the reader schema is read without
    schema resolution (the common case: records written with the pinned version)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    reader = reader_for(reader_schema)
    resolving = {"avroSchema": reader, "mode": "PERMISSIVE"}
    out: Column | None = None
    for schema_id in sorted(writers):
        writer = writers[schema_id]
        same = reader == reader_schema and json.loads(writer) == json.loads(reader_schema)
        decoded = from_avro(payload(column), writer, {"mode": "PERMISSIVE"} if same else resolving)
        condition = F.col(ok_name) & (F.col(id_name) == F.lit(schema_id))
        out = F.when(condition, decoded) if out is None else out.when(condition, decoded)
    if out is None:
        raise AvroConfigError("no writer schema: the subject has no Avro version")
    return out


def unknown_id_error(subject: str, known: Mapping[int, str], id_name: str = SCHEMA_ID) -> Column:
    """``raise_error`` naming the record, its schema id (column ``id_name``) and the subject."""
    from pyspark.sql import functions as F

    ids = ", ".join(str(i) for i in sorted(known))
    return F.raise_error(F.concat(
        F.lit(f"{UNKNOWN_SCHEMA_ID}: a record of topic "), F.col("topic"),
        F.lit(" partition "), F.col("partition").cast("string"),
        F.lit(" offset "), F.col("offset").cast("string"),
        F.lit(" carries schema id "), F.col(id_name).cast("string"),
        F.lit(f", which subject {subject} did not have when the pipeline was built (ids {ids}): "
              "the subject is fetched again and the query restarted on its checkpoint"),
    ))


def reason(subject: str, reader: RegistrySchema) -> Column:
    """Why a record is malformed (meaningful for malformed records only)."""
    from pyspark.sql import functions as F

    pinned = f"version {reader.version}, id {reader.id}" if reader.id is not None else "pinned"
    return (
        F.when(F.col("value").isNull(), F.lit("record value is null"))
        .when(~F.col(WIRE_OK), F.lit("record value is not in the Confluent wire format "
                                      "(magic byte 0, a 4-byte schema id, Avro binary)"))
        .otherwise(F.concat(
            F.lit("record value does not decode as Avro written with schema id "),
            F.col(SCHEMA_ID).cast("string"),
            F.lit(f" of subject {subject}, read with the reader schema ({pinned})"),
        ))
    )


def encode(value: Column, schema: str, schema_id: int) -> Column:
    """``value`` (a struct) as Avro with ``schema``, behind the wire header of ``schema_id``."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    return F.concat(F.lit(bytearray(wire_header(schema_id))), to_avro(value, schema))


def startup_problems(plan: Plan, settings: AvroSettings) -> list[str]:
    """What keeps ``plan`` from starting with ``settings``: an avro sink without
    ``SLUICE_SINK_SCHEMA_ID``, an avro source without ``SLUICE_SCHEMA_REGISTRY_URL``, an avro step
    without its schema in the plan ([] when it can start)."""
    from sluice.core.plan.model import KafkaSinkV1, KafkaSourceV1
    from sluice.core.spec import REGISTRY_FORMATS

    problems: list[str] = []
    for step in plan.steps:
        if isinstance(step, KafkaSourceV1) and step.format == "avro":
            if step.value_schema is None:
                problems.append(f"avro source {step.source}: the plan has no valueSchema")
            given = step.value_schema is not None and step.value_schema.subject in settings.writers
            if settings.registry is None and not given:
                problems.append(f"{REGISTRY_URL_ENV} is not set: avro source {step.source} needs the schema "
                                "registry for the writer schemas of its records")
        elif isinstance(step, KafkaSinkV1) and step.format in REGISTRY_FORMATS:
            if step.value_schema is None:
                problems.append(f"{step.format} sink {step.topic}: the plan has no valueSchema")
            if settings.sink_schema_id is None:
                problems.append(f"{SINK_SCHEMA_ID_ENV} is not set: the {step.format} sink of topic "
                                f"{step.topic} writes the id the operator registered its schema under")
        elif isinstance(step, KafkaSourceV1) and step.format == "protobuf" and (
                step.value_schema is None or step.value_schema.descriptor is None):
            problems.append(f"protobuf source {step.source}: the plan has no valueSchema with its descriptor")
    return problems + _key_startup_problems(plan, settings)


def _key_startup_problems(plan: Plan, settings: AvroSettings) -> list[str]:
    """:func:`startup_problems` of avro keys (and of a sink's protobuf key: its schema id)."""
    from sluice.core.plan.model import KafkaSinkV1, KafkaSourceV1
    from sluice.core.spec import REGISTRY_FORMATS

    problems: list[str] = []
    for step in plan.steps:
        if isinstance(step, KafkaSourceV1) and step.key_format == "avro":
            given = step.key_schema is not None and step.key_schema.subject in settings.writers
            if step.key_schema is None:
                problems.append(f"avro key of source {step.source}: the plan has no keySchema")
            elif settings.registry is None and not given:
                problems.append(f"{REGISTRY_URL_ENV} is not set: the avro key of source {step.source} needs "
                                "the schema registry for the writer schemas of its records")
        elif isinstance(step, KafkaSinkV1) and step.key_format in REGISTRY_FORMATS:
            if step.key_schema is None:
                problems.append(f"{step.key_format} key of sink {step.topic}: the plan has no keySchema")
            if settings.sink_key_schema_id is None:
                problems.append(f"{SINK_KEY_SCHEMA_ID_ENV} is not set: the {step.key_format} key of the sink "
                                f"of topic {step.topic} writes the id the operator registered its schema "
                                "under")
    return problems


def source_schemas(plan: Plan) -> list[RegistrySchema]:
    """The pinned reader schemas of the plan's avro sources: values and keys."""
    from sluice.core.plan.model import KafkaSourceV1

    return [schema for step in plan.steps if isinstance(step, KafkaSourceV1)
            for schema in (step.value_schema if step.format == "avro" else None,
                           step.key_schema if step.key_format == "avro" else None)
            if schema is not None]


def has_sources(plan: Plan) -> bool:
    """Whether the plan reads an avro source (a value or a key)."""
    from sluice.core.plan.model import KafkaSourceV1

    return any(isinstance(s, KafkaSourceV1) and "avro" in (s.format, s.key_format) for s in plan.steps)


def is_unknown_schema_id(failure: BaseException | None) -> bool:
    """Whether a query failed on a schema id its subject did not have at build (:func:`tag`)."""
    if failure is None:
        return False
    return UNKNOWN_SCHEMA_ID in str(getattr(failure, "desc", None) or failure)


def refetched(settings: AvroSettings, plan: Plan) -> AvroSettings | None:
    """Settings with the writer schemas of the plan's avro sources fetched anew, when a subject
    has ids that ``settings`` did not have; None when none has, when there is no registry, or when
    it cannot be read (logged: the caller goes on with what it has)."""
    if settings.registry is None:
        return None
    fresh = AvroSettings(registry=settings.registry, sink_schema_id=settings.sink_schema_id,
                         sink_key_schema_id=settings.sink_key_schema_id)
    grew = False
    try:
        for schema in source_schemas(plan):
            before = set(settings.writers.get(schema.subject, {}))
            grew |= bool(set(fresh.writer_schemas(schema)) - before - {schema.id})
    except AvroConfigError as exc:
        log.warning("avro: the source subjects could not be fetched again: %s", exc)
        return None
    return fresh if grew else None
