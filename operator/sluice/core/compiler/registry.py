"""Avro and Protobuf sources and sinks in the compiler (issue 30): registry schemas pinned into the plan.

The compiler does no I/O: the operator fetches each avro source subject's latest version before it
compiles a new plan and passes them in (``CompileTarget.schemas``, by subject). A source's columns are
then the fields of that schema (``sluice.core.formats.avro``). A source that also declares columns
must declare a subset of the fields, each with the field's type (names compared without case, as Spark
SQL does): the plan keeps the declared columns, and the runtime reads records with the whole schema
and selects them. A sink's schema is derived from the output schema (``sluice.core.formats.avro_out``)
and pinned by content; its id is the registry's answer when the operator registers it at rollout.

Protobuf is the same with a compiled schema: the operator compiles the subject's ``.proto`` text
with ``protoc`` when it fetches it (:mod:`sluice.operator.protoc`), and the pinned schema carries the
descriptor and the full name of the message read (the source's ``message``, else the schema's first);
a protobuf sink's message and descriptor are derived from the output schema
(``sluice.core.formats.protobuf_out``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sluice.core.errors import Problem
from sluice.core.formats import avro, avro_out, protobuf, protobuf_out
from sluice.core.plan.model import FieldSpec, KafkaSourceV1, Plan, RegistrySchema
from sluice.core.spec import Column, QuerySpec, Source
from sluice.core.types import TypeParseError, normalize_type

__all__ = ["KeptSchemas", "Resolved", "kept_source_schemas", "plan_source_schemas", "resolve_keys",
           "resolve_sources",
           "sink_schema", "source_subjects"]


class Resolved:
    """The spec with each avro source's columns filled in, and the pinned schema of each (by source
    name in lower case)."""

    def __init__(self, spec: QuerySpec, schemas: dict[str, RegistrySchema], problems: list[Problem]) -> None:
        self.spec = spec
        self.schemas = schemas
        self.problems = problems


def source_subjects(spec: QuerySpec) -> list[str]:
    """The registry subjects of the query's avro sources (values, then keys of avro key format), each
    once, in the order of the sources."""
    subjects = [subject for s in spec.sources for subject in (s.value_subject, s.key_registry_subject)
                if subject is not None]
    return list(dict.fromkeys(subjects))


def _describe(schema: RegistrySchema) -> str:
    parts = [f"version {schema.version}" if schema.version is not None else None,
             f"id {schema.id}" if schema.id is not None else None]
    shown = ", ".join(p for p in parts if p)
    return f"subject '{schema.subject}'" + (f" ({shown})" if shown else "")


def _declared_problems(source: Source, fields: list[FieldSpec], schema: RegistrySchema,
                       where: str, key: bool = False) -> list[Problem]:
    """Declared columns (``key``: key columns) that are not fields of the registry's schema, or not of
    their type."""
    by_name = {f.name.lower(): f for f in fields}
    problems: list[Problem] = []
    declared_columns, at = (source.key_columns, "keySchema") if key else (source.columns, "schema")
    for j, column in enumerate(declared_columns):
        found = by_name.get(column.name.lower())
        if found is None:
            names = ", ".join(f.name for f in fields)
            problems.append(Problem(
                f"source '{source.name}': column '{column.name}' is not a field of the schema of "
                f"{_describe(schema)} (its fields: {names}); declare a subset of its fields, or no "
                "columns to take them all", field=f"{where}.{at}[{j}].name"))
            continue
        try:
            declared = normalize_type(column.type)
        except TypeParseError:
            continue  # reported as the column's type problem
        if declared != found.type:
            problems.append(Problem(
                f"source '{source.name}': column '{column.name}' is declared as {declared}, but the field "
                f"'{found.name}' of {_describe(schema)} is {found.type}", field=f"{where}.{at}[{j}].type"))
    return problems


def _protobuf_fields(source: Source, schema: RegistrySchema, where: str, key: bool
                     ) -> tuple[RegistrySchema, list[FieldSpec] | None, list[Problem]]:
    """The fields of a source's Protobuf message (``key``: of its key), the pinned schema naming the
    message (``message``/``keyMessage``; absent: the schema's first), or the problem."""
    fmt, fmt_field, message, message_field, what = (
        (source.key_format, "keyFormat", source.key_message, "keyMessage", "key schema") if key
        else (source.format, "format", source.message, "message", "schema"))
    if fmt != "protobuf" or schema.schema_type != "PROTOBUF" or schema.descriptor is None:
        return schema, None, [Problem(
            f"source '{source.name}' has {fmt_field} {fmt}, but {_describe(schema)} holds a "
            f"{schema.schema_type} schema", field=f"{where}.{fmt_field}")]
    at = message_field if message is not None else fmt_field  # the message named is not there
    try:
        found = protobuf.message(schema.descriptor, message)
        at = fmt_field  # a field has no Spark type
        fields = protobuf.message_columns(found)
    except protobuf.ProtobufTypeError as exc:
        return schema, None, [Problem(f"source '{source.name}': the {what} of {_describe(schema)} has no "
                                      f"Spark type: {exc}", field=f"{where}.{at}")]
    return schema.model_copy(update={"message": found.full_name}), fields, []


def _fields(source: Source, schema: RegistrySchema, where: str
            ) -> tuple[RegistrySchema, list[FieldSpec] | None, list[Problem]]:
    """The value columns of a source's registry schema (avro: the record's fields; protobuf: the
    message's, which the pinned schema names), or the problem."""
    if source.format == "protobuf" or schema.schema_type == "PROTOBUF":
        return _protobuf_fields(source, schema, where, key=False)
    try:
        return schema, avro.columns(avro.parse(schema.schema_)), []
    except avro.AvroTypeError as exc:
        return schema, None, [Problem(f"source '{source.name}': the schema of {_describe(schema)} has no "
                                      f"Spark type: {exc}", field=f"{where}.format")]


def _resolve(source: Source, schema: RegistrySchema, where: str
             ) -> tuple[Source, RegistrySchema, list[Problem]]:
    schema, fields, problems = _fields(source, schema, where)
    if fields is None:
        return source, schema, problems
    if source.schema_ is not None:
        problems = _declared_problems(source, fields, schema, where)
        return source, schema, problems  # the declared columns (checked as any source's)
    columns = [Column(name=f.name, type=f.type) for f in fields]
    return source.model_copy(update={"schema_": columns}), schema, []


def _resolve_key(source: Source, schema: RegistrySchema, where: str
                 ) -> tuple[Source, RegistrySchema, list[Problem]]:
    """A registry key's columns: the fields of its Avro record schema or Protobuf message (the
    pinned schema then names it), or the declared subset of them; an Avro key of another schema
    (``"long"``, ``"string"``, ...) is one column, declared in ``keySchema``."""
    if source.key_format == "protobuf" or schema.schema_type == "PROTOBUF":
        schema, fields, problems = _protobuf_fields(source, schema, where, key=True)
        return (source, schema, problems) if fields is None else _key_fields(source, fields, schema, where)
    try:
        mapped = avro.to_spark(avro.parse(schema.schema_, "key"), "key")
    except avro.AvroTypeError as exc:
        return source, schema, [Problem(f"source '{source.name}': the key schema of {_describe(schema)} has "
                                        f"no Spark type: {exc}", field=f"{where}.keyFormat")]
    if mapped.spark.name != "struct":
        return source, schema, _primitive_key_problems(source, mapped, schema, where)
    fields = [FieldSpec(name=f.name, type=f.type.ddl) for f in mapped.fields]
    return _key_fields(source, fields, schema, where)


def _key_fields(source: Source, fields: list[FieldSpec], schema: RegistrySchema, where: str
                ) -> tuple[Source, RegistrySchema, list[Problem]]:
    """The key columns: the declared subset of ``fields`` (checked), or all of them."""
    if source.key_schema is not None:
        return source, schema, _declared_problems(source, fields, schema, where, key=True)
    columns = [Column(name=f.name, type=f.type) for f in fields]
    return source.model_copy(update={"key_schema": columns}), schema, []


def _primitive_key_problems(source: Source, mapped: avro.SqlType, schema: RegistrySchema, where: str
                            ) -> list[Problem]:
    """A key whose Avro schema is no record (``"long"``): one value, read as the one key column the
    source declares, of the schema's Spark type; a union with null is refused (a key that decodes to
    null could not be told from one that does not decode)."""
    if mapped.nullable:
        return [Problem(f"source '{source.name}': the key schema of {_describe(schema)} is a union with null "
                        f"({mapped.ddl} or null); a key that is not a record is read only from a schema "
                        "that cannot be null", field=f"{where}.keyFormat")]
    declared = source.key_schema or []
    if len(declared) != 1:
        return [Problem(f"source '{source.name}': the key schema of {_describe(schema)} is not a record but "
                        f"one {mapped.ddl} value: declare its column in keySchema (one column of type "
                        f"{mapped.ddl}, the name yours)", field=f"{where}.keySchema")]
    try:
        wanted = normalize_type(declared[0].type)
    except TypeParseError:
        return []  # reported as the column's type problem
    if wanted == mapped.ddl:
        return []
    return [Problem(f"source '{source.name}': key column '{declared[0].name}' is declared as {wanted}, but "
                    f"the key schema of {_describe(schema)} is {mapped.ddl}",
                    field=f"{where}.keySchema[0].type")]


def resolve_keys(spec: QuerySpec, schemas: Mapping[str, RegistrySchema]) -> Resolved:
    """``spec`` with the key columns of its avro-keyed sources resolved from ``schemas`` (by subject);
    the pinned key schemas by source name in lower case."""
    sources: list[Source] = []
    pinned: dict[str, RegistrySchema] = {}
    problems: list[Problem] = []
    for i, source in enumerate(spec.sources):
        subject = source.key_registry_subject
        schema = schemas.get(subject) if subject is not None else None
        if subject is None or schema is None:
            if subject is not None:
                problems.append(Problem(
                    f"source '{source.name}': the key schema of subject '{subject}' was not resolved from "
                    "the schema registry (the operator resolves it when it compiles a new plan)",
                    field=f"spec.sources[{i}].keyFormat"))
            sources.append(source)
            continue
        schema = schema.model_copy(update={"subject": subject})
        resolved, schema, found = _resolve_key(source, schema, f"spec.sources[{i}]")
        problems += found
        sources.append(resolved)
        pinned[source.name.lower()] = schema
    return Resolved(spec if problems else spec.model_copy(update={"sources": sources}), pinned, problems)


def resolve_sources(spec: QuerySpec, schemas: Mapping[str, RegistrySchema]) -> Resolved:
    """``spec`` with the columns of its avro and protobuf sources resolved from ``schemas`` (by
    subject); a protobuf source's pinned schema names its message."""
    if all(s.format == "json" for s in spec.sources):
        return Resolved(spec, {}, [])
    sources: list[Source] = []
    pinned: dict[str, RegistrySchema] = {}
    problems: list[Problem] = []
    for i, source in enumerate(spec.sources):
        subject = source.value_subject
        if subject is None:
            sources.append(source)
            continue
        where = f"spec.sources[{i}]"
        schema = schemas.get(subject)
        if schema is None:
            problems.append(Problem(
                f"source '{source.name}': the schema of subject '{subject}' was not resolved from the schema "
                "registry (the operator resolves it when it compiles a new plan)", field=f"{where}.format"))
            sources.append(source)
            continue
        resolved, schema, found = _resolve(source, schema.model_copy(update={"subject": subject}), where)
        problems += found
        sources.append(resolved)
        pinned[source.name.lower()] = schema
    new_spec = spec.model_copy(update={"sources": sources})
    if problems:  # columns still missing: report what is known, the columns stay unchecked
        return Resolved(spec, pinned, problems)
    return Resolved(new_spec, pinned, [])


def derived_schema(columns: list[FieldSpec], name: str, subject: str, fmt: str, path: str = "value"
                   ) -> tuple[RegistrySchema | None, str | None]:
    """A sink schema derived from ``columns`` (``fmt`` protobuf: a message, else an Avro record, named
    after ``name``) under ``subject``, or why the columns have none (:func:`schema_kind`)."""
    try:
        if fmt == "protobuf":
            proto = protobuf_out.schema_of(columns, name, path=path)
            return RegistrySchema(subject=subject, schema_type="PROTOBUF", schema_=proto.text,
                                  descriptor=proto.descriptor, message=proto.message), None
        schema = avro_out.schema_of(columns, name, path=path)
    except (protobuf.ProtobufTypeError, avro.AvroTypeError) as exc:
        return None, str(exc)
    return RegistrySchema(subject=subject, schema_=avro_out.schema_text(schema)), None


def sink_schema(spec: QuerySpec, out: list[FieldSpec]) -> tuple[RegistrySchema | None, list[Problem]]:
    """An avro or protobuf sink's schema, derived from the output columns ``out`` (None for json)."""
    subject = spec.sink.value_subject
    if subject is None:
        return None, []
    schema, why = derived_schema(out, spec.sink.topic, subject, spec.sink.format)
    if why is not None:
        return None, [Problem(f"the output has no {schema_kind(spec.sink.format)} schema for sink topic "
                              f"'{spec.sink.topic}': {why}", field="spec.sink.format")]
    return schema, []


def schema_kind(fmt: str) -> str:
    """How a registry format's schemas are named in messages."""
    return "Protobuf" if fmt == "protobuf" else "Avro"


def plan_source_schemas(plan: Plan) -> dict[str, RegistrySchema]:
    """The registry schemas a plan's avro sources pinned (by subject; values and keys): what the same
    spec compiles with again while the plan stays pinned (a subject's later versions never reach it)."""
    return {schema.subject: schema for step in plan.steps if isinstance(step, KafkaSourceV1)
            for schema in (step.value_schema, step.key_schema) if schema is not None}


@dataclass(frozen=True)
class KeptSchemas:
    """A plan the query ran before (the pinned one, a kept version, one of the upgrade history): the
    digest of the query it was compiled from (``sluice.core.engine.query_digest``; None: not known) and
    the source schemas it pinned (``plan_source_schemas``)."""

    query: str | None
    schemas: Mapping[str, RegistrySchema] = field(default_factory=dict)


def kept_source_schemas(query: str, subjects: Iterable[str],
                        kept: Iterable[KeptSchemas]) -> dict[str, RegistrySchema] | None:
    """The source schemas a compile of the query with digest ``query`` (avro source ``subjects``) uses
    when that query is one a plan ran before: that plan's pinned schemas (the first of ``kept`` whose
    query is the same and that pinned every subject), so that going back to a query (a rollback, an
    edit undone) gives back the same plan and hash whatever versions its subjects gained since. None:
    a query no plan ran, compiled with each subject's latest version (the operator asks the registry)."""
    wanted = list(subjects)
    if not wanted:
        return {}
    for version in kept:
        if version.query == query and all(s in version.schemas for s in wanted):
            return {s: version.schemas[s] for s in wanted}
    return None
