"""Protobuf schemas as plan columns, the wire format's message indexes, the sink schema derived from the
output (its descriptor equal to what protoc compiles from its text), and the runtime's conversion of
messages to and from Spark values. Pure: protoc runs as the operator runs it, nothing else."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import struct

import pytest
from google.protobuf import descriptor_pb2, message_factory
from hypothesis import given
from hypothesis import strategies as st
from sluice.core.compiler import CompileError, CompileTarget, compile_query
from sluice.core.formats import protobuf, protobuf_out
from sluice.core.plan.model import FieldSpec, RegistrySchema
from sluice.core.spec import QuerySpec
from sluice.operator.protoc import ProtocError, compile_proto, descriptor_of
from sluice_runtime import protobuf as runtime

SHOP = """\
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message Order {
  string order_id = 1;
  uint64 big = 2;
  uint32 small = 3;
  sint32 delta = 4;
  google.protobuf.Timestamp ts = 5;
  enum Kind { UNKNOWN = 0; WEB = 1; }
  Kind kind = 6;
  map<string, int64> counts = 7;
  message Line { string sku = 1; repeated float weights = 2; }
  repeated Line lines = 8;
  google.protobuf.StringValue note = 9;
  bytes raw = 10;
  optional bool flag = 11;
}

message Refund { string order_id = 1; message Reason { string text = 1; } }
"""


@pytest.fixture(scope="module")
def shop() -> str:
    return compile_proto(SHOP, "orders-value")


def test_a_message_maps_to_the_documented_spark_types(shop: str) -> None:
    assert {c.name: c.type for c in protobuf.columns(shop)} == {
        "order_id": "string", "big": "decimal(20,0)", "small": "bigint", "delta": "int",
        "ts": "timestamp", "kind": "string", "counts": "map<string,bigint>",
        "lines": "array<struct<sku:string,weights:array<float>>>", "note": "string", "raw": "binary",
        "flag": "boolean"}


def test_messages_and_their_wire_format_indexes(shop: str) -> None:
    assert protobuf.message(shop).full_name == "shop.Order"  # the first, as Confluent defaults
    assert protobuf.message_indexes(protobuf.message(shop)) == [0]
    assert protobuf.message_indexes(protobuf.message(shop, "shop.Refund")) == [1]
    assert protobuf.message_indexes(protobuf.message(shop, "shop.Refund.Reason")) == [1, 0]
    assert protobuf.index_bytes([0]) == b"\x00"
    assert protobuf.index_bytes([1]) == b"\x02\x02"
    assert protobuf.index_bytes([1, 0]) == b"\x04\x02\x00"
    assert protobuf.index_bytes([70]) == b"\x02\x8c\x01"  # zig-zag 140 as a varint
    with pytest.raises(protobuf.ProtobufTypeError,
                       match=r"no message 'shop.Nope' \(its messages: shop.Order"):
        protobuf.message(shop, "shop.Nope")


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=5),
       st.integers(0, 2**31 - 1))
def test_the_runtime_reads_back_the_indexes_the_core_writes(indexes: list[int], schema_id: int) -> None:
    assert runtime.split(runtime.header(schema_id, indexes) + b"body") == (schema_id, indexes, b"body")


def test_what_has_no_spark_type_is_refused_with_its_path() -> None:
    recursive = compile_proto('syntax = "proto3";\nmessage Node { string v = 1; repeated Node kids = 2; }\n',
                              "tree-value")
    with pytest.raises(protobuf.ProtobufTypeError, match=r"value.kids\[\]: message Node contains itself"):
        protobuf.columns(recursive)
    duration = compile_proto('syntax = "proto3";\nimport "google/protobuf/duration.proto";\n'
                             "message M { google.protobuf.Duration d = 1; }\n", "d-value")
    with pytest.raises(protobuf.ProtobufTypeError,
                       match=r"value.d: google.protobuf.Duration has no Spark type"):
        protobuf.columns(duration)


def test_protoc_errors_name_line_and_column_and_references_are_refused() -> None:
    with pytest.raises(ProtocError, match=r"orders-value.proto:2:\d+"):
        compile_proto('syntax = "proto3";\nmessage M { strin x = 1; }\n', "orders-value")
    with pytest.raises(ProtocError, match="not a well-known type: schema references are not supported yet"):
        file = descriptor_pb2.FileDescriptorProto(name="x.proto", dependency=["common/money.proto"])
        descriptor_of(base64.b64encode(file.SerializeToString()).decode(), "x-value")


def test_the_serialized_form_gives_the_same_columns_as_the_text(shop: str) -> None:
    files = descriptor_pb2.FileDescriptorSet()
    files.ParseFromString(base64.b64decode(shop))
    serialized = base64.b64encode(files.file[-1].SerializeToString()).decode()  # what a serializer registers
    assert protobuf.columns(descriptor_of(serialized, "orders-value")) == protobuf.columns(shop)


OUTPUT = [FieldSpec(name=n, type=t) for n, t in (
    ("page", "string"), ("n", "bigint"), ("small", "smallint"),
    ("minute", "struct<start:timestamp,end:timestamp>"), ("tags", "array<string>"),
    ("by_city", "map<string,struct<n:int>>"), ("lines", "array<struct<sku:string,qty:int>>"),
    ("ok", "boolean"),
    ("raw", "binary"), ("ratio", "double"))]


def test_the_sink_descriptor_is_what_protoc_compiles_from_the_sink_text() -> None:
    sink = protobuf_out.schema_of(OUTPUT, "page-counts.v2")
    assert sink.message == "sluice.page_counts_v2"
    assert "optional int64 n = 2;" in sink.text and "google.protobuf.Timestamp start = 1;" in sink.text
    ours, compiled = descriptor_pb2.FileDescriptorSet(), descriptor_pb2.FileDescriptorSet()
    ours.ParseFromString(base64.b64decode(sink.descriptor))
    compiled.ParseFromString(base64.b64decode(compile_proto(sink.text, "x")))
    compiled.file[-1].name = ours.file[-1].name
    assert ours == compiled
    # read back: the output's types (smallint widens to int)
    back = {c.name: c.type for c in protobuf.columns(sink.descriptor, sink.message)}
    assert back == {c.name: c.type for c in OUTPUT} | {"small": "int"}


@pytest.mark.parametrize(("column", "message"), [
    (FieldSpec(name="d", type="date"), r"value.d: date \(cast it to timestamp or string\) has no Protobuf"),
    (FieldSpec(name="x", type="decimal(10,2)"), r"value.x: decimal\(10,2\) \(cast it to double or string\)"),
    (FieldSpec(name="a", type="array<array<int>>"), r"value.a\[\]: array<int> inside an array or a map"),
    (FieldSpec(name="m", type="map<double,int>"), r"value.m: map<double,int>: Protobuf map keys are strings"),
    (FieldSpec(name="count(1)", type="bigint"), r"'count\(1\)' is not a Protobuf field name"),
])
def test_sink_columns_without_a_protobuf_type_are_refused(column: FieldSpec, message: str) -> None:
    with pytest.raises(protobuf.ProtobufTypeError, match=message):
        protobuf_out.schema_of([column], "out")


def test_rows_written_by_the_sink_encoder_read_back_with_nulls_and_values() -> None:
    sink = protobuf_out.schema_of(OUTPUT, "out")
    start = dt.datetime(2026, 11, 28, 10, 0, tzinfo=dt.UTC)
    row = {"page": "home", "n": 0, "small": None, "minute": (start, start + dt.timedelta(minutes=1)),
           "tags": ["a", None], "by_city": {"x": (3,), "y": None}, "lines": [("s1", 2)], "ok": False,
           "raw": b"\x00\x01", "ratio": None}
    value = runtime.encoder(sink.descriptor, sink.message, 7)(row)
    assert value[:6] == struct.pack(">bI", 0, 7) + b"\x00"
    decode = runtime.decoder(sink.descriptor, sink.message, OUTPUT)
    ok, reason, got = decode(value)
    assert ok and reason is None and got is not None
    assert dict(zip([c.name for c in OUTPUT], got, strict=True)) == {
        "page": "home", "n": 0, "small": None, "minute": (start, start + dt.timedelta(minutes=1)),
        "tags": ["a", ""], "by_city": {"x": (3,), "y": (None,)}, "lines": [("s1", 2)], "ok": False,
        "raw": b"\x00\x01", "ratio": None}


def test_the_decoder_reads_enums_unsigned_wrappers_and_reports_why_a_record_is_malformed(shop: str) -> None:
    cls = message_factory.GetMessageClass(protobuf.message(shop))
    order = cls(order_id="o1", big=2**64 - 1, kind=1, counts={"a": 2})
    order.note.value = "hi"
    columns = protobuf.columns(shop)
    decode = runtime.decoder(shop, "shop.Order", columns)
    ok, _, row = decode(runtime.header(9, [0]) + order.SerializeToString())
    assert ok and row is not None
    got = dict(zip([c.name for c in columns], row, strict=True))
    assert got["big"] == decimal.Decimal(2**64 - 1) and got["kind"] == "WEB" and got["note"] == "hi"
    assert got["ts"] is None and got["flag"] is None and got["small"] == 0  # presence, or the zero value
    assert decode(None) == (False, "record value is null", None)
    assert decode(b"{}")[1] == ("record value is not in the Confluent wire format (magic byte 0, a 4-byte "
                                "schema id, message indexes, Protobuf binary)")
    assert decode(runtime.header(9, [1]))[1] == ("record value carries message indexes [1] (schema id 9), "
                                                 "not those of the pinned message shop.Order ([0])")
    assert decode(runtime.header(9, [0]) + b"\xff\xff")[1].startswith(
        "record value does not decode as Protobuf message shop.Order (schema id 9): ")


HEADER = {"sources": [{"name": "orders", "topic": "orders", "format": "protobuf"}],
          "sql": "SELECT order_id, kind FROM orders", "sink": {"topic": "out", "format": "protobuf"}}


def test_the_compiler_pins_the_message_and_derives_the_sink(shop: str) -> None:
    pinned = RegistrySchema(subject="orders-value", schema_type="PROTOBUF", schema_=SHOP, descriptor=shop,
                            id=3, version=1)
    target = CompileTarget(schemas={"orders-value": pinned})
    plan = compile_query(QuerySpec.model_validate(HEADER), target)
    source = plan.steps[0]
    assert source.value_schema is not None and source.value_schema.message == "shop.Order"
    assert plan.sink.value_schema is not None and plan.sink.value_schema.schema_type == "PROTOBUF"
    assert plan.sink.value_schema.message == "sluice.out"
    with_message = HEADER | {"sources": [HEADER["sources"][0] | {"message": "shop.Refund"}],
                             "sql": "SELECT order_id FROM orders"}
    plan = compile_query(QuerySpec.model_validate(with_message), target)
    assert [f.name for f in plan.steps[0].schema_ if f.name == "order_id"] == ["order_id"]
    with pytest.raises(CompileError, match=r"no message 'shop.Nope'") as refused:
        nope = HEADER | {"sources": [HEADER["sources"][0] | {"message": "shop.Nope"}]}
        compile_query(QuerySpec.model_validate(nope), target)
    assert refused.value.problems[0].field == "spec.sources[0].message"
    avro = pinned.model_copy(update={"schema_type": "AVRO", "descriptor": None})
    with pytest.raises(CompileError, match=r"has format protobuf, but subject 'orders-value'.*holds a AVRO"):
        compile_query(QuerySpec.model_validate(HEADER), CompileTarget(schemas={"orders-value": avro}))


def test_message_is_only_for_a_protobuf_source() -> None:
    with pytest.raises(ValueError, match="message: only a protobuf source names a message"):
        QuerySpec.model_validate(HEADER | {"sources": [{"name": "o", "topic": "o", "format": "avro",
                                                        "message": "x.Y"}]})
