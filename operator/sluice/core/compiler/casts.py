"""CAST targets as Spark SQL spells them, and which casts Spark accepts (ANSI mode, Spark's default).

The source schema accepts a few convenience spellings (``text``, ``bool``); inside the SQL, Spark's
own parser decides, so a CAST target is checked against Spark's type names before it is typed.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sluice.core.types import SparkType

#: what the messages list as the type names a CAST may use
SUPPORTED_CAST_TYPES = (
    "string, varchar(n), char(n), boolean, tinyint, smallint, int, bigint, float, double, "
    "decimal(p,s), date, timestamp, timestamp_ntz, binary, interval, array<T>, map<K,V>, "
    "struct<name:T,...>"
)

# Spark's parser (DataTypeAstBuilder) knows these primitive type names
_PRIMITIVES = {
    "string",
    "boolean",
    "tinyint",
    "byte",
    "smallint",
    "short",
    "int",
    "integer",
    "bigint",
    "long",
    "float",
    "real",
    "double",
    "date",
    "timestamp",
    "timestamp_ltz",
    "timestamp_ntz",
    "binary",
    "interval",
}
_DECIMALS = {"decimal", "dec", "numeric"}
_SIZED = {"char", "character", "varchar"}
_SUGGEST = {
    "text": "string",
    "bool": "boolean",
    "uuid": "string",
    "json": "string",
    "jsonb": "string",
    "nvarchar": "string",
    "varchar2": "string",
    "datetime": "timestamp",
    "timestamptz": "timestamp",
    "int2": "smallint",
    "int4": "int",
    "int8": "bigint",
    "int32": "int",
    "int64": "bigint",
    "float4": "float",
    "float8": "double",
    "money": "decimal(19,4)",
    "number": "decimal(p,s)",
    "bytea": "binary",
    "blob": "binary",
}
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


def unknown_type_message(word: str) -> str:
    """The message for a CAST to a type name Spark does not know (e.g. ``uuid``)."""
    suggestion = _SUGGEST.get(word.lower())
    hint = f" (use {suggestion})" if suggestion else ""
    return (
        f"CAST to an unknown type '{word}': Spark SQL has no such type{hint}; "
        f"supported types: {SUPPORTED_CAST_TYPES}"
    )


def decimal_problem(precision: int, scale: int) -> str | None:
    if not 1 <= precision <= 38:
        return f"decimal({precision},{scale}): the precision must be between 1 and 38"
    if scale > precision:
        return (
            f"decimal({precision},{scale}): the scale ({scale}) exceeds the precision ({precision}); "
            "the scale counts the digits after the point, so it can be at most the precision"
        )
    return None


def decimal_problem_in(text: str) -> str | None:
    """A precision/scale problem of any ``decimal(p,s)`` in a type string, if there is one."""
    for match in re.finditer(r"(?i)\b(?:decimal|dec|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)", text):
        problem = decimal_problem(int(match.group(1)), int(match.group(2) or 0))
        if problem:
            return problem
    return None


class _TypeChecker:
    """A strict reader of Spark's data type grammar: returns the first problem, if any."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text) and text[pos:].strip():
            m = _TOKEN.match(text, pos)
            if not m:
                raise _Problem(f"unexpected character {text[pos:].strip()[0]!r}")
            self.tokens.append(m.group(0).strip())
            pos = m.end()
        self.i = 0
        self.text = text.strip()

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise _Problem("the type ends too early")
        if expected is not None and tok != expected:
            raise _Problem(f"expected {expected!r} but found {tok!r}")
        self.i += 1
        return tok

    def number(self) -> int:
        tok = self.take()
        if not tok.isdigit():
            raise _Problem(f"expected a number but found {tok!r}")
        return int(tok)

    def read(self) -> None:
        word = self.take()
        lower = word.lower()
        if lower == "array":
            self.take("<")
            self.read()
            self.take(">")
        elif lower == "map":
            self.take("<")
            self.read()
            self.take(",")
            self.read()
            self.take(">")
        elif lower == "struct":
            self.take("<")
            while True:
                name = self.take()
                if not (name.startswith("`") or re.match(r"[A-Za-z_]", name)):
                    raise _Problem(f"expected a struct field name but found {name!r}")
                if self.peek() == ":":
                    self.take(":")
                self.read()
                if self.peek() != ",":
                    break
                self.take(",")
            self.take(">")
        elif lower in _DECIMALS:
            if self.peek() == "(":
                self.take("(")
                precision, scale = self.number(), 0
                if self.peek() == ",":
                    self.take(",")
                    scale = self.number()
                self.take(")")
                problem = decimal_problem(precision, scale)
                if problem:
                    raise _Problem(f"CAST to {problem}", complete=True)
        elif lower in _SIZED:
            if self.peek() != "(":
                raise _Problem(
                    f"CAST to {lower} needs a length in Spark SQL, e.g. {lower}(20); or use string",
                    complete=True,
                )
            self.take("(")
            self.number()
            self.take(")")
        elif lower not in _PRIMITIVES:
            raise _Problem(unknown_type_message(word), complete=True)


class _Problem(Exception):
    def __init__(self, message: str, *, complete: bool = False) -> None:
        super().__init__(message)
        #: the message is a whole sentence; otherwise it is a detail of the type text
        self.complete = complete


def cast_type_problem(text: str) -> str | None:
    """Why ``text`` (a CAST target as written) is not a Spark SQL type, or None when it is one."""
    try:
        checker = _TypeChecker(text)
        if not checker.tokens:
            return "the CAST has no target type"
        checker.read()
        if checker.peek() is not None:
            raise _Problem(f"unexpected {checker.peek()!r} after the type")
    except _Problem as problem:
        return str(problem) if problem.complete else f"CAST to '{text.strip()}' is not valid: {problem}"
    return None


def can_cast(src: SparkType, dst: SparkType, *, try_cast: bool = False) -> bool:
    """Spark's ``Cast.canAnsiCast`` (``canTryCast`` for TRY_CAST) over the types Sluice models."""
    if src == dst or src.name == "void" or dst.name == "string":
        return True
    s, d = src.name, dst.name
    if s in ("array", "map", "struct") and s == d:
        return _complex(src, dst, _can_legacy_cast if try_cast else can_cast)
    if s == "string":
        return d in ("binary", "boolean", "timestamp", "timestamp_ntz", "date", "interval") or dst.is_numeric
    if d == "boolean":
        return src.is_numeric
    if d == "timestamp":
        return s in ("date", "timestamp_ntz") or src.is_numeric
    if d == "timestamp_ntz":
        return s in ("date", "timestamp")
    if d == "date":
        return s in ("timestamp", "timestamp_ntz")
    if dst.is_numeric:
        return src.is_numeric or s in ("boolean", "timestamp")
    return False


def _can_legacy_cast(src: SparkType, dst: SparkType) -> bool:
    """Spark's legacy ``Cast.canCast``: what TRY_CAST allows inside arrays, maps and structs."""
    s, d = src.name, dst.name
    if s in ("array", "map", "struct") and s == d:
        return _complex(src, dst, _can_legacy_cast)
    return (
        can_cast(src, dst)
        or (d == "binary" and src.is_integral)
        or (d == "boolean" and s in ("date", "timestamp"))
        or (d == "timestamp" and s == "boolean")
        or (dst.is_numeric and s == "date")
    )


def _complex(src: SparkType, dst: SparkType, inner: Callable[[SparkType, SparkType], bool]) -> bool:
    """Arrays, maps and structs cast element by element (structs by position)."""
    if src.name == "array":
        return src.element is not None and dst.element is not None and inner(src.element, dst.element)
    if src.name == "map":
        sk, sv, dk, dv = src.key, src.value, dst.key, dst.value
        return (
            (sk is not None and sv is not None and dk is not None and dv is not None)
            and inner(sk, dk)
            and inner(sv, dv)
        )
    return len(src.fields) == len(dst.fields) and all(
        inner(a, b) for (_, a), (_, b) in zip(src.fields, dst.fields, strict=True)
    )
