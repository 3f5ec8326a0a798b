"""Compiling a manifest with avro sources outside the operator (``sluice plan``, ``sluice diff``,
``kubectl sluice diff``): the latest schema of each avro source subject is read from the schema
registry at ``$SLUICE_SCHEMA_REGISTRY_URL`` (the local platform's ``.platform/env`` exports it), as
the operator reads it from the QueryCluster's ``spec.schemaRegistry`` when it compiles a new plan.
Without the variable, or when the registry does not answer, the query does not compile, the problem
naming the source's ``format``.

``sluice diff`` and ``kubectl sluice diff`` also ask that registry whether an avro sink's changed schema
(value or key) is compatible with its subject, as the admission webhook does (:func:`sink_refusal`;
which schemas, under which subjects: ``sluice.core.formats.registry.upgrade_sink_questions``): without
the variable, or when the registry does not answer, the problem names the sink's ``format`` or
``keyFormat``."""

from __future__ import annotations

import os
from collections.abc import Mapping

from sluice.core.compiler import CompileTarget, compile_query, source_subjects
from sluice.core.errors import CompileError, Problem
from sluice.core.formats.registry import (
    NEW_KEY_SCHEMA,
    NEW_PROTOBUF_KEY_SCHEMA,
    SinkQuestion,
    incompatibility,
)
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.spec import QuerySpec
from sluice.operator.registry import RegistryClient, RegistryRefused, RegistryUnavailable

__all__ = ["URL_ENV", "compile_with_registry", "latest_schemas", "sink_refusal"]

URL_ENV = "SLUICE_SCHEMA_REGISTRY_URL"


def _field(query: QuerySpec, subject: str) -> str:
    """The field of the first source reading ``subject``: its ``format`` (a value) or ``keyFormat``."""
    for i, source in enumerate(query.sources):
        if source.value_subject == subject:
            return f"spec.sources[{i}].format"
        if source.key_registry_subject == subject:
            return f"spec.sources[{i}].keyFormat"
    return "spec.sources"


def latest_schemas(query: QuerySpec, env: Mapping[str, str] | None = None) -> dict[str, RegistrySchema]:
    """The latest schema of each avro source subject of ``query`` (none: no avro source)."""
    subjects = source_subjects(query)
    if not subjects:
        return {}
    url = (env if env is not None else os.environ).get(URL_ENV)
    if not url:
        raise CompileError([Problem(f"source subject '{s}' is avro: set {URL_ENV} to the schema registry's "
                                    "base URL to compile it here", field=_field(query, s)) for s in subjects])
    client = RegistryClient(url)
    out: dict[str, RegistrySchema] = {}
    for subject in subjects:
        try:
            out[subject] = client.latest(subject)
        except (RegistryUnavailable, RegistryRefused) as exc:
            raise CompileError([Problem(f"the schema registry at {url}: {exc}", field=_field(query, subject))]
                               ) from exc
    return out


def compile_with_registry(query: QuerySpec, target: CompileTarget | None = None,
                          env: Mapping[str, str] | None = None) -> Plan:
    """``compile_query`` with the avro sources' latest schemas (``target``'s other settings kept)."""
    schemas = latest_schemas(query, env)
    if not schemas:
        return compile_query(query, target)
    base = target or CompileTarget()
    return compile_query(query, CompileTarget(spark_version=base.spark_version, spark_conf=base.spark_conf,
                                              origin=base.origin, schemas=schemas))


def _sink_field(what: str) -> str:
    return "spec.sink.keyFormat" if what in (NEW_KEY_SCHEMA, NEW_PROTOBUF_KEY_SCHEMA) else "spec.sink.format"


def sink_refusal(questions: list[SinkQuestion], env: Mapping[str, str] | None = None) -> str | None:
    """The registry's refusal of the first of ``questions`` it calls incompatible with its subject, in
    the webhook's words (``sluice.core.formats.registry.incompatibility``); None: all compatible (a
    subject without versions accepts anything), or nothing to ask. Raises ``CompileError`` naming the
    sink's field without ``$SLUICE_SCHEMA_REGISTRY_URL``, or when the registry does not answer."""
    if not questions:
        return None
    url = (env if env is not None else os.environ).get(URL_ENV)
    if not url:
        raise CompileError([Problem(f"{what} goes under subject {schema.subject!r}: set {URL_ENV} to the "
                                    "schema registry's base URL to check its compatibility here",
                                    field=_sink_field(what)) for schema, what in questions])
    client = RegistryClient(url)
    for schema, what in questions:
        try:
            answer = client.compatibility(schema.subject, schema.schema_, schema.schema_type)
        except (RegistryUnavailable, RegistryRefused) as exc:
            raise CompileError([Problem(f"the schema registry at {url}: {exc}", field=_sink_field(what))]
                               ) from exc
        refused = incompatibility(schema.subject, answer, what) if answer is not None else None
        if refused is not None:
            return refused
    return None
