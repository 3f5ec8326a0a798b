"""Spark SQL data types: parse and normalize type strings, and the type rules the compiler uses.

Types are kept as normalized Spark DDL text (``string``, ``bigint``, ``decimal(10,2)``,
``array<string>``, ``map<string,int>``, ``struct<a:int,b:string>``); :class:`SparkType` is the
parsed form used for inference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_ALIASES = {
    "string": "string",
    "varchar": "string",
    "char": "string",
    "text": "string",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "smallint": "smallint",
    "short": "smallint",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "double": "double",
    "float": "float",
    "real": "float",
    "boolean": "boolean",
    "bool": "boolean",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "date": "date",
    "binary": "binary",
    "decimal": "decimal",
    "dec": "decimal",
    "numeric": "decimal",
    "interval": "interval",
}

INTEGRAL = ("tinyint", "smallint", "int", "bigint")
NUMERIC_ORDER = ("tinyint", "smallint", "int", "bigint", "decimal", "float", "double")


class TypeParseError(ValueError):
    """A type string that is not a Spark SQL type."""


@dataclass(frozen=True)
class SparkType:
    """A parsed Spark type. ``name`` is one of the normalized names or array/map/struct."""

    name: str
    precision: int = 0
    scale: int = 0
    element: SparkType | None = None
    key: SparkType | None = None
    value: SparkType | None = None
    fields: tuple[tuple[str, SparkType], ...] = ()

    def render(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.name == "array":
            assert self.element is not None
            return f"array<{self.element.render()}>"
        if self.name == "map":
            assert self.key is not None and self.value is not None
            return f"map<{self.key.render()},{self.value.render()}>"
        if self.name == "struct":
            return "struct<" + ",".join(f"{n}:{t.render()}" for n, t in self.fields) + ">"
        return self.name

    @property
    def is_numeric(self) -> bool:
        return self.name in NUMERIC_ORDER

    @property
    def is_integral(self) -> bool:
        return self.name in INTEGRAL

    @property
    def is_time(self) -> bool:
        return self.name in ("timestamp", "timestamp_ntz")

    def field(self, name: str) -> SparkType | None:
        for fname, ftype in self.fields:
            if fname.lower() == name.lower():
                return ftype
        return None

    def field_name(self, name: str) -> str | None:
        for fname, _ in self.fields:
            if fname.lower() == name.lower():
                return fname
        return None


_TOKEN = re.compile(r"\s*(?:(`[^`]*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise TypeParseError(f"unexpected character {text[pos:].strip()[0]!r}")
            self.tokens.append(m.group(0).strip())
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise TypeParseError("type ends too early")
        if expected is not None and tok != expected:
            raise TypeParseError(f"expected {expected!r} but found {tok!r}")
        self.i += 1
        return tok

    def parse_type(self) -> SparkType:
        word = self.take()
        lower = word.lower()
        if lower == "array":
            self.take("<")
            element = self.parse_type()
            self.take(">")
            return SparkType("array", element=element)
        if lower == "map":
            self.take("<")
            key = self.parse_type()
            self.take(",")
            value = self.parse_type()
            self.take(">")
            return SparkType("map", key=key, value=value)
        if lower == "struct":
            self.take("<")
            fields: list[tuple[str, SparkType]] = []
            while self.peek() != ">":
                name = self.take()
                if name.startswith("`"):
                    name = name[1:-1]
                elif not re.match(r"[A-Za-z_]", name):
                    raise TypeParseError(f"expected a struct field name but found {name!r}")
                if self.peek() == ":":
                    self.take(":")
                fields.append((name, self.parse_type()))
                if self.peek() == ",":
                    self.take(",")
                elif self.peek() != ">":
                    raise TypeParseError(f"expected ',' or '>' in struct but found {self.peek()!r}")
            self.take(">")
            if not fields:
                raise TypeParseError("a struct needs at least one field")
            return SparkType("struct", fields=tuple(fields))
        found = _ALIASES.get(lower)
        if found is None:
            raise TypeParseError(f"unknown type {word!r}")
        name = found
        if name == "decimal":
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = int(self.take())
                if self.peek() == ",":
                    self.take(",")
                    scale = int(self.take())
                self.take(")")
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise TypeParseError(f"decimal({precision},{scale}) is out of range (precision 1-38)")
            return SparkType("decimal", precision=precision, scale=scale)
        if lower in ("varchar", "char") and self.peek() == "(":
            self.take("(")
            self.take()
            self.take(")")
        return SparkType(name)


@lru_cache(maxsize=4096)
def parse_type(text: str) -> SparkType:
    """Parse a Spark SQL type string; raise :class:`TypeParseError` with a readable reason."""
    parser = _Parser(text)
    if not parser.tokens:
        raise TypeParseError("type is empty")
    result = parser.parse_type()
    if parser.peek() is not None:
        raise TypeParseError(f"unexpected {parser.peek()!r} after the type")
    return result


def normalize_type(text: str) -> str:
    return parse_type(text).render()


# --- inference helpers -------------------------------------------------------------------------

STRING = SparkType("string")
INT = SparkType("int")
BIGINT = SparkType("bigint")
DOUBLE = SparkType("double")
BOOLEAN = SparkType("boolean")
TIMESTAMP = SparkType("timestamp")
DATE = SparkType("date")
NULL = SparkType("void")
INTERVAL = SparkType("interval")


def decimal(precision: int, scale: int) -> SparkType:
    precision = min(precision, 38)
    return SparkType("decimal", precision=max(precision, 1), scale=min(scale, precision))


def _as_decimal(t: SparkType) -> SparkType:
    if t.name == "decimal":
        return t
    return {"tinyint": decimal(3, 0), "smallint": decimal(5, 0), "int": decimal(10, 0)}.get(
        t.name, decimal(20, 0)
    )


def wider(a: SparkType, b: SparkType) -> SparkType | None:
    """The common type of two types (for CASE, COALESCE, UNION, comparisons); None if none."""
    if a == b:
        return a
    if a.name == "void":
        return b
    if b.name == "void":
        return a
    if a.is_numeric and b.is_numeric:
        if "double" in (a.name, b.name) or "float" in (a.name, b.name):
            return DOUBLE
        if a.name == "decimal" or b.name == "decimal":
            da, db = _as_decimal(a), _as_decimal(b)
            scale = max(da.scale, db.scale)
            return decimal(max(da.precision - da.scale, db.precision - db.scale) + scale, scale)
        return a if NUMERIC_ORDER.index(a.name) >= NUMERIC_ORDER.index(b.name) else b
    if {a.name, b.name} == {"date", "timestamp"}:
        return TIMESTAMP
    if a.name == "string" or b.name == "string":
        return (
            STRING
            if not (a.name in ("array", "map", "struct") or b.name in ("array", "map", "struct"))
            else None
        )
    if a.name == "array" and b.name == "array" and a.element and b.element:
        element = wider(a.element, b.element)
        return SparkType("array", element=element) if element else None
    return None


def arithmetic(op: str, a: SparkType, b: SparkType) -> SparkType | None:
    """Result type of ``a op b`` for + - * / %; None when Spark refuses the operand types."""
    if a.name == "void" or b.name == "void":
        return b if a.name == "void" else a
    if op in ("+", "-"):
        if a.is_time and b.name == "interval":
            return a
        if b.is_time and a.name == "interval" and op == "+":
            return b
        if a.name == "date" and b.is_integral:
            return DATE
        if a.name == "date" and b.name == "interval":
            return TIMESTAMP
        if op == "-" and a.is_time and b.is_time:
            return INTERVAL
        if op == "-" and a.name == "date" and b.name == "date":
            return INTERVAL
    if (a.name == "string" and b.is_numeric) or (b.name == "string" and a.is_numeric):
        return DOUBLE
    if not (a.is_numeric and b.is_numeric):
        return None
    if op == "/":
        if a.name == "decimal" or b.name == "decimal":
            if a.name in ("double", "float") or b.name in ("double", "float"):
                return DOUBLE
            da, db = _as_decimal(a), _as_decimal(b)
            scale = max(6, da.scale + db.precision + 1)
            return decimal(da.precision - da.scale + db.scale + scale, scale)
        return DOUBLE
    if "double" in (a.name, b.name) or "float" in (a.name, b.name):
        return DOUBLE
    if a.name == "decimal" or b.name == "decimal":
        da, db = _as_decimal(a), _as_decimal(b)
        if op == "*":
            return decimal(da.precision + db.precision + 1, da.scale + db.scale)
        scale = max(da.scale, db.scale)
        return decimal(max(da.precision - da.scale, db.precision - db.scale) + scale + 1, scale)
    return wider(a, b)


def aggregate_result(function: str, arg: SparkType | None) -> SparkType:
    """Result type of one of the supported aggregate functions."""
    if function in ("count", "approx_count_distinct"):
        return BIGINT
    assert arg is not None
    if function == "avg":
        if arg.name == "decimal":
            return decimal(arg.precision + 4, arg.scale + 4)
        return DOUBLE
    if function == "sum":
        if arg.is_integral:
            return BIGINT
        if arg.name == "decimal":
            return decimal(arg.precision + 10, arg.scale)
        return DOUBLE
    return arg


WINDOW_STRUCT = SparkType("struct", fields=(("start", TIMESTAMP), ("end", TIMESTAMP)))
