"""Planning one SELECT: WHERE, GROUP BY (plain, window, session_window), HAVING, projection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.tokens import TokenType

from sluice.core.compiler.exprs import AGGREGATES, Compiled, ExprCompiler, column_node, is_time_window
from sluice.core.compiler.intervals import IntervalError, interval_millis, normalize_interval
from sluice.core.compiler.scope import Field, Relation
from sluice.core.compiler.sqlparse import SqlFailure, SqlText
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

if TYPE_CHECKING:
    from sluice.core.compiler.planner import Planner

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


def plan_select(p: Planner, sel: exp.Select) -> Relation:
    from_ = sel.args.get("from_") or sel.args.get("from")
    if from_ is None:
        raise p.text.fail("the query reads no source: add FROM <source name>", sel)
    for window in sel.find_all(exp.Window):
        raise p.text.fail(
            "window functions (OVER ...) are not supported on streams: Spark Structured Streaming refuses "
            "non-time-based windows; group by window(ts, '5 minutes') for time windows",
            offset=p.text.word_offset("over", after=(p.text.node_offset(window) or 0) - 1),
        )
    rel = p.plan_from_item(from_.this)
    joins = sel.args.get("joins") or []
    if len(joins) > 1:
        raise p.text.fail(
            "only one join per SELECT is supported; join the result of a subquery to the third source",
            joins[1].this,
        )
    for join in joins:
        rel = p.plan_join(rel, join)
    where = sel.args.get("where")
    if where is not None:
        rel = p.add_filter(rel, where.this, "WHERE")
    items = p.select_items(sel, rel)
    group = sel.args.get("group")
    having = sel.args.get("having")
    has_aggs = any(n.find(exp.AggFunc) is not None for _, n in items) or (
        having is not None and having.find(exp.AggFunc) is not None
    )
    if group is not None or has_aggs:
        rel = plan_aggregate(p, rel, items, group, having)
    else:
        if having is not None:
            raise p.text.fail(
                "HAVING needs a GROUP BY or an aggregate; use WHERE to filter rows",
                offset=p.text.token_offset(TokenType.HAVING),
            )
        compiler = ExprCompiler(p.text, rel, "SELECT")
        out = []
        for explicit, node in items:
            compiled = compiler.compile(node)
            out.append((p.output_name(explicit, node, compiled), compiled, node))
        rel = p.add_project(rel, out)
    distinct = sel.args.get("distinct")
    if distinct is not None:
        if distinct.args.get("on"):
            raise p.text.fail("DISTINCT ON is not supported; use SELECT DISTINCT", distinct)
        rel = p.add_dedup(rel, sel)
    return rel


def _resolve_group_node(
    p: Planner, rel: Relation, node: exp.Expr, items: list[tuple[str | None, exp.Expr]]
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


def plan_aggregate(
    p: Planner,
    rel: Relation,
    items: list[tuple[str | None, exp.Expr]],
    group: exp.Group | None,
    having: exp.Having | None,
) -> Relation:
    text = p.text
    group_nodes = [
        _resolve_group_node(p, rel, g, items)
        for g in (group.expressions if group else [])
        if not (isinstance(g, exp.Tuple) and not g.expressions)
    ]
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
    pre = ExprCompiler(text, rel, "GROUP BY", allow_time_windows=True)
    keys: list[tuple[Compiled, exp.Expr]] = []
    for g in group_nodes:
        if g in windows:
            continue
        if g.find(exp.AggFunc) is not None:
            raise text.fail("aggregate functions cannot be used in GROUP BY", g.find(exp.AggFunc))
        keys.append((pre.compile(g), g))
    # aggregate calls, in order of first appearance
    agg_nodes: list[exp.AggFunc] = []
    for node in [n for _, n in items] + ([having.this] if having is not None else []):
        for agg in node.find_all(exp.AggFunc):
            if agg.find_ancestor(exp.AggFunc) is None or agg.find_ancestor(exp.AggFunc) is agg:
                agg_nodes.append(agg)
    agg_compiler = ExprCompiler(text, rel, "SELECT", allow_aggregates=True)
    aggs: dict[str, tuple[Compiled, exp.AggFunc]] = {}
    for agg in agg_nodes:
        compiled = agg_compiler.compile(agg)
        aggs.setdefault(compiled.sql, (compiled, agg))

    # names: prefer the SELECT's names for keys and aggregates
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

    def select_name(sql: str) -> str | None:
        return select_names.get(sql)

    used: set[str] = set()

    def unique(name: str | None, fallback: str) -> str:
        chosen = name if name and name.lower() not in used else fallback
        used.add(chosen.lower())
        return chosen

    replacements: dict[str, tuple[str, SparkType]] = {}
    out_fields: list[Field] = []
    watermarks: set[tuple[str | None, str]] = set()
    window_step_args: dict[str, object] = {}
    kind = "aggregate"
    if windows:
        window = windows[0]
        assert isinstance(window, exp.Anonymous)
        kind = "window" if str(window.this).lower() == "window" else "session"
        wc = pre.compile(window)
        default = "window" if kind == "window" else "session_window"
        wname = unique(select_name(wc.sql), default)
        replacements[wc.sql] = (wname, WINDOW_STRUCT)
        out_fields.append(Field(wname, WINDOW_STRUCT))
        time_sql, time_watermarked, durations = _window_args(p, rel, window, kind)
        if time_watermarked:
            watermarks.add((None, wname.lower()))
        if kind == "window":
            window_step_args["window"] = WindowSpec(
                column=time_sql,
                size=durations[0],
                slide=durations[1] if len(durations) > 1 else None,
                name=wname,
            )
        else:
            window_step_args["session"] = SessionWindowSpec(column=time_sql, gap=durations[0], name=wname)
        p.state.stateful.append(_stateful(p, kind, window, time_watermarked))
    else:
        anchor = group_nodes[0] if group_nodes else (agg_nodes[0] if agg_nodes else None)
        p.state.stateful.append(_stateful(p, "aggregate", anchor, False))
    named_keys: list[NamedExpr] = []
    for i, (compiled, _) in enumerate(keys, start=1):
        if compiled.sql in replacements:
            continue
        default = compiled.node.name if isinstance(compiled.node, exp.Column | exp.Dot) else f"_key_{i}"
        kname = unique(select_name(compiled.sql), default if default.lower() not in used else f"_key_{i}")
        replacements[compiled.sql] = (kname, compiled.type)
        named_keys.append(NamedExpr(name=kname, expr=compiled.sql))
        out_fields.append(Field(kname, compiled.type))
    calls: list[AggregateCall] = []
    for i, (sql, (compiled, node)) in enumerate(aggs.items(), start=1):
        aname = unique(select_name(sql), f"_agg_{i}")
        replacements[sql] = (aname, compiled.type)
        function = AGGREGATES[type(node)]
        if isinstance(node.this, exp.Star) or node.this is None:
            args = ["*"]
        else:
            args = [agg_compiler.compile(node.this).sql]
            extra = node.args.get("accuracy") if function == "approx_count_distinct" else None
            if extra is not None:
                args.append(agg_compiler.compile(extra).sql)
        calls.append(AggregateCall(name=aname, function=function, args=args, expr=sql))  # type: ignore[arg-type]
        out_fields.append(Field(aname, compiled.type))
    from sluice.core.compiler.planner import field_specs

    schema = field_specs(out_fields)
    step_id = p.state.next_id(
        {"aggregate": "aggregate", "window": "window-aggregate", "session": "session-aggregate"}[kind]
    )
    if kind == "window":
        p.state.steps.append(
            WindowAggregateV1(
                id=step_id,
                inputs=[rel.step_id],
                schema_=schema,
                keys=named_keys,
                aggregates=calls,
                **window_step_args,
            )
        )  # type: ignore[arg-type]
    elif kind == "session":
        p.state.steps.append(
            SessionWindowAggregateV1(
                id=step_id,
                inputs=[rel.step_id],
                schema_=schema,
                keys=named_keys,
                aggregates=calls,
                **window_step_args,
            )
        )  # type: ignore[arg-type]
    else:
        p.state.steps.append(
            AggregateV1(id=step_id, inputs=[rel.step_id], schema_=schema, keys=named_keys, aggregates=calls)
        )
    agg_rel = Relation(
        step_id,
        out_fields,
        watermarks=watermarks,
        aggregated=True,
        joined=rel.joined,
        describe="the aggregation's output",
    )
    kinds = {type(n) for n in group_nodes} | {type(n) for n in agg_nodes}
    if having is not None:
        post = PostAggregateCompiler(text, agg_rel, "HAVING", rel, replacements, kinds)
        agg_rel = p.add_filter(agg_rel, having.this, "HAVING", compiler=post)
    post = PostAggregateCompiler(text, agg_rel, "SELECT", rel, replacements, kinds)
    out = []
    for explicit, node in items:
        compiled = post.compile(node)
        out.append((p.output_name(explicit, node, compiled), compiled, node))
    return p.add_project(agg_rel, out)


def _window_args(p: Planner, rel: Relation, window: exp.Anonymous, kind: str) -> tuple[str, bool, list[str]]:
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


def _stateful(p: Planner, kind: str, node: exp.Expr | None, watermarked: bool):  # type: ignore[no-untyped-def]
    from sluice.core.compiler.planner import Stateful

    return Stateful(kind, node, p.text.node_offset(node), watermarked)
