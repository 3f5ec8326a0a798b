"""Planning stream-stream joins: equality keys, event-time range condition, watermark checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp
from sqlglot.tokens import TokenType

from sluice.core.compiler.exprs import ExprCompiler
from sluice.core.compiler.scope import Field, Relation
from sluice.core.plan.model import JoinKey, StreamStreamJoinV1

if TYPE_CHECKING:
    from sluice.core.compiler.planner import Planner

_RANGE = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def plan_join(p: Planner, left: Relation, join: exp.Join) -> Relation:
    from sluice.core.compiler.planner import Stateful, field_specs

    text = p.text
    join_start = text.node_offset(join.this) or 0
    join_offset = None
    join_words = (
        TokenType.JOIN,
        TokenType.LEFT,
        TokenType.RIGHT,
        TokenType.INNER,
        TokenType.FULL,
        TokenType.CROSS,
        TokenType.OUTER,
        TokenType.SEMI,
        TokenType.ANTI,
    )
    before = [
        i for i, tok in enumerate(text.tokens) if tok.start < join_start and tok.token_type == TokenType.JOIN
    ]
    if before:
        i = before[-1]
        while i > 0 and text.tokens[i - 1].token_type in join_words:
            i -= 1
        join_offset = text.tokens[i].start
    side = (join.side or "").upper()
    kind = (join.kind or "").upper()
    if kind in ("CROSS", "SEMI", "ANTI") or side == "FULL":
        what = f"{side} {kind}".strip() if side else kind
        raise text.fail(
            f"{what} JOIN is not supported; Sluice runs stream-stream INNER, LEFT OUTER and "
            "RIGHT OUTER joins",
            offset=join_offset if join_offset is not None else text.node_offset(join.this),
        )
    if join.args.get("using"):
        raise text.fail(
            "JOIN ... USING is not supported; write the condition with ON a.key = b.key",
            join.args["using"][0],
        )
    on = join.args.get("on")
    if on is None:
        raise text.fail(
            "a stream-stream join needs an ON condition with at least one equality key",
            offset=join_offset if join_offset is not None else text.node_offset(join.this),
        )
    right = p.plan_from_item(join.this)
    for rel in (left, right):
        if rel.aggregated:
            raise text.fail(
                "joining the output of an aggregation is not supported; aggregate after the join", join.this
            )
        if rel.joined:
            raise text.fail("only one join per query is supported", join.this)
    # Spark resolves aliases case-insensitively: keep them lower-case so the plan does not depend on it
    left_alias = (left.alias or "left").lower()
    right_alias = (right.alias or "right").lower()
    if left_alias.lower() == right_alias.lower():
        raise text.fail(
            f"both sides of the join are called '{left_alias}'; give each side its own alias "
            f"(FROM {left_alias} a JOIN {left_alias} b ...)",
            join.this,
        )
    fields = [Field(f.name, f.type, left_alias) for f in left.fields] + [
        Field(f.name, f.type, right_alias) for f in right.fields
    ]
    watermarks: set[tuple[str | None, str]] = {(left_alias.lower(), n) for _, n in left.watermarks} | {
        (right_alias.lower(), n) for _, n in right.watermarks
    }
    combined = Relation("", fields, watermarks=watermarks, joined=True, describe="the joined sources")
    full = ExprCompiler(text, combined, "the join condition").compile(on)
    if full.type.name not in ("boolean", "void"):
        raise text.fail(f"the join condition must be boolean, but '{full.sql}' is a {full.type.render()}", on)
    keys: list[JoinKey] = []
    time_parts: list[str] = []
    time_sides: set[str] = set()
    bounds = 0
    for conj in _conjuncts(on):
        compiler = ExprCompiler(text, combined, "the join condition")
        compiled = compiler.compile(conj)
        quals = {f.qualifier.lower() for f in compiler.referenced if f.qualifier}
        if isinstance(conj, exp.EQ) and quals == {left_alias.lower(), right_alias.lower()}:
            lc = ExprCompiler(text, combined, "the join condition")
            lhs = lc.compile(conj.this)
            rc = ExprCompiler(text, combined, "the join condition")
            rhs = rc.compile(conj.expression)
            lq = {f.qualifier.lower() for f in lc.referenced if f.qualifier}
            rq = {f.qualifier.lower() for f in rc.referenced if f.qualifier}
            if lq == {left_alias.lower()} and rq == {right_alias.lower()}:
                keys.append(JoinKey(left=lhs.sql, right=rhs.sql))
                continue
            if lq == {right_alias.lower()} and rq == {left_alias.lower()}:
                keys.append(JoinKey(left=rhs.sql, right=lhs.sql))
                continue
        if isinstance(conj, _RANGE) and any(f.type.is_time for f in compiler.referenced):
            sides = {
                f.qualifier.lower()
                for f in compiler.referenced
                if f.qualifier and f.type.is_time and combined.is_watermarked(f)
            }
            if len(quals) == 2:
                time_parts.append(compiled.sql)
                bounds += 2 if isinstance(conj, exp.Between) else 1
                time_sides |= sides
    if not keys:
        raise text.fail(
            "a stream-stream join needs at least one equality between the two sides "
            f"(e.g. {left_alias}.id = {right_alias}.id) in its ON condition",
            on,
        )
    join_type = {"LEFT": "leftOuter", "RIGHT": "rightOuter"}.get(side, "inner")
    if join_type != "inner":
        for alias, rel in ((left_alias, left), (right_alias, right)):
            if not rel.watermarks:
                raise text.fail(
                    f"a {side} OUTER stream-stream join needs a watermark on both sides, but "
                    f"'{alias}' has none; "
                    f"declare eventTime on its source",
                    offset=join_offset if join_offset is not None else text.node_offset(join.this),
                )
        if not time_parts or len(time_sides) < 2 or bounds < 2:
            raise text.fail(
                f"a {side} OUTER stream-stream join needs an event-time range condition between "
                "the two sides' "
                f"watermarked time columns (e.g. {right_alias}.ts BETWEEN {left_alias}.ts AND "
                f"{left_alias}.ts + INTERVAL 1 HOUR), otherwise Spark can never emit the unmatched rows",
                on,
            )
    step_id = p.state.next_id("join")
    p.state.steps.append(
        StreamStreamJoinV1(
            id=step_id,
            inputs=[left.step_id, right.step_id],
            schema_=field_specs(fields),
            join_type=join_type,  # type: ignore[arg-type]
            left_alias=left_alias,
            right_alias=right_alias,
            keys=keys,
            time_condition=" AND ".join(time_parts) or None,
            condition=full.sql,
        )
    )
    p.state.stateful.append(Stateful("join", join, join_offset, bool(time_parts)))
    return Relation(step_id, fields, watermarks=watermarks, joined=True, describe="the joined sources")
