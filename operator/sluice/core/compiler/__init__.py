"""SQL -> execution plan compiler. Public API: :func:`compile_query`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sluice.core.compiler.base import field_specs
from sluice.core.compiler.casts import decimal_problem_in
from sluice.core.compiler.checks import check_output_mode, sink_key
from sluice.core.compiler.intervals import IntervalError, normalize_interval
from sluice.core.compiler.keys import key_problems, sink_key_problems, sink_key_schema
from sluice.core.compiler.planner import Planner
from sluice.core.compiler.registry import resolve_keys, resolve_sources, sink_schema, source_subjects
from sluice.core.compiler.scope import did_you_mean
from sluice.core.compiler.sqlparse import parse_sql
from sluice.core.compiler.sqltext import SqlFailure
from sluice.core.errors import CompileError, Problem
from sluice.core.plan import meaning
from sluice.core.plan.model import (
    SPARK_VERSION,
    KafkaSinkV1,
    PinnedSettings,
    Plan,
    RegistrySchema,
    TriggerSpec,
)
from sluice.core.sparkversion import BadVersion
from sluice.core.spec import Column, QuerySpec, Source
from sluice.core.types import TypeParseError, parse_type

__all__ = ["CompileTarget", "compile_query", "source_subjects", "spec_problems"]


@dataclass(frozen=True)
class CompileTarget:
    """What a plan is compiled for, besides the query: the Spark it will run on and the QueryCluster's
    Spark settings (those of ``sluice.core.plan.meaning`` enter the plan; the rest do not)."""

    spark_version: str = SPARK_VERSION
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    #: where the settings come from, for error messages
    origin: str = "the QueryCluster"
    #: the schema registry's answer for each avro source subject (by subject): the version a new plan
    #: pins (the compiler does no I/O; the operator fetches them, ``source_subjects`` names them)
    schemas: Mapping[str, RegistrySchema] = field(default_factory=dict)

    def settings(self, shuffle_partitions: int) -> PinnedSettings:
        """The plan's pinned settings (:class:`CompileError` naming the field when they cannot be)."""
        conf = dict(self.spark_conf)
        try:
            pinned = meaning.pinned_conf(self.spark_version, conf)
        except BadVersion as exc:
            raise CompileError([Problem(str(exc), field=f"{self.origin} spec.sparkVersion")]) from None
        problems = [Problem(p, field=f"{self.origin} spec.sparkConf") for p in meaning.conf_problems(conf)]
        if problems:
            raise CompileError(problems)
        return PinnedSettings.model_validate({"shuffle_partitions": shuffle_partitions,
                                              **meaning.typed_overrides(conf), "conf": pinned})


_TYPE_HINT = (
    "use a Spark SQL type "
    "such as string, int, bigint, double, boolean, timestamp, date, decimal(10,2), "
    "array<string>, map<string,int> or struct<a:int>"
)


def _type_problem(column: Column, at: str) -> Problem | None:
    """A column type that does not parse (``at``: the field to name)."""
    try:
        parse_type(column.type)
    except TypeParseError as exc:
        reason = decimal_problem_in(column.type) or str(exc)
        return Problem(f"column '{column.name}': {reason}; {_TYPE_HINT}", field=at)
    return None


def _first_declared(source: Source) -> dict[str, int]:
    """Each column name of a source (lower case) and the position of its first declaration."""
    first: dict[str, int] = {}
    for j, column in enumerate(source.columns):
        first.setdefault(column.name.lower(), j)
    return first


def _column_problems(source: Source, where: str) -> list[Problem]:
    """Columns declared twice (names compared without case) and types that do not parse."""
    problems: list[Problem] = []
    first = _first_declared(source)
    for j, column in enumerate(source.columns):
        if first[column.name.lower()] != j:
            problems.append(
                Problem(
                    f"column '{column.name}' is declared twice in source '{source.name}'",
                    field=f"{where}.schema[{j}].name",
                )
            )
        type_problem = _type_problem(column, f"{where}.schema[{j}].type")
        if type_problem is not None:
            problems.append(type_problem)
    return problems


def _event_time_problem(source: Source, col_name: str, where: str) -> Problem | None:
    """The event-time column must be a declared column (the first of its name) of type timestamp."""
    j = _first_declared(source).get(col_name.lower())
    if j is None:
        return Problem(
            f"event-time column '{col_name}' does not exist in source '{source.name}'"
            + did_you_mean(col_name, [c.name for c in source.columns]),
            field=f"{where}.eventTime.column",
        )
    try:
        typ = parse_type(source.columns[j].type).render()
    except TypeParseError:
        return None  # reported as the column's type problem
    if typ != "timestamp":
        return Problem(
            f"event-time column '{col_name}' of source '{source.name}' must be a timestamp, "
            f"but it is declared as {typ}",
            field=f"{where}.eventTime.column",
        )
    return None


@dataclass(frozen=True)
class _SourceCheck:
    """What checking one source found: its problems, and its normalized watermark delay (none
    without event time or when the delay is invalid)."""

    problems: list[Problem]
    delay: str | None = None


def _check_source(source: Source, where: str) -> _SourceCheck:
    """The problems of one source's columns and event time, and its watermark delay."""
    problems = _column_problems(source, where) + key_problems(source, where)
    if source.event_time is None:
        return _SourceCheck(problems)
    event_time_problem = _event_time_problem(source, source.event_time.column, where)
    if event_time_problem is not None:
        problems.append(event_time_problem)
    try:
        return _SourceCheck(problems, normalize_interval(source.event_time.watermark))
    except IntervalError as exc:
        problems.append(Problem(f"invalid watermark delay: {exc}", field=f"{where}.eventTime.watermark"))
        return _SourceCheck(problems)


def _trigger_problems(spec: QuerySpec) -> list[Problem]:
    if spec.trigger.processing_time:
        try:
            normalize_interval(spec.trigger.processing_time)
        except IntervalError as exc:
            return [Problem(f"invalid trigger interval: {exc}", field="spec.trigger.processingTime")]
    return []


def _sink_problems(spec: QuerySpec) -> list[Problem]:
    """A compacted sink topic keeps the newest record per key: only an update-mode output with a key
    has one record per key that a newer one replaces."""
    sink, field = spec.sink, "spec.sink.cleanupPolicy"
    if sink.cleanup_policy != "compact":
        return []
    problems = []
    if sink.output_mode != "update":
        problems.append(Problem(
            f"cleanupPolicy compact needs outputMode update (got {sink.output_mode}): compaction keeps "
            "only the newest record of each key, which is the result only when each record updates its "
            "key's row", field=field))
    if not sink.key:
        problems.append(Problem(
            "cleanupPolicy compact needs a key (spec.sink.key): Kafka refuses records without a key on a "
            "compacted topic", field=field))
    return problems


def spec_problems(spec: QuerySpec) -> tuple[list[Problem], dict[str, str]]:
    """Problems in the sources part of the spec (names, types, event time); watermark delays."""
    problems: list[Problem] = []
    delays: dict[str, str] = {}
    first_use: dict[str, int] = {}
    for i, source in enumerate(spec.sources):
        where = f"spec.sources[{i}]"
        first = first_use.setdefault(source.name.lower(), i)
        if first != i:
            problems.append(
                Problem(
                    f"source name '{source.name}' is used twice (also by spec.sources[{first}]); "
                    "source names must be unique",
                    field=f"{where}.name",
                )
            )
        checked = _check_source(source, where)
        problems += checked.problems
        if checked.delay is not None:
            delays[source.name] = checked.delay
    problems += _trigger_problems(spec)
    problems += _sink_problems(spec)
    return problems, delays


def compile_query(spec: QuerySpec, target: CompileTarget | None = None) -> Plan:
    """Compile the query part of a StreamingQuery into a pinned plan (hash set) for ``target``
    (default: the Spark this operator was built with, no cluster settings)."""
    target = target or CompileTarget()
    resolved = resolve_sources(spec, target.schemas)
    keys = resolve_keys(resolved.spec, target.schemas)
    if resolved.problems or keys.problems:
        raise CompileError(resolved.problems + keys.problems)
    spec = keys.spec
    problems, delays = spec_problems(spec)
    if problems:
        raise CompileError(problems)
    try:
        root, text = parse_sql(spec.sql)
        planner = Planner(spec, text, delays, resolved.schemas, keys.schemas)
        rel = planner.plan_query(root)
        check_output_mode(spec, planner)
    except SqlFailure as failure:
        raise CompileError([failure.problem]) from None
    key, key_problems = sink_key(spec, rel)
    if key_problems:
        raise CompileError(key_problems)
    out = field_specs(rel.fields)
    value_schema, schema_problems = sink_schema(spec, out)
    key_schema, key_schema_problems = sink_key_schema(spec, key, out)
    schema_problems += key_schema_problems + sink_key_problems(spec, key, out)
    if schema_problems:
        raise CompileError(schema_problems)
    trigger = TriggerSpec(
        processing_time=normalize_interval(spec.trigger.processing_time)
        if spec.trigger.processing_time
        else None
    )
    sink = KafkaSinkV1(
        id="sink",
        inputs=[rel.step_id],
        schema_=out,
        topic=spec.sink.topic,
        format=spec.sink.format,
        value_schema=value_schema,
        key=key,
        key_format=None if spec.sink.key_format == "string" else spec.sink.key_format,
        key_schema=key_schema,
        output_mode=spec.sink.output_mode,
        delivery=spec.sink.delivery,
        trigger=trigger,
    )
    plan = Plan(
        spark_version=target.spark_version,
        settings=target.settings(spec.shuffle_partitions),
        steps=[*planner.state.steps, sink],
        output_schema=out,
    )
    return plan.with_hash()
