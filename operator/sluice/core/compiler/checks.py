"""Whole-query checks: output mode against stateful operators (as Spark would refuse), sink key."""

from __future__ import annotations

from sluice.core.compiler.base import Planning
from sluice.core.compiler.scope import Relation, did_you_mean
from sluice.core.compiler.sqltext import SqlFailure
from sluice.core.errors import Problem
from sluice.core.spec import QuerySpec

MODE_FIELD = "spec.sink.outputMode"


def check_output_mode(spec: QuerySpec, planner: Planning) -> None:
    mode = spec.sink.output_mode
    stateful = planner.state.stateful
    text = planner.text
    aggs = [s for s in stateful if s.kind in ("aggregate", "window", "session")]
    joins = [s for s in stateful if s.kind == "join"]

    def fail(message: str, offset: int | None) -> Exception:
        if offset is None:  # nothing in the SQL to point at: the output mode is the problem
            return SqlFailure(Problem(message, field=MODE_FIELD))
        problem = text.problem(message, offset=offset)
        return SqlFailure(
            Problem(problem.message, field=MODE_FIELD, line=problem.line, column=problem.column)
        )

    if mode == "complete" and not aggs:
        raise fail(
            "outputMode complete needs an aggregation (GROUP BY): without one Spark would have to keep "
            "and re-emit every row; use append or update",
            None,
        )
    if mode in ("update", "complete") and joins:
        raise fail(
            f"a stream-stream join only supports outputMode append (Spark refuses {mode} mode for "
            "joins); set spec.sink.outputMode: append",
            joins[0].offset,
        )
    sessions = [s for s in aggs if s.kind == "session"]
    if mode == "update" and sessions:
        raise fail(
            "outputMode update is not supported with session_window(...): a session's range changes as "
            "events arrive, so its rows cannot be upserted (Spark refuses it); use append",
            sessions[0].offset,
        )
    if mode == "append":
        for agg in aggs:
            if agg.kind == "aggregate":
                raise fail(
                    "outputMode append cannot emit an aggregation without an event-time window: a group is "
                    "never final; use outputMode update (or complete), or group by window(ts, ...) over "
                    "a watermarked column",
                    agg.offset,
                )
            if not agg.watermarked:
                raise fail(
                    "outputMode append needs a watermark on the window's time column so Spark knows when "
                    "a window is final; declare eventTime on the source (for this column) or use update",
                    agg.offset,
                )


def sink_key(spec: QuerySpec, rel: Relation) -> tuple[list[str], list[Problem]]:
    names = [f.name for f in rel.fields]
    key: list[str] = []
    problems: list[Problem] = []
    for i, column in enumerate(spec.sink.key):
        match = [n for n in names if n.lower() == column.lower()]
        if not match:
            problems.append(
                Problem(
                    f"sink key column '{column}' is not an output column of the query"
                    + did_you_mean(column, names),
                    field=f"spec.sink.key[{i}]",
                )
            )
        else:
            key.append(match[0])
    return key, problems
