"""CAST targets as Spark spells them, and which casts Spark (ANSI mode) accepts."""

from __future__ import annotations

import pytest
from sluice.core.compiler.casts import can_cast, cast_type_problem, decimal_problem_in
from sluice.core.types import parse_type


@pytest.mark.parametrize(
    "text",
    [
        "string",
        "INT",
        "Integer",
        "bigint",
        "long",
        "smallint",
        "short",
        "tinyint",
        "byte",
        "float",
        "real",
        "double",
        "boolean",
        "date",
        "timestamp",
        "timestamp_ntz",
        "timestamp_ltz",
        "binary",
        "decimal",
        "decimal(10)",
        "DECIMAL(38, 38)",
        "numeric(5,2)",
        "varchar(10)",
        "char(1)",
        "array<string>",
        "map<string, array<int>>",
        "struct<a:int, `b c`:string>",
        "struct<a int>",
    ],
)
def test_spark_types_are_accepted(text: str) -> None:
    assert cast_type_problem(text) is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("text", "unknown type 'text': Spark SQL has no such type (use string)"),
        ("bool", "(use boolean)"),
        ("uuid", "unknown type 'uuid'"),
        ("jsonb", "unknown type 'jsonb'"),
        ("array<text>", "unknown type 'text'"),
        ("map<string,uuid>", "unknown type 'uuid'"),
        ("varchar", "varchar needs a length"),
        ("decimal(5,7)", "the scale (7) exceeds the precision (5)"),
        ("decimal(39,2)", "precision must be between 1 and 38"),
        ("array<int,>", "is not valid"),
        ("struct<>", "is not valid"),
    ],
)
def test_other_types_are_refused(text: str, fragment: str) -> None:
    problem = cast_type_problem(text)
    assert problem is not None and fragment in problem


def test_decimal_problem_in_a_type_string() -> None:
    assert decimal_problem_in("array<decimal(5, 7)>") is not None
    assert decimal_problem_in("decimal(10,2)") is None


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        ("int", "string", True),
        ("struct<a:int>", "string", True),
        ("string", "int", True),
        ("string", "timestamp", True),
        ("string", "date", True),
        ("string", "binary", True),
        ("double", "decimal(10,2)", True),
        ("boolean", "int", True),
        ("int", "boolean", True),
        ("timestamp", "bigint", True),
        ("bigint", "timestamp", True),
        ("date", "timestamp", True),
        ("timestamp", "date", True),
        ("array<int>", "array<string>", True),
        ("map<string,int>", "map<string,double>", True),
        ("struct<a:int,b:string>", "struct<x:bigint,y:string>", True),
        ("struct<a:int,b:string>", "int", False),
        ("array<string>", "timestamp", False),
        ("map<string,int>", "array<int>", False),
        ("struct<a:int>", "struct<a:int,b:int>", False),
        ("array<struct<a:int>>", "array<int>", False),
        ("date", "int", False),
        ("int", "date", False),
        ("boolean", "timestamp", False),
        ("binary", "int", False),
        ("int", "binary", False),
        ("timestamp", "boolean", False),
    ],
)
def test_can_cast_follows_spark_ansi_rules(src: str, dst: str, ok: bool) -> None:
    assert can_cast(parse_type(src), parse_type(dst)) is ok


def test_try_cast_is_lenient_inside_collections_only() -> None:
    assert can_cast(parse_type("array<date>"), parse_type("array<int>"), try_cast=True)
    assert not can_cast(parse_type("array<date>"), parse_type("array<int>"))
    assert not can_cast(parse_type("date"), parse_type("int"), try_cast=True)
