"""SQL -> execution plan compiler. Public API: :func:`compile_query`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sluice.core.compiler.base import field_specs
from sluice.core.compiler.casts import decimal_problem_in
from sluice.core.compiler.checks import check_output_mode, sink_key
from sluice.core.compiler.intervals import IntervalError, normalize_interval
from sluice.core.compiler.planner import Planner
from sluice.core.compiler.scope import did_you_mean
from sluice.core.compiler.sqlparse import parse_sql
from sluice.core.compiler.sqltext import SqlFailure
from sluice.core.errors import CompileError, Problem
from sluice.core.plan import meaning
from sluice.core.plan.model import SPARK_VERSION, KafkaSinkV1, PinnedSettings, Plan, TriggerSpec
from sluice.core.sparkversion import BadVersion
from sluice.core.spec import QuerySpec
from sluice.core.types import TypeParseError, parse_type

__all__ = ["CompileTarget", "compile_query", "spec_problems"]


@dataclass(frozen=True)
class CompileTarget:
    """What a plan is compiled for, besides the query: the Spark it will run on and the QueryCluster's
    Spark settings (those of ``sluice.core.plan.meaning`` enter the plan; the rest do not)."""

    spark_version: str = SPARK_VERSION
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    #: where the settings come from, for error messages
    origin: str = "the QueryCluster"

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


def spec_problems(spec: QuerySpec) -> tuple[list[Problem], dict[str, str]]:
    """Problems in the sources part of the spec (names, types, event time); watermark delays."""
    problems: list[Problem] = []
    delays: dict[str, str] = {}
    seen: dict[str, int] = {}
    for i, source in enumerate(spec.sources):
        where = f"spec.sources[{i}]"
        if source.name.lower() in seen:
            problems.append(
                Problem(
                    f"source name '{source.name}' is used twice (also by "
                    f"spec.sources[{seen[source.name.lower()]}]); "
                    "source names must be unique",
                    field=f"{where}.name",
                )
            )
        seen.setdefault(source.name.lower(), i)
        columns: dict[str, int] = {}
        j: int | None
        for j, column in enumerate(source.schema_):
            if column.name.lower() in columns:
                problems.append(
                    Problem(
                        f"column '{column.name}' is declared twice in source '{source.name}'",
                        field=f"{where}.schema[{j}].name",
                    )
                )
            columns.setdefault(column.name.lower(), j)
            try:
                parse_type(column.type)
            except TypeParseError as exc:
                reason = decimal_problem_in(column.type) or str(exc)
                problems.append(
                    Problem(
                        f"column '{column.name}': {reason}; use a Spark SQL type "
                        "such as string, int, bigint, double, boolean, timestamp, date, decimal(10,2), "
                        "array<string>, map<string,int> or struct<a:int>",
                        field=f"{where}.schema[{j}].type",
                    )
                )
        if source.event_time is not None:
            col_name = source.event_time.column
            j = columns.get(col_name.lower())
            if j is None:
                problems.append(
                    Problem(
                        f"event-time column '{col_name}' does not exist in source '{source.name}'"
                        + did_you_mean(col_name, [c.name for c in source.schema_]),
                        field=f"{where}.eventTime.column",
                    )
                )
            else:
                try:
                    typ = parse_type(source.schema_[j].type).render()
                except TypeParseError:
                    typ = None
                if typ is not None and typ != "timestamp":
                    problems.append(
                        Problem(
                            f"event-time column '{col_name}' of source '{source.name}' must be a timestamp, "
                            f"but it is declared as {typ}",
                            field=f"{where}.eventTime.column",
                        )
                    )
            try:
                delays[source.name] = normalize_interval(source.event_time.watermark)
            except IntervalError as exc:
                problems.append(
                    Problem(f"invalid watermark delay: {exc}", field=f"{where}.eventTime.watermark")
                )
    if spec.trigger.processing_time:
        try:
            normalize_interval(spec.trigger.processing_time)
        except IntervalError as exc:
            problems.append(Problem(f"invalid trigger interval: {exc}", field="spec.trigger.processingTime"))
    return problems, delays


def compile_query(spec: QuerySpec, target: CompileTarget | None = None) -> Plan:
    """Compile the query part of a StreamingQuery into a pinned plan (hash set) for ``target``
    (default: the Spark this operator was built with, no cluster settings)."""
    target = target or CompileTarget()
    problems, delays = spec_problems(spec)
    if problems:
        raise CompileError(problems)
    try:
        root, text = parse_sql(spec.sql)
        planner = Planner(spec, text, delays)
        rel = planner.plan_query(root)
        check_output_mode(spec, planner)
    except SqlFailure as failure:
        raise CompileError([failure.problem]) from None
    key, key_problems = sink_key(spec, rel)
    if key_problems:
        raise CompileError(key_problems)
    out = field_specs(rel.fields)
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
        key=key,
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
