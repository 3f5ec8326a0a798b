"""Expression compiler: resolves columns, infers Spark types and renders normalized Spark SQL."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from sluice.core.compiler.casts import can_cast, cast_type_problem
from sluice.core.compiler.intervals import IntervalError, normalize_interval
from sluice.core.compiler.scope import Field, Relation, ambiguity_hint, did_you_mean, is_simple_identifier
from sluice.core.compiler.sqltext import SqlFailure, SqlText
from sluice.core.compiler.typerules import _ANONYMOUS, TypeRules, func_name, render
from sluice.core.types import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INT,
    INTERVAL,
    NULL,
    STRING,
    WINDOW_STRUCT,
    SparkType,
    aggregate_result,
    decimal,
)

AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Min: "min",
    exp.Max: "max",
    exp.Avg: "avg",
    exp.ApproxDistinct: "approx_count_distinct",
}
SUPPORTED_AGGREGATES = "count, sum, min, max, avg or approx_count_distinct"


@dataclass(frozen=True)
class Compiled:
    node: exp.Expr
    type: SparkType
    sql: str


def quote_identifier(name: str) -> str:
    return name if is_simple_identifier(name) else "`" + name.replace("`", "``") + "`"


def column_text(name: str, qualifier: str | None = None) -> str:
    """What render(column_node(name, qualifier)) yields, without building a node."""
    return f"{quote_identifier(qualifier)}.{quote_identifier(name)}" if qualifier else quote_identifier(name)


def column_node(name: str, qualifier: str | None = None) -> exp.Column:
    ident = exp.Identifier(this=name, quoted=not is_simple_identifier(name))
    table = exp.Identifier(this=qualifier, quoted=not is_simple_identifier(qualifier)) if qualifier else None
    return exp.Column(this=ident, table=table)


def is_time_window(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).lower() in ("window", "session_window")


class ExprCompiler(TypeRules):
    """Compile one expression against a relation. ``context`` names the clause in messages."""

    def __init__(
        self,
        text: SqlText,
        rel: Relation,
        context: str,
        *,
        allow_aggregates: bool = False,
        allow_time_windows: bool = False,
    ) -> None:
        self.text = text
        self.rel = rel
        self.context = context
        self.allow_aggregates = allow_aggregates
        self.allow_time_windows = allow_time_windows
        self.referenced: list[Field] = []
        self._in_aggregate = False

    # -- entry points -----------------------------------------------------------------------
    def compile(self, node: exp.Expr) -> Compiled:
        new, typ = self.visit(node.copy())
        return Compiled(new, typ, render(new))

    def fail(self, message: str, node: exp.Expr | None = None, offset: int | None = None) -> SqlFailure:
        return self.text.fail(message, node, offset)

    # -- hooks ------------------------------------------------------------------------------
    def intercept(self, node: exp.Expr) -> tuple[exp.Expr, SparkType] | None:
        return None

    # -- visiting ---------------------------------------------------------------------------
    def visit(self, node: exp.Expr) -> tuple[exp.Expr, SparkType]:
        hooked = self.intercept(node)
        if hooked is not None:
            return hooked
        if isinstance(node, exp.Column):
            return self.visit_column(node)
        if isinstance(node, exp.Dot):
            base, base_type = self.visit(node.this)
            return self.struct_access(base, base_type, [node.expression], node)
        if isinstance(node, exp.Literal):
            return node, self.literal_type(node)
        if isinstance(node, exp.Boolean):
            return node, BOOLEAN
        if isinstance(node, exp.Null):
            return node, NULL
        if isinstance(node, exp.Window):
            raise self.fail(
                "window functions (OVER ...) are not supported on streams: Spark Structured Streaming "
                "refuses non-time-based windows; group by window(ts, '5 minutes') for time windows",
                node,
                self.text.word_offset("over", after=(self.text.node_offset(node) or 0) - 1),
            )
        if isinstance(node, exp.Subquery | exp.Select | exp.Union):
            raise self.fail(f"subqueries are not supported in {self.context}; join the sources instead", node)
        if isinstance(node, exp.Star):
            raise self.fail(f"'*' is not allowed in {self.context}", node)
        if isinstance(node, exp.AggFunc):
            return self.visit_aggregate(node)
        if isinstance(node, exp.Interval):
            return self.visit_interval(node)
        if isinstance(node, exp.Cast):
            return self.visit_cast(node)
        if is_time_window(node):
            if not self.allow_time_windows:
                raise self.fail(
                    f"{func_name(node)}(...) can only be used in GROUP BY (and selected from it), "
                    f"not in {self.context}",
                    node,
                )
            node.set("expressions", [self.visit(arg)[0] for arg in node.expressions])
            return node, WINDOW_STRUCT
        if isinstance(node, exp.Anonymous):
            name = str(node.this).lower()
            if name not in _ANONYMOUS:
                raise self.fail(
                    f"unknown function '{node.this}'; Sluice knows the common Spark string, date/time, "
                    "math and conditional functions (see docs/plans.md)",
                    node,
                )
        # generic: visit children, then apply the type rule
        child_types: dict[str, list[SparkType]] = {}
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expr):
                if self._is_value(value):
                    new, t = self.visit(value)
                    if new is not value:
                        node.set(key, new)
                    child_types[key] = [t]
            elif isinstance(value, list):
                types: list[SparkType] = []
                new_items = []
                for item in value:
                    if isinstance(item, exp.Expr) and self._is_value(item):
                        new, t = self.visit(item)
                        new_items.append(new)
                        types.append(t)
                    else:
                        new_items.append(item)
                node.set(key, new_items)
                child_types[key] = types
        return node, self.type_rule(node, child_types)

    @staticmethod
    def _is_value(node: exp.Expr) -> bool:
        return not isinstance(node, exp.DataType | exp.Var | exp.Identifier | exp.DataTypeParam)

    def visit_column(self, node: exp.Column) -> tuple[exp.Expr, SparkType]:
        if isinstance(node.this, exp.Star):
            raise self.fail(f"'{render(node)}' is not allowed in {self.context}", node)
        parts: list[exp.Expr] = [p for p in node.parts if isinstance(p, exp.Identifier)]
        first = parts[0]
        if len(parts) >= 2 and self.rel.has_qualifier(first.name):
            qualifier = first.name
            col_ident = parts[1]
            rest = parts[2:]
            matches = self.rel.lookup(col_ident.name, qualifier)
            if not matches:
                names = [f.name for f in self.rel.fields_of(qualifier)]
                raise self.fail(
                    f"column '{col_ident.name}' does not exist in '{qualifier}'"
                    + did_you_mean(col_ident.name, names),
                    col_ident,
                )
        else:
            col_ident = first
            rest = parts[1:]
            matches = self.rel.lookup(col_ident.name)
            if not matches:
                if len(parts) >= 2 and not self.rel.lookup(parts[0].name):
                    quals = self.rel.qualifiers or ([self.rel.alias] if self.rel.alias else [])
                    raise self.fail(
                        f"'{first.name}' is neither a column nor a source alias in this query"
                        + did_you_mean(first.name, quals + [f.name for f in self.rel.fields]),
                        first,
                    )
                names = list(dict.fromkeys(f.name for f in self.rel.fields))
                raise self.fail(
                    f"column '{col_ident.name}' does not exist in {self.rel.label()}"
                    + did_you_mean(col_ident.name, names),
                    col_ident,
                )
            if len(matches) > 1:
                raise self.fail(
                    f"column '{col_ident.name}' is ambiguous: {ambiguity_hint(matches)}", col_ident
                )
        found = matches[0]
        self.referenced.append(found)
        new: exp.Expr = column_node(found.name, found.qualifier)
        new.this.meta.update(col_ident.meta)  # keep the position for later messages
        return self.struct_access(new, found.type, rest, node) if rest else (new, found.type)

    def struct_access(
        self, base: exp.Expr, base_type: SparkType, names: list[exp.Expr], node: exp.Expr
    ) -> tuple[exp.Expr, SparkType]:
        current, typ = base, base_type
        for ident in names:
            fname = ident.name
            if typ.name != "struct":
                raise self.fail(
                    f"cannot read field '{fname}' of '{render(current)}', which is a {typ.render()}, "
                    "not a struct",
                    ident,
                )
            canonical = typ.field_name(fname)
            ftype = typ.field(fname)
            if canonical is None or ftype is None:
                raise self.fail(
                    f"struct '{render(current)}' has no field '{fname}'"
                    + did_you_mean(fname, [n for n, _ in typ.fields]),
                    ident,
                )
            current = exp.Dot(
                this=current,
                expression=exp.Identifier(this=canonical, quoted=not is_simple_identifier(canonical)),
            )
            typ = ftype
        return current, typ

    def literal_type(self, node: exp.Literal) -> SparkType:
        if node.is_string:
            return STRING
        text = str(node.this)
        if text.isdigit():
            return INT if int(text) <= 2**31 - 1 else BIGINT
        if "e" in text.lower():
            return DOUBLE
        digits = text.replace(".", "").lstrip("0") or "0"
        scale = len(text.split(".", 1)[1]) if "." in text else 0
        return decimal(max(len(digits), scale), scale)

    def visit_interval(self, node: exp.Interval) -> tuple[exp.Expr, SparkType]:
        try:
            normalize_interval(render(node))
        except IntervalError as exc:
            raise self.fail(f"invalid interval: {exc}", node, node.meta.get("span_start")) from exc
        return node, INTERVAL

    def visit_cast(self, node: exp.Cast) -> tuple[exp.Expr, SparkType]:
        to = node.args.get("to")
        span = to.meta if isinstance(to, exp.DataType) else {}
        offset = span.get("span_start")
        if offset is not None and span.get("span_end") is not None:
            # the target as written: sqlglot reads some non-Spark names as Spark types (text, uuid)
            problem = cast_type_problem(self.text.sql[int(offset) : int(span["span_end"]) + 1])
            if problem:
                raise self.fail(problem, node, offset)
        for key in ("format", "default", "action"):
            if node.args.get(key) is not None:
                raise self.fail(
                    f"CAST with {key.upper()} is not Spark SQL; write CAST(x AS type)", node, offset
                )
        operand, src = self.visit(node.this)
        node.set("this", operand)
        dst = self.type_rule(node, {})
        if not can_cast(src, dst, try_cast=bool(node.args.get("safe"))):
            raise self.fail(
                f"cannot cast '{render(operand)}' ({src.render()}) to {dst.render()}: Spark refuses this "
                f"conversion{_cast_hint(src, dst)}",
                node,
                offset,
            )
        return node, dst

    def visit_aggregate(self, node: exp.AggFunc) -> tuple[exp.Expr, SparkType]:
        name = AGGREGATES.get(type(node))
        if name is None:
            raise self.fail(
                f"aggregate function '{self.text.source_text(node)}' is not supported; use "
                f"{SUPPORTED_AGGREGATES}",
                node,
            )
        if not self.allow_aggregates:
            raise self.fail(f"aggregate function '{name}' is not allowed in {self.context}", node)
        if self._in_aggregate:
            raise self.fail(f"aggregate function '{name}' cannot be nested inside another aggregate", node)
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise self.fail(
                f"{name}(DISTINCT ...) is a distinct aggregate, which Spark Structured Streaming does not "
                "support; use approx_count_distinct(...) instead",
                node,
                self.text.word_offset("distinct", after=(self.text.node_offset(node) or 0) - 1),
            )
        extra = [e for e in node.expressions] if name != "count" else []
        if name == "approx_count_distinct" and node.args.get("accuracy") is not None:
            extra = [node.args["accuracy"]]
        self._in_aggregate = True
        try:
            if isinstance(arg, exp.Star) or arg is None:
                arg_type = None
            else:
                new_arg, arg_type = self.visit(arg)
                node.set("this", new_arg)
            for e in extra:
                self.visit(e)
        finally:
            self._in_aggregate = False
        if (
            name in ("sum", "avg")
            and arg_type is not None
            and not arg_type.is_numeric
            and arg_type.name != "void"
        ):
            raise self.fail(
                f"{name}(...) needs a numeric argument, but '{render(arg)}' is a {arg_type.render()}", node
            )
        return node, aggregate_result(name, arg_type)

    # -- type rules -----------------------------------------------------------------------------


def _cast_hint(src: SparkType, dst: SparkType) -> str:
    if src.is_numeric and dst.name == "date":
        return "; use date_from_unix_date(...)"
    if src.name == "date" and dst.is_numeric:
        return "; use unix_date(...)"
    if src.name in ("array", "map", "struct") and dst.name not in ("array", "map", "struct"):
        return f"; read an element or field of the {src.name} first"
    if src.name == "struct" and dst.name == "struct":
        return "; struct casts need the same number of fields, each castable"
    return ""
