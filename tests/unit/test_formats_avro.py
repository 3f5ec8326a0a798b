"""Avro schemas as Spark SQL types (sluice.core.formats.avro): the plan's column types of an Avro
source, nullability included, and a clear error naming the field for what has no Spark type. Every
schema a case accepts is checked to be valid Avro with fastavro first."""

from __future__ import annotations

import json
from typing import Any

import fastavro
import pytest
from sluice.core.formats import avro
from sluice.core.formats.avro import AvroTypeError, columns, fields, to_spark
from sluice.core.plan.model import FieldSpec
from sluice.core.types import parse_type


def record(*declared: tuple[str, Any], name: str = "Value", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, **extra,
            "fields": [{"name": field, "type": kind} for field, kind in declared]}


def valid(schema: Any) -> Any:
    """``schema`` after fastavro has parsed it: the cases test real Avro schemas."""
    fastavro.parse_schema(json.loads(json.dumps(schema)))  # a copy: fastavro may annotate its input
    return schema


@pytest.mark.parametrize(
    ("schema", "ddl"),
    [
        ("boolean", "boolean"),
        ("int", "int"),
        ("long", "bigint"),
        ("float", "float"),
        ("double", "double"),
        ("bytes", "binary"),
        ("string", "string"),
        ({"type": "string"}, "string"),
        ({"type": "int", "logicalType": "date"}, "date"),
        ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp"),
        ({"type": "long", "logicalType": "timestamp-micros"}, "timestamp"),
        ({"type": "long", "logicalType": "local-timestamp-millis"}, "timestamp_ntz"),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, "timestamp_ntz"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, "decimal(10,2)"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 38}, "decimal(38,0)"),
        ({"type": "fixed", "name": "Amount", "size": 8, "logicalType": "decimal", "precision": 18,
          "scale": 4}, "decimal(18,4)"),
        ({"type": "fixed", "name": "Hash", "size": 16}, "binary"),
        ({"type": "enum", "name": "Kind", "symbols": ["A", "B"]}, "string"),
        ({"type": "array", "items": "string"}, "array<string>"),
        ({"type": "map", "values": "long"}, "map<string,bigint>"),
        ({"type": "array", "items": {"type": "map", "values": {"type": "array", "items": "int"}}},
         "array<map<string,array<int>>>"),
        (record(("id", "long"), ("name", "string")), "struct<id:bigint,name:string>"),
        (["null", "string"], "string"),
        (["string", "null"], "string"),
        # a logical type a reader does not know is its underlying type (the Avro specification)
        ({"type": "string", "logicalType": "uuid"}, "string"),
        ({"type": "int", "logicalType": "time-millis"}, "int"),
        ({"type": "long", "logicalType": "time-micros"}, "bigint"),
        ({"type": "long", "logicalType": "timestamp-nanos"}, "bigint"),
        ({"type": "long", "logicalType": "date"}, "bigint"),  # on the wrong type: ignored
        ({"type": "fixed", "name": "Duration", "size": 12, "logicalType": "duration"}, "binary"),
    ],
)
def test_types(schema: Any, ddl: str) -> None:
    mapped = to_spark(valid(schema))
    assert mapped.ddl == ddl
    assert parse_type(ddl).render() == ddl  # what the plan's type parser reads back unchanged
    assert mapped.spark == parse_type(ddl)


def test_nullability_at_every_level() -> None:
    schema = valid(record(
        ("id", "long"),
        ("email", ["null", "string"]),
        ("tags", {"type": "array", "items": ["null", "string"]}),
        ("scores", ["null", {"type": "map", "values": "double"}]),
        ("address", record(("city", "string"), ("zip", ["null", "string"]), name="Address")),
    ))
    mapped = to_spark(schema)
    assert not mapped.nullable
    by_name = {field.name: field.type for field in mapped.fields}
    assert [by_name["id"].nullable, by_name["email"].nullable] == [False, True]
    tags = by_name["tags"]
    assert not tags.nullable and tags.element is not None and tags.element.nullable
    scores = by_name["scores"]
    assert scores.nullable and scores.value is not None and not scores.value.nullable
    assert [(f.name, f.type.nullable) for f in by_name["address"].fields] == [("city", False), ("zip", True)]
    assert mapped.ddl == (
        "struct<id:bigint,email:string,tags:array<string>,scores:map<string,double>,"
        "address:struct<city:string,zip:string>>"
    )


def test_columns_of_a_record_are_the_plans_field_specs() -> None:
    schema = valid({
        "type": "record", "name": "Order", "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "amount",
             "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
            {"name": "lines", "type": {"type": "array", "items": {
                "type": "record", "name": "Line", "fields": [
                    {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
            {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    })
    assert columns(schema) == [
        FieldSpec(name="id", type="bigint"),
        FieldSpec(name="placed", type="timestamp"),
        FieldSpec(name="amount", type="decimal(12,2)"),
        FieldSpec(name="lines", type="array<struct<sku:string,qty:int>>"),
        FieldSpec(name="status", type="string"),
        FieldSpec(name="note", type="string"),
    ]
    assert [f.type.nullable for f in fields(schema)] == [False] * 5 + [True]


def test_a_nullable_record_value_still_gives_its_columns() -> None:
    schema = valid(["null", record(("id", "long"))])
    assert columns(schema) == [FieldSpec(name="id", type="bigint")]


def test_named_types_are_reused_by_name_and_namespace() -> None:
    address = record(("city", "string"), name="Address", namespace="geo")
    schema = valid({
        "type": "record", "name": "Customer", "namespace": "shop",
        "fields": [
            {"name": "home", "type": address},
            {"name": "work", "type": ["null", "geo.Address"]},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A"]}},
            {"name": "again", "type": "Kind"},  # shop.Kind, by the enclosing namespace
            {"name": "full", "type": "shop.Kind"},
        ],
    })
    assert to_spark(schema).ddl == (
        "struct<home:struct<city:string>,work:struct<city:string>,kind:string,again:string,full:string>"
    )
    work = to_spark(schema).fields[1].type
    assert work.nullable and not to_spark(schema).fields[0].type.nullable


def test_parse_reads_a_registrys_schema_string() -> None:
    text = json.dumps(record(("id", "long")))
    assert avro.parse(text) == record(("id", "long"))
    assert avro.parse('"string"') == "string"
    with pytest.raises(AvroTypeError, match=r"^value: the schema is not JSON"):
        avro.parse("{not json")
    with pytest.raises(AvroTypeError, match=r"^value: not an Avro schema: 42"):
        avro.parse("42")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (record(("address", record(("kind", ["int", "string"]), name="Address"))),
         "value.address.kind: a union of int and string has no Spark type"),
        (record(("x", ["null", "int", "long"])), "value.x: a union of int and long has no Spark type"),
        (record(("x", ["int", "string", "boolean"])),
         "value.x: a union of int, string and boolean has no Spark type"),
        (record(("x", ["null", record(("a", "int"), name="A"), "string"])),
         "value.x: a union of record A and string has no Spark type"),
        (record(("tags", {"type": "array", "items": ["int", "string"]})),
         "value.tags[]: a union of int and string has no Spark type"),
        (record(("attrs", {"type": "map", "values": ["long", "double"]})),
         "value.attrs{}: a union of long and double has no Spark type"),
        (record(("x", "null")), "value.x: null has no Spark type outside a union with another type"),
        (record(("x", ["null"])), "value.x: a union of null alone has no Spark type"),
        ({"type": "record", "name": "Node", "fields": [
            {"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]},
         "value.next: record Node contains itself: a recursive record has no Spark type"),
        ({"type": "record", "name": "Tree", "namespace": "t", "fields": [
            {"name": "children", "type": {"type": "array", "items": "t.Tree"}}]},
         r"value.children[]: record t.Tree contains itself"),
        ({"type": "record", "name": "Empty", "fields": []},
         "value: record Empty has no fields: an empty struct has no Spark type"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2},
         "value: decimal(40,2) has no Spark type (precision 38 at most)"),
    ],
)
def test_what_has_no_spark_type_is_refused_naming_the_field(schema: Any, message: str) -> None:
    valid(schema)  # a real Avro schema, refused for Spark
    with pytest.raises(AvroTypeError) as refused:
        to_spark(schema)
    assert str(refused.value).startswith(message)
    assert refused.value.path == message.split(":")[0]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "bytes", "logicalType": "decimal"}, "value: a decimal needs a precision"),
        ({"type": "fixed", "name": "Small", "size": 2, "logicalType": "decimal", "precision": 6},
         "value: decimal(6,0) does not fit a fixed of 2 bytes"),
        (record(("x", "Unknown")), "value.x: unknown type 'Unknown'"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 5},
         "value: decimal(4,5): the scale must be 0 to the precision"),
        ({"type": "array"}, "value: an array needs items"),
        ({"type": "map"}, "value: a map needs values"),
        ({"type": "enum", "name": "E"}, "value: an enum needs a list of symbols"),
        ({"type": "fixed", "name": "F"}, "value: a fixed needs a size"),
        ({"name": "x"}, "value: a schema object needs a type"),
        (42, "value: not an Avro schema: 42"),
        ([["null", "int"]], "value: a union directly inside a union is not Avro"),
        (["null", "null", "int"], "value: a union lists null more than once"),
        ([], "value: an empty union has no Spark type"),
        ({"type": "record", "name": "R"}, "value: record R needs a list of fields"),
        ({"type": "record", "name": "1bad", "fields": [{"name": "a", "type": "int"}]},
         'value: a record needs a valid name, not "1bad"'),
        (record(("a", "int"), ("A", "long")),
         "value.A: record Value has fields a and A, one column to Spark SQL"),
        ({"type": "record", "name": "R", "fields": [{"name": "a"}]}, "value.a: a field needs a type"),
        ({"type": "record", "name": "R", "fields": [{"type": "int"}]},
         "value.fields[0]: a field needs a valid name, not null"),
        (record(("a", record(("x", "int"), name="A")), ("b", record(("y", "int"), name="A"))),
         "value.b: the type A is defined twice"),
    ],
)
def test_invalid_schemas_are_refused_naming_the_field(schema: Any, message: str) -> None:
    with pytest.raises(AvroTypeError) as refused:
        to_spark(schema)
    assert str(refused.value).startswith(message)


def test_the_root_path_is_the_callers() -> None:
    with pytest.raises(AvroTypeError, match=r"^key\.k: a union of int and string"):
        to_spark(record(("k", ["int", "string"])), path="key")


def test_columns_need_a_record() -> None:
    with pytest.raises(AvroTypeError, match=r"^value: the schema is string, not a record"):
        columns("string")


@pytest.mark.parametrize(("size", "digits"), [(1, 2), (2, 4), (4, 9), (8, 18), (16, 38), (0, 0)])
def test_max_fixed_precision(size: int, digits: int) -> None:
    assert avro.max_fixed_precision(size) == digits
