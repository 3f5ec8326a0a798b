"""Planning the aggregation of a SELECT: GROUP BY (plain, window, session_window), HAVING, and the
projection over the aggregated rows (the SELECT itself: :mod:`sluice.core.compiler.select`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.tokens import TokenType

from sluice.core.compiler.base import Planning, Stateful, field_specs
from sluice.core.compiler.exprs import AGGREGATES, Compiled, ExprCompiler, column_node, is_time_window
from sluice.core.compiler.intervals import IntervalError, interval_millis, normalize_interval
from sluice.core.compiler.scope import Field, Relation
from sluice.core.compiler.sqltext import SqlFailure, SqlText
from sluice.core.plan.model import (
    AggregateCall,
    AggregateV1,
    NamedExpr,
    SessionWindowAggregateV1,
    SessionWindowSpec,
    WindowAggregateV1,
    WindowSpec,
)
from sluice.core.types import WINDOW_STRUCT, SparkType

_PASSIVE = (exp.Literal, exp.Boolean, exp.Null, exp.Identifier, exp.DataType, exp.Var, exp.DataTypeParam)


class PostAggregateCompiler(ExprCompiler):
    """Compiles SELECT/HAVING expressions over the output of an aggregation."""

    def __init__(
        self,
        text: SqlText,
        agg_rel: Relation,
        context: str,
        pre_rel: Relation,
        replacements: dict[str, tuple[str, SparkType]],
        kinds: set[type[exp.Expr]],
    ) -> None:
        super().__init__(text, agg_rel, context)
        self.pre_rel = pre_rel
        self.replacements = replacements
        #: node classes of the grouping keys and aggregates: only such nodes can be replaced
        self.kinds = kinds

    def intercept(self, node: exp.Expr) -> tuple[exp.Expr, SparkType] | None:
        if isinstance(node, _PASSIVE) or (type(node) not in self.kinds and not isinstance(node, exp.Column)):
            return None
        is_agg = isinstance(node, exp.AggFunc)
        if not is_agg and node.find(exp.AggFunc) is not None:
            return None
        pre = ExprCompiler(
            self.text, self.pre_rel, self.context, allow_aggregates=True, allow_time_windows=True
        )
        try:
            compiled: Compiled | None = pre.compile(node)
            error: SqlFailure | None = None
        except SqlFailure as exc:
            compiled, error = None, exc
        if compiled is not None and compiled.sql in self.replacements:
            name, typ = self.replacements[compiled.sql]
            return column_node(name), typ
        if is_agg:
            if error is not None:
                raise error
            raise self.fail(f"internal: aggregate '{compiled.sql if compiled else ''}' was not planned", node)
        if isinstance(node, exp.Column) and compiled is not None:
            raise self.fail(
                f"column '{compiled.sql}' must appear in GROUP BY or be used inside an aggregate function "
                "(count, sum, min, max, avg, approx_count_distinct)",
                node,
            )
        return None


def _resolve_group_node(
    p: Planning, rel: Relation, node: exp.Expr, items: list[tuple[str | None, exp.Expr]]
) -> exp.Expr:
    if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
        index = int(str(node.this))
        if not 1 <= index <= len(items):
            raise p.text.fail(f"GROUP BY {index} refers to no column: the SELECT has {len(items)}", node)
        return items[index - 1][1]
    if isinstance(node, exp.Column) and not node.table and not rel.lookup(node.name):
        for explicit, item in items:
            if explicit and explicit.lower() == node.name.lower():
                return item
    return node


@dataclass
class _Output:
    """The aggregation's output while it is being named: columns, and what each replaces."""

    select_names: dict[str, str]
    used: set[str] = field(default_factory=set)
    replacements: dict[str, tuple[str, SparkType]] = field(default_factory=dict)
    fields: list[Field] = field(default_factory=list)
    watermarks: set[tuple[str | None, str]] = field(default_factory=set)

    def name(self, sql: str, fallback: str) -> str:
        """The SELECT's name for ``sql`` unless taken (then ``fallback``); marks it taken."""
        wanted = self.select_names.get(sql)
        chosen = wanted if wanted and wanted.lower() not in self.used else fallback
        self.used.add(chosen.lower())
        return chosen

    def add(self, sql: str, name: str, typ: SparkType) -> None:
        self.replacements[sql] = (name, typ)
        self.fields.append(Field(name, typ))


def plan_aggregate(
    p: Planning,
    rel: Relation,
    items: list[tuple[str | None, exp.Expr]],
    group: exp.Group | None,
    having: exp.Having | None,
) -> Relation:
    group_nodes = [
        _resolve_group_node(p, rel, g, items)
        for g in (group.expressions if group else [])
        if not (isinstance(g, exp.Tuple) and not g.expressions)
    ]
    windows = _check_grouping(p, rel, group, group_nodes)
    pre = ExprCompiler(p.text, rel, "GROUP BY", allow_time_windows=True)
    keys = _grouping_keys(p, pre, group_nodes, windows)
    agg_nodes = _aggregate_nodes(items, having)
    agg_compiler = ExprCompiler(p.text, rel, "SELECT", allow_aggregates=True)
    aggs: dict[str, tuple[Compiled, exp.AggFunc]] = {}
    for agg in agg_nodes:
        compiled = agg_compiler.compile(agg)
        aggs.setdefault(compiled.sql, (compiled, agg))
    out = _Output(_select_names(p.text, rel, items))
    window_step_args: dict[str, object] = {}
    kind = "aggregate"
    if windows:
        window = windows[0]
        assert isinstance(window, exp.Anonymous)
        kind = "window" if str(window.this).lower() == "window" else "session"
        window_step_args = _plan_window(p, rel, pre, window, kind, out)
    else:
        anchor = group_nodes[0] if group_nodes else (agg_nodes[0] if agg_nodes else None)
        p.state.stateful.append(_stateful(p, "aggregate", anchor, False))
    named_keys = _name_keys(keys, out)
    calls = _aggregate_calls(aggs, agg_compiler, out)
    step_id = _append_aggregate_step(p, rel, kind, out, named_keys, calls, window_step_args)
    agg_rel = Relation(
        step_id,
        out.fields,
        watermarks=out.watermarks,
        aggregated=True,
        joined=rel.joined,
        describe="the aggregation's output",
    )
    kinds = {type(n) for n in group_nodes} | {type(n) for n in agg_nodes}
    return _project_aggregated(p, rel, agg_rel, items, having, out.replacements, kinds)


def _check_grouping(
    p: Planning, rel: Relation, group: exp.Group | None, group_nodes: list[exp.Expr]
) -> list[exp.Expr]:
    """Refuse chained aggregations and unsupported time windows; return the window(s) grouped by."""
    text = p.text
    first_pos = text.token_offset(TokenType.GROUP_BY) if group is not None else None
    if rel.aggregated or rel.deduplicated:
        raise text.fail(
            "this aggregation reads the output of another aggregation (or DISTINCT); chained stateful "
            "aggregations are not supported: aggregate once, or split the query in two",
            group_nodes[0] if group_nodes else None,
            offset=first_pos if not group_nodes else None,
        )
    windows = [g for g in group_nodes if is_time_window(g)]
    if len(windows) > 1:
        raise text.fail("GROUP BY can hold only one window(...) or session_window(...)", windows[1])
    if windows and len(group_nodes) == 1 and str(windows[0].this).lower() == "session_window":
        raise text.fail(
            "a streaming session_window(...) aggregation needs at least one more grouping key "
            "(e.g. GROUP BY session_window(ts, '5 minutes'), user_id); Spark refuses a global session window",
            windows[0],
        )
    return windows


def _grouping_keys(
    p: Planning, pre: ExprCompiler, group_nodes: list[exp.Expr], windows: list[exp.Expr]
) -> list[tuple[Compiled, exp.Expr]]:
    keys: list[tuple[Compiled, exp.Expr]] = []
    for g in group_nodes:
        if g in windows:
            continue
        if g.find(exp.AggFunc) is not None:
            raise p.text.fail("aggregate functions cannot be used in GROUP BY", g.find(exp.AggFunc))
        keys.append((pre.compile(g), g))
    return keys


def _aggregate_nodes(
    items: list[tuple[str | None, exp.Expr]], having: exp.Having | None
) -> list[exp.AggFunc]:
    """The aggregate calls of the SELECT list and HAVING, in order of first appearance."""
    agg_nodes: list[exp.AggFunc] = []
    for node in [n for _, n in items] + ([having.this] if having is not None else []):
        for agg in node.find_all(exp.AggFunc):
            if agg.find_ancestor(exp.AggFunc) is None or agg.find_ancestor(exp.AggFunc) is agg:
                agg_nodes.append(agg)
    return agg_nodes


def _select_names(text: SqlText, rel: Relation, items: list[tuple[str | None, exp.Expr]]) -> dict[str, str]:
    """Compiled SQL -> the name the SELECT gives it (keys and aggregates prefer the SELECT's names)."""
    probe = ExprCompiler(text, rel, "SELECT", allow_aggregates=True, allow_time_windows=True)
    select_names: dict[str, str] = {}
    for explicit, node in items:
        try:
            c = probe.compile(node)
        except SqlFailure:
            continue
        if explicit:
            select_names.setdefault(c.sql, explicit)
        elif isinstance(c.node, exp.Column | exp.Dot):
            select_names.setdefault(c.sql, c.node.name)
    return select_names


def _plan_window(
    p: Planning, rel: Relation, pre: ExprCompiler, window: exp.Anonymous, kind: str, out: _Output
) -> dict[str, object]:
    """Name the window column and return the window (or session) arguments of the step."""
    wc = pre.compile(window)
    wname = out.name(wc.sql, "window" if kind == "window" else "session_window")
    out.add(wc.sql, wname, WINDOW_STRUCT)
    time_sql, time_watermarked, durations = _window_args(p, rel, window, kind)
    if time_watermarked:
        out.watermarks.add((None, wname.lower()))
    p.state.stateful.append(_stateful(p, kind, window, time_watermarked))
    if kind == "window":
        spec = WindowSpec(
            column=time_sql,
            size=durations[0],
            slide=durations[1] if len(durations) > 1 else None,
            name=wname,
        )
        return {"window": spec}
    return {"session": SessionWindowSpec(column=time_sql, gap=durations[0], name=wname)}


def _name_keys(keys: list[tuple[Compiled, exp.Expr]], out: _Output) -> list[NamedExpr]:
    named_keys: list[NamedExpr] = []
    for i, (compiled, _) in enumerate(keys, start=1):
        if compiled.sql in out.replacements:
            continue
        default = compiled.node.name if isinstance(compiled.node, exp.Column | exp.Dot) else f"_key_{i}"
        kname = out.name(compiled.sql, default if default.lower() not in out.used else f"_key_{i}")
        out.add(compiled.sql, kname, compiled.type)
        named_keys.append(NamedExpr(name=kname, expr=compiled.sql))
    return named_keys


def _aggregate_calls(
    aggs: dict[str, tuple[Compiled, exp.AggFunc]], agg_compiler: ExprCompiler, out: _Output
) -> list[AggregateCall]:
    calls: list[AggregateCall] = []
    for i, (sql, (compiled, node)) in enumerate(aggs.items(), start=1):
        aname = out.name(sql, f"_agg_{i}")
        out.add(sql, aname, compiled.type)
        function = AGGREGATES[type(node)]
        if isinstance(node.this, exp.Star) or node.this is None:
            args = ["*"]
        else:
            args = [agg_compiler.compile(node.this).sql]
            extra = node.args.get("accuracy") if function == "approx_count_distinct" else None
            if extra is not None:
                args.append(agg_compiler.compile(extra).sql)
        calls.append(AggregateCall(name=aname, function=function, args=args, expr=sql))  # type: ignore[arg-type]
    return calls


_STEP_KINDS = {"aggregate": "aggregate", "window": "window-aggregate", "session": "session-aggregate"}


def _append_aggregate_step(
    p: Planning,
    rel: Relation,
    kind: str,
    out: _Output,
    named_keys: list[NamedExpr],
    calls: list[AggregateCall],
    window_step_args: dict[str, object],
) -> str:
    schema = field_specs(out.fields)
    step_id = p.state.next_id(_STEP_KINDS[kind])
    common: dict[str, object] = {
        "id": step_id, "inputs": [rel.step_id], "schema_": schema, "keys": named_keys, "aggregates": calls
    }
    if kind == "window":
        p.state.steps.append(WindowAggregateV1(**common, **window_step_args))  # type: ignore[arg-type]
    elif kind == "session":
        p.state.steps.append(SessionWindowAggregateV1(**common, **window_step_args))  # type: ignore[arg-type]
    else:
        p.state.steps.append(
            AggregateV1(id=step_id, inputs=[rel.step_id], schema_=schema, keys=named_keys, aggregates=calls)
        )
    return step_id


def _project_aggregated(
    p: Planning,
    rel: Relation,
    agg_rel: Relation,
    items: list[tuple[str | None, exp.Expr]],
    having: exp.Having | None,
    replacements: dict[str, tuple[str, SparkType]],
    kinds: set[type[exp.Expr]],
) -> Relation:
    """HAVING and the SELECT list over the aggregation's output."""
    if having is not None:
        post = PostAggregateCompiler(p.text, agg_rel, "HAVING", rel, replacements, kinds)
        agg_rel = p.add_filter(agg_rel, having.this, "HAVING", compiler=post)
    post = PostAggregateCompiler(p.text, agg_rel, "SELECT", rel, replacements, kinds)
    out = []
    for explicit, node in items:
        compiled = post.compile(node)
        out.append((p.output_name(explicit, node, compiled), compiled, node))
    return p.add_project(agg_rel, out)


def _window_args(p: Planning, rel: Relation, window: exp.Anonymous, kind: str) -> tuple[str, bool, list[str]]:
    fname = str(window.this).lower()
    args = list(window.expressions)
    max_args = 3 if kind == "window" else 2
    if len(args) < 2:
        raise p.text.fail(
            f"{fname}(...) needs a time column and a duration, e.g. {fname}(ts, '5 minutes')", window
        )
    if len(args) > max_args:
        what = "a start offset" if kind == "window" else "more than a gap"
        raise p.text.fail(
            f"{fname}(...) with {what} is not supported; use {fname}(ts, '5 minutes'"
            + (", '1 minute')" if kind == "window" else ")"),
            args[max_args],
        )
    compiler = ExprCompiler(p.text, rel, f"{fname}(...)")
    time = compiler.compile(args[0])
    if not isinstance(time.node, exp.Column):
        raise p.text.fail(f"the first argument of {fname}(...) must be a timestamp column", args[0])
    if time.type.name != "timestamp":
        raise p.text.fail(
            f"the first argument of {fname}(...) must be a timestamp column, but '{time.sql}' is a "
            f"{time.type.render()}",
            args[0],
        )
    field = compiler.referenced[-1]
    durations = []
    for arg in args[1:]:
        if not (isinstance(arg, exp.Literal) and arg.is_string) and not isinstance(arg, exp.Interval):
            raise p.text.fail(f"durations of {fname}(...) must be literals such as '5 minutes'", arg)
        try:
            durations.append(
                normalize_interval(
                    arg.sql(dialect="spark") if isinstance(arg, exp.Interval) else str(arg.this)
                )
            )
        except IntervalError as exc:
            raise p.text.fail(f"invalid duration in {fname}(...): {exc}", arg) from exc
    if (
        kind == "window"
        and len(durations) == 2
        and interval_millis(durations[1]) > interval_millis(durations[0])
    ):
        raise p.text.fail(
            f"the slide of window(...) ('{durations[1]}') is longer than the window ('{durations[0]}'): "
            "Spark requires the slide to be at most the window duration (rows between windows would "
            f"be lost); did you mean window({time.sql}, '{durations[1]}', '{durations[0]}')?",
            args[2],
        )
    return time.sql, rel.is_watermarked(field), durations


def _stateful(p: Planning, kind: str, node: exp.Expr | None, watermarked: bool) -> Stateful:
    return Stateful(kind, node, p.text.node_offset(node), watermarked)
