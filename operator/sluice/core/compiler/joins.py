"""Planning stream-stream joins: equality keys, event-time range condition, watermark checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.tokens import TokenType

from sluice.core.compiler.base import Planning, Stateful, field_specs
from sluice.core.compiler.exprs import ExprCompiler
from sluice.core.compiler.scope import Field, Relation
from sluice.core.compiler.sqltext import SqlText
from sluice.core.plan.model import JoinKey, StreamStreamJoinV1

_RANGE = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


_JOIN_WORDS = (
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


@dataclass
class _Condition:
    """The ON condition taken apart: equality keys and the event-time range between the sides."""

    keys: list[JoinKey] = field(default_factory=list)
    time_parts: list[str] = field(default_factory=list)
    time_sides: set[str] = field(default_factory=set)
    bounds: int = 0


def plan_join(p: Planning, left: Relation, join: exp.Join) -> Relation:
    text = p.text
    join_offset = _join_offset(text, join)
    where = join_offset if join_offset is not None else text.node_offset(join.this)
    side = (join.side or "").upper()
    on = _supported_condition(text, join, side, where)
    right = p.plan_from_item(join.this)
    left_alias, right_alias = _aliases(text, join, left, right)
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
    cond = _split_condition(text, combined, on, left_alias, right_alias)
    if not cond.keys:
        raise text.fail(
            "a stream-stream join needs at least one equality between the two sides "
            f"(e.g. {left_alias}.id = {right_alias}.id) in its ON condition",
            on,
        )
    join_type = {"LEFT": "leftOuter", "RIGHT": "rightOuter"}.get(side, "inner")
    if join_type != "inner":
        _check_outer_join(text, on, side, cond, ((left_alias, left), (right_alias, right)), where)
    step_id = p.state.next_id("join")
    p.state.steps.append(
        StreamStreamJoinV1(
            id=step_id,
            inputs=[left.step_id, right.step_id],
            schema_=field_specs(fields),
            join_type=join_type,  # type: ignore[arg-type]
            left_alias=left_alias,
            right_alias=right_alias,
            keys=cond.keys,
            time_condition=" AND ".join(cond.time_parts) or None,
            condition=full.sql,
        )
    )
    p.state.stateful.append(Stateful("join", join, join_offset, bool(cond.time_parts)))
    return Relation(step_id, fields, watermarks=watermarks, joined=True, describe="the joined sources")


def _join_offset(text: SqlText, join: exp.Join) -> int | None:
    """Where the join's keywords (e.g. LEFT OUTER JOIN) start, if found."""
    join_start = text.node_offset(join.this) or 0
    before = [
        i for i, tok in enumerate(text.tokens) if tok.start < join_start and tok.token_type == TokenType.JOIN
    ]
    if not before:
        return None
    i = before[-1]
    while i > 0 and text.tokens[i - 1].token_type in _JOIN_WORDS:
        i -= 1
    return text.tokens[i].start


def _supported_condition(text: SqlText, join: exp.Join, side: str, where: int | None) -> exp.Expr:
    """Refuse join kinds Sluice does not run; return the ON condition."""
    kind = (join.kind or "").upper()
    if kind in ("CROSS", "SEMI", "ANTI") or side == "FULL":
        what = f"{side} {kind}".strip() if side else kind
        raise text.fail(
            f"{what} JOIN is not supported; Sluice runs stream-stream INNER, LEFT OUTER and "
            "RIGHT OUTER joins",
            offset=where,
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
            offset=where,
        )
    return on  # type: ignore[no-any-return]


def _aliases(text: SqlText, join: exp.Join, left: Relation, right: Relation) -> tuple[str, str]:
    """The two sides' aliases (lower-case); refuse joining aggregations, second joins and self-names."""
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
    return left_alias, right_alias


def _split_condition(
    text: SqlText, combined: Relation, on: exp.Expr, left_alias: str, right_alias: str
) -> _Condition:
    cond = _Condition()
    for conj in _conjuncts(on):
        compiler = ExprCompiler(text, combined, "the join condition")
        compiled = compiler.compile(conj)
        quals = {f.qualifier.lower() for f in compiler.referenced if f.qualifier}
        if isinstance(conj, exp.EQ) and quals == {left_alias.lower(), right_alias.lower()}:
            key = _equality_key(text, combined, conj, left_alias, right_alias)
            if key is not None:
                cond.keys.append(key)
                continue
        if isinstance(conj, _RANGE) and any(f.type.is_time for f in compiler.referenced):
            sides = {
                f.qualifier.lower()
                for f in compiler.referenced
                if f.qualifier and f.type.is_time and combined.is_watermarked(f)
            }
            if len(quals) == 2:
                cond.time_parts.append(compiled.sql)
                cond.bounds += 2 if isinstance(conj, exp.Between) else 1
                cond.time_sides |= sides
    return cond


def _equality_key(
    text: SqlText, combined: Relation, conj: exp.EQ, left_alias: str, right_alias: str
) -> JoinKey | None:
    """``a.x = b.y`` with one side on each input, as a key (left input first); else None."""
    lc = ExprCompiler(text, combined, "the join condition")
    lhs = lc.compile(conj.this)
    rc = ExprCompiler(text, combined, "the join condition")
    rhs = rc.compile(conj.expression)
    lq = {f.qualifier.lower() for f in lc.referenced if f.qualifier}
    rq = {f.qualifier.lower() for f in rc.referenced if f.qualifier}
    if lq == {left_alias.lower()} and rq == {right_alias.lower()}:
        return JoinKey(left=lhs.sql, right=rhs.sql)
    if lq == {right_alias.lower()} and rq == {left_alias.lower()}:
        return JoinKey(left=rhs.sql, right=lhs.sql)
    return None


def _check_outer_join(
    text: SqlText,
    on: exp.Expr,
    side: str,
    cond: _Condition,
    sides: tuple[tuple[str, Relation], tuple[str, Relation]],
    where: int | None,
) -> None:
    """An outer join needs watermarks on both sides and an event-time range between them."""
    (left_alias, _), (right_alias, _) = sides
    for alias, rel in sides:
        if not rel.watermarks:
            raise text.fail(
                f"a {side} OUTER stream-stream join needs a watermark on both sides, but "
                f"'{alias}' has none; "
                f"declare eventTime on its source",
                offset=where,
            )
    if not cond.time_parts or len(cond.time_sides) < 2 or cond.bounds < 2:
        raise text.fail(
            f"a {side} OUTER stream-stream join needs an event-time range condition between "
            "the two sides' "
            f"watermarked time columns (e.g. {right_alias}.ts BETWEEN {left_alias}.ts AND "
            f"{left_alias}.ts + INTERVAL 1 HOUR), otherwise Spark can never emit the unmatched rows",
            on,
        )
