"""Type rules of the expression compiler: result types of operators and functions."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from sluice.core.compiler.sqltext import SqlFailure
from sluice.core.types import (
    BIGINT,
    BOOLEAN,
    DATE,
    DOUBLE,
    INT,
    NULL,
    STRING,
    TIMESTAMP,
    SparkType,
    TypeParseError,
    arithmetic,
    decimal,
    parse_type,
    wider,
)

_SPARK = Dialect.get_or_raise("spark")


def render(node: exp.Expr) -> str:
    return _SPARK.generate(node, comments=False)


def func_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return type(node).__name__.lower()


_BOOLEAN_OPS = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Like,
    exp.ILike,
    exp.In,
    exp.Between,
    exp.Is,
    exp.RegexpLike,
    exp.Exists,
)
_ARITH: dict[type[exp.Expr], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}

# result types of functions by sqlglot class name
_FIXED: dict[str, SparkType] = {}
for _names, _t in (
    (
        "Upper Lower Trim Concat ConcatWs Substring Initcap Replace RegexpReplace RegexpExtract Pad "
        "TimeToStr UnixToStr MD5 SHA SHA2 Reverse Repeat Left Right DPipe Lpad Rpad Hex Unhex Chr "
        "Ltrim Rtrim TsOrDsToDateStr ToBase64 JSONExtractScalar Uuid",
        STRING,
    ),
    (
        "Length ArraySize Year Month Day DayOfMonth DayOfWeek DayOfYear WeekOfYear Hour Minute Second "
        "Quarter DateDiff Ascii StrPosition",
        INT,
    ),
    ("StrToUnix TimeToUnix Factorial", BIGINT),
    ("TsOrDsToDate CurrentDate TsOrDsAdd DateAdd DateSub LastDay StrToDate", DATE),
    ("CurrentTimestamp TimestampTrunc TimeStrToTime StrToTime UnixToTime TimestampAdd", TIMESTAMP),
    ("Sqrt Pow Ln Log Exp Cbrt Rand", DOUBLE),
):
    for _n in _names.split():
        _FIXED[_n] = _t

# Spark functions that sqlglot leaves anonymous: name -> result type
_ANONYMOUS: dict[str, SparkType] = {
    "isnull": BOOLEAN,
    "isnotnull": BOOLEAN,
    "timestamp_seconds": TIMESTAMP,
    "timestamp_millis": TIMESTAMP,
    "to_utc_timestamp": TIMESTAMP,
    "from_utc_timestamp": TIMESTAMP,
    "unix_seconds": BIGINT,
    "unix_millis": BIGINT,
    "char_length": INT,
    "character_length": INT,
    "format_string": STRING,
    "sha1": STRING,
    "crc32": BIGINT,
    "ifnull": NULL,
}
_SAME_AS_FIRST = {"Abs", "Neg", "Nullif", "Round", "BitwiseNot", "Ceil", "Floor", "Paren"}


class TypeRules:
    """Mixin of :class:`ExprCompiler`: the type of a node from the types of its children."""

    def fail(self, message: str, node: exp.Expr | None = None, offset: int | None = None) -> SqlFailure:
        raise NotImplementedError

    def type_rule(self, node: exp.Expr, ct: dict[str, list[SparkType]]) -> SparkType:
        cls = type(node).__name__
        first = (ct.get("this") or [NULL])[0]
        if isinstance(node, _BOOLEAN_OPS):
            return BOOLEAN
        op = _ARITH.get(type(node))
        if op is not None:
            right = (ct.get("expression") or [NULL])[0]
            # Spark types an integer literal next to a decimal by its digits (1 -> decimal(1,0))
            if right.name == "decimal" and self._is_int_literal(node.this):
                first = decimal(len(str(node.this.this)), 0)
            elif first.name == "decimal" and self._is_int_literal(node.expression):
                right = decimal(len(str(node.expression.this)), 0)
            result = arithmetic(op, first, right)
            if result is None:
                raise self.fail(
                    f"cannot apply '{op}' to {first.render()} and {right.render()} in '{render(node)}'",
                    node,
                )
            return result
        if isinstance(node, exp.IntDiv):
            return BIGINT
        if isinstance(node, exp.Cast | exp.TryCast):
            to = node.args.get("to")
            try:
                return parse_type(to.sql(dialect="spark").lower()) if to is not None else NULL
            except TypeParseError as exc:
                raise self.fail(f"CAST to an unknown type: {exc}", node) from exc
        if isinstance(node, exp.Case):
            branch = [t for t in ct.get("ifs", [])]
            default = ct.get("default", [])
            return self._common(node, branch + default)
        if isinstance(node, exp.If):
            return self._common(node, ct.get("true", []) + ct.get("false", []))
        if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
            return self._common(node, ct.get("this", []) + ct.get("expressions", []))
        if cls in _FIXED:
            return _FIXED[cls]
        if cls in _SAME_AS_FIRST:
            if cls in ("Ceil", "Floor") and first.name != "decimal":
                return BIGINT
            return first
        if isinstance(node, exp.Array):
            return SparkType("array", element=self._common(node, ct.get("expressions", [])) or NULL)
        if isinstance(node, exp.RegexpSplit):
            return SparkType("array", element=STRING)
        if isinstance(node, exp.VarMap):
            keys = [t.element or NULL for t in ct.get("keys", [])]
            values = [t.element or NULL for t in ct.get("values", [])]
            return SparkType("map", key=self._common(node, keys), value=self._common(node, values))
        if isinstance(node, exp.Struct):
            return self._struct_type(node, ct.get("expressions", []))
        if isinstance(node, exp.PropertyEQ):
            return (ct.get("expression") or [NULL])[0]
        if isinstance(node, exp.Bracket):
            if first.name == "array" and first.element is not None:
                return first.element
            if first.name == "map" and first.value is not None:
                return first.value
            raise self.fail(
                f"'{render(node.this)}' is a {first.render()}; only arrays and maps can be indexed", node
            )
        if isinstance(node, exp.Anonymous):
            result = _ANONYMOUS[str(node.this).lower()]
            if result == NULL:  # ifnull(a, b)
                return self._common(node, ct.get("expressions", []))
            return result
        if isinstance(node, exp.Alias):
            return first
        raise self.fail(
            f"function or operator '{func_name(node)}' is not supported by the Sluice compiler", node
        )

    @staticmethod
    def _is_int_literal(node: exp.Expr) -> bool:
        return isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit()

    def _common(self, node: exp.Expr, types: list[SparkType]) -> SparkType:
        result: SparkType = NULL
        for t in types:
            common = wider(result, t)
            if common is None:
                raise self.fail(
                    f"branches of '{render(node)}' have incompatible types {result.render()} and "
                    f"{t.render()}",
                    node,
                )
            result = common
        return result

    def _struct_type(self, node: exp.Struct, types: list[SparkType]) -> SparkType:
        fields: list[tuple[str, SparkType]] = []
        for i, (item, typ) in enumerate(zip(node.expressions, types, strict=False)):
            if isinstance(item, exp.PropertyEQ):
                name = item.this.name
            elif isinstance(item, exp.Alias):
                name = item.alias
            elif isinstance(item, exp.Column | exp.Dot):
                name = item.name
            else:
                name = f"col{i + 1}"
            fields.append((name, typ))
        return SparkType("struct", fields=tuple(fields))
