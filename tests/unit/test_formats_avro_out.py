"""Spark SQL types as Avro schemas (sluice.core.formats.avro_out): the schema an avro sink writes.
Every schema produced is valid Avro (fastavro parses it and writes a record with it), and reads back
(sluice.core.formats.avro) as the Spark types it came from."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from typing import Any

import fastavro
import pytest
from sluice.core.formats import avro, avro_out
from sluice.core.formats.avro import AvroTypeError
from sluice.core.plan.model import FieldSpec


def out(*columns: tuple[str, str], topic: str = "orders.totals") -> dict[str, Any]:
    schema = avro_out.schema_of([FieldSpec(name=n, type=t) for n, t in columns], topic)
    fastavro.parse_schema(json.loads(json.dumps(schema)))  # valid Avro
    return schema


def field_type(schema: dict[str, Any], name: str) -> Any:
    return next(f["type"] for f in schema["fields"] if f["name"] == name)


@pytest.mark.parametrize(
    ("ddl", "avro_type"),
    [
        ("boolean", "boolean"),
        ("tinyint", "int"),
        ("smallint", "int"),
        ("int", "int"),
        ("bigint", "long"),
        ("float", "float"),
        ("double", "double"),
        ("string", "string"),
        ("binary", "bytes"),
        ("date", {"type": "int", "logicalType": "date"}),
        ("timestamp", {"type": "long", "logicalType": "timestamp-micros"}),
        ("timestamp_ntz", {"type": "long", "logicalType": "local-timestamp-micros"}),
        ("decimal(10,2)", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}),
        ("array<string>", {"type": "array", "items": ["null", "string"]}),
        ("map<string,bigint>", {"type": "map", "values": ["null", "long"]}),
    ],
)
def test_each_type_is_a_nullable_field_with_default_null(ddl: str, avro_type: Any) -> None:
    schema = out(("c", ddl))
    assert schema["fields"] == [{"name": "c", "type": ["null", avro_type], "default": None}]


def test_the_record_is_named_after_the_topic_in_the_sluice_namespace() -> None:
    schema = out(("id", "bigint"), topic="orders.totals-v2")
    assert (schema["type"], schema["name"], schema["namespace"]) == ("record", "orders_totals_v2", "sluice")
    assert avro_out.record_name("2024-orders") == "_2024_orders"


def test_struct_columns_are_records_named_after_their_column_in_the_parent_namespace() -> None:
    schema = out(("address", "struct<street:string,geo:struct<lat:double,lon:double>>"),
                 ("lines", "array<struct<sku:string,qty:int>>"))
    address = field_type(schema, "address")[1]
    assert (address["name"], address["namespace"]) == ("address", "sluice.orders_totals")
    geo = address["fields"][1]["type"][1]
    assert (geo["name"], geo["namespace"]) == ("geo", "sluice.orders_totals.address")
    line = field_type(schema, "lines")[1]["items"][1]
    assert (line["type"], line["name"]) == ("record", "lines")


ROUND_TRIP = [
    "boolean", "int", "bigint", "float", "double", "string", "binary", "date", "timestamp",
    "timestamp_ntz", "decimal(38,18)", "decimal(5,0)", "array<array<int>>", "map<string,array<string>>",
    "struct<a:int,b:struct<c:string,d:array<decimal(12,4)>>>", "array<struct<x:bigint,y:map<string,date>>>",
]


@pytest.mark.parametrize("ddl", ROUND_TRIP)
def test_spark_to_avro_and_back_is_the_same_type_nullable(ddl: str) -> None:
    schema = out(("c", ddl))
    back = avro.fields(avro.parse(avro_out.schema_text(schema)))
    assert [(f.name, f.type.ddl, f.type.nullable) for f in back] == [("c", ddl, True)]


def test_avro_to_spark_to_avro_keeps_the_columns() -> None:
    source = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ]}
    columns = avro.columns(source)
    again = avro.columns(avro_out.schema_of(columns, "orders"))
    assert again == columns


def test_tinyint_and_smallint_widen_to_int() -> None:
    back = avro.columns(out(("a", "tinyint"), ("b", "smallint")))
    assert [c.type for c in back] == ["int", "int"]


def test_a_record_with_nulls_and_every_type_is_written_and_read_by_fastavro() -> None:
    schema = out(("id", "bigint"), ("total", "decimal(9,2)"), ("at", "timestamp"), ("day", "date"),
                 ("tags", "array<string>"), ("attrs", "map<string,int>"), ("who", "struct<name:string>"),
                 ("gone", "string"))
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    row = {"id": 1, "total": decimal.Decimal("12.34"), "at": dt.datetime(2026, 11, 27, tzinfo=dt.UTC),
           "day": dt.date(2026, 11, 27), "tags": ["a", None], "attrs": {"k": 1, "n": None},
           "who": {"name": "x"}, "gone": None}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, row)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, parsed, parsed) == row


def test_the_text_is_compact_json_in_the_order_built() -> None:
    text = avro_out.schema_text(out(("id", "bigint"), topic="t"))
    assert text == ('{"type":"record","name":"t","namespace":"sluice","fields":'
                    '[{"name":"id","type":["null","long"],"default":null}]}')


@pytest.mark.parametrize(
    ("columns", "path", "words"),
    [
        ([("count(1)", "bigint")], "value.count(1)", "give the column an alias"),
        ([("n", "void")], "value.n", "bare NULL"),
        ([("i", "interval")], "value.i", "interval has no Avro type"),
        ([("m", "map<int,string>")], "value.m", "Avro map keys are strings"),
        ([("s", "struct<ok:int,inner:array<map<bigint,int>>>")], "value.s.inner[]", "map keys"),
        ([("a", "int"), ("a", "string")], "value.a", "appears twice"),
    ],
)
def test_what_has_no_avro_type_is_refused_naming_the_column(
        columns: list[tuple[str, str]], path: str, words: str) -> None:
    with pytest.raises(AvroTypeError) as caught:
        avro_out.schema_of([FieldSpec(name=n, type=t) for n, t in columns], "t")
    assert caught.value.path == path
    assert words in caught.value.reason
