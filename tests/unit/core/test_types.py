"""Spark type strings: parsing, normalization and the inference rules the compiler uses."""

from __future__ import annotations

import pytest
from sluice.core.compiler.intervals import IntervalError, normalize_interval
from sluice.core.types import (
    BIGINT,
    DOUBLE,
    INT,
    TypeParseError,
    aggregate_result,
    arithmetic,
    decimal,
    normalize_type,
    parse_type,
    wider,
)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("STRING", "string"),
        ("Integer", "int"),
        ("long", "bigint"),
        ("DECIMAL(10, 2)", "decimal(10,2)"),
        ("decimal", "decimal(10,0)"),
        ("varchar(20)", "string"),
        ("array< string >", "array<string>"),
        ("MAP<STRING, INT>", "map<string,int>"),
        ("struct<a:int, b: string>", "struct<a:int,b:string>"),
        ("struct<a int, b array<struct<c:double>>>", "struct<a:int,b:array<struct<c:double>>>"),
        ("struct<`odd name`:int>", "struct<odd name:int>"),
        ("timestamp_ntz", "timestamp_ntz"),
    ],
)
def test_types_normalize(text: str, normalized: str) -> None:
    assert normalize_type(text) == normalized


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("integr", "unknown type 'integr'"),
        ("", "empty"),
        ("array<int", "ends too early"),
        ("map<string>", "expected ','"),
        ("decimal(40,2)", "out of range"),
        ("struct<>", "at least one field"),
        ("int int", "unexpected 'int'"),
    ],
)
def test_bad_types_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(TypeParseError, match=reason):
        parse_type(text)


def test_struct_field_lookup_is_case_insensitive() -> None:
    t = parse_type("struct<City:string>")
    assert t.field("city") == parse_type("string")
    assert t.field_name("CITY") == "City"


def test_arithmetic_promotion() -> None:
    assert arithmetic("+", INT, INT) == INT
    assert arithmetic("+", INT, BIGINT) == BIGINT
    assert arithmetic("/", INT, INT) == DOUBLE
    assert arithmetic("*", INT, DOUBLE) == DOUBLE
    assert arithmetic("*", decimal(10, 2), decimal(5, 0)) == decimal(16, 2)
    assert arithmetic("+", parse_type("timestamp"), parse_type("interval")) == parse_type("timestamp")
    assert arithmetic("+", parse_type("array<int>"), INT) is None


def test_common_types() -> None:
    assert wider(INT, DOUBLE) == DOUBLE
    assert wider(parse_type("date"), parse_type("timestamp")) == parse_type("timestamp")
    assert wider(parse_type("array<int>"), parse_type("struct<a:int>")) is None


def test_aggregate_result_types() -> None:
    assert aggregate_result("count", None) == BIGINT
    assert aggregate_result("sum", INT) == BIGINT
    assert aggregate_result("sum", DOUBLE) == DOUBLE
    assert aggregate_result("sum", decimal(10, 2)) == decimal(20, 2)
    assert aggregate_result("avg", INT) == DOUBLE
    assert aggregate_result("max", parse_type("string")) == parse_type("string")
    assert aggregate_result("approx_count_distinct", None) == BIGINT


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("1 minute", "1 minute"),
        ("5 MINUTES", "5 minutes"),
        ("30 seconds", "30 seconds"),
        ("INTERVAL '5' MINUTE", "5 minutes"),
        ("interval 1 hour 30 minutes", "1 hour 30 minutes"),
        ("2 days", "2 days"),
        ("500 ms", "500 milliseconds"),
    ],
)
def test_intervals_normalize(text: str, normalized: str) -> None:
    assert normalize_interval(text) == normalized


@pytest.mark.parametrize("text", ["soon", "", "5 parsecs", "0 seconds", "5 minutes later"])
def test_bad_intervals(text: str) -> None:
    with pytest.raises(IntervalError):
        normalize_interval(text)
