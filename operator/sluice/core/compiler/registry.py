"""Avro sources and sinks in the compiler (issue 30): the registry's schemas pinned into the plan.

The compiler does no I/O: the operator fetches each avro source subject's latest version before it
compiles a new plan and passes them in (``CompileTarget.schemas``, by subject). A source's columns are
then the fields of that schema (``sluice.core.formats.avro``). A source that also declares columns
must declare a subset of the fields, each with the field's type (names compared without case, as Spark
SQL does): the plan keeps the declared columns, and the runtime reads records with the whole schema
and selects them. A sink's schema is derived from the output schema (``sluice.core.formats.avro_out``)
and pinned by content; its id is the registry's answer when the operator registers it at rollout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sluice.core.errors import Problem
from sluice.core.formats import avro, avro_out
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


def _resolve(source: Source, schema: RegistrySchema, where: str) -> tuple[Source, list[Problem]]:
    try:
        fields = avro.columns(avro.parse(schema.schema_))
    except avro.AvroTypeError as exc:
        return source, [Problem(f"source '{source.name}': the schema of {_describe(schema)} has no Spark "
                                f"type: {exc}", field=f"{where}.format")]
    if source.schema_ is not None:
        problems = _declared_problems(source, fields, schema, where)
        return source, problems  # the declared columns (checked as any source's)
    columns = [Column(name=f.name, type=f.type) for f in fields]
    return source.model_copy(update={"schema_": columns}), []


def _resolve_key(source: Source, schema: RegistrySchema, where: str) -> tuple[Source, list[Problem]]:
    """An avro key's columns: the fields of its record schema, or the declared subset of them."""
    try:
        fields = avro.columns(avro.parse(schema.schema_, "key"), "key")
    except avro.AvroTypeError as exc:
        return source, [Problem(f"source '{source.name}': the key schema of {_describe(schema)} has no Spark "
                                f"columns (a key read as columns is a record): {exc}",
                                field=f"{where}.keyFormat")]
    if source.key_schema is not None:
        return source, _declared_problems(source, fields, schema, where, key=True)
    return source.model_copy(update={"key_schema": [Column(name=f.name, type=f.type) for f in fields]}), []


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
        resolved, found = _resolve_key(source, schema, f"spec.sources[{i}]")
        problems += found
        sources.append(resolved)
        pinned[source.name.lower()] = schema
    return Resolved(spec if problems else spec.model_copy(update={"sources": sources}), pinned, problems)


def resolve_sources(spec: QuerySpec, schemas: Mapping[str, RegistrySchema]) -> Resolved:
    """``spec`` with the columns of its avro sources resolved from ``schemas`` (by subject)."""
    if not any(s.format == "avro" for s in spec.sources):
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
        resolved, found = _resolve(source, schema.model_copy(update={"subject": subject}), where)
        problems += found
        sources.append(resolved)
        pinned[source.name.lower()] = schema.model_copy(update={"subject": subject})
    new_spec = spec.model_copy(update={"sources": sources})
    if problems:  # columns still missing: report what is known, the columns stay unchecked
        return Resolved(spec, pinned, problems)
    return Resolved(new_spec, pinned, [])


def sink_schema(spec: QuerySpec, out: list[FieldSpec]) -> tuple[RegistrySchema | None, list[Problem]]:
    """An avro sink's schema, derived from the output columns ``out`` (None for json)."""
    subject = spec.sink.value_subject
    if subject is None:
        return None, []
    try:
        schema = avro_out.schema_of(out, spec.sink.topic)
    except avro.AvroTypeError as exc:
        return None, [Problem(f"the output has no Avro schema for sink topic '{spec.sink.topic}': {exc}",
                              field="spec.sink.format")]
    return RegistrySchema(subject=subject, schema_=avro_out.schema_text(schema)), []


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
