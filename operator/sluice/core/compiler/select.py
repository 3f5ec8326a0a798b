"""Planning one SELECT: FROM and its join, WHERE, the aggregation or the projection, DISTINCT."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from sluice.core.compiler.aggregate import plan_aggregate
from sluice.core.compiler.base import Planning
from sluice.core.compiler.exprs import ExprCompiler
from sluice.core.compiler.scope import Relation


def plan_select(p: Planning, sel: exp.Select) -> Relation:
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
