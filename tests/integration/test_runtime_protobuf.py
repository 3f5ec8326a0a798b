"""Protobuf sources and sinks on real PySpark, a real broker and a real schema registry (Apicurio,
Confluent-compatible API): records produced by confluent-kafka's own ``ProtobufSerializer`` (which
registers the schema in its serialized form), the source subject pinned by the operator's own
registry client (``RegistryClient.latest``: the schema compiled or read into a descriptor), the sink
schema registered by it as ``.proto`` text, the output read by confluent-kafka's
``ProtobufDeserializer``. A projection and a windowed aggregate from Protobuf to Protobuf with exact
results (at-least-once and exactly-once); a record of a newer compatible writer version read with
the pinned descriptor; malformed records in the dead-letter topic with their reasons; the registry's
compatibility answer on an incompatible sink schema. Nothing skips."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.formats import protobuf as core
from sluice.core.formats.registry import incompatibility
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.operator.protoc import compile_proto
from sluice.operator.registry import RegistryClient, RegistryRefused

from tests.support.registry_fixture import SchemaRegistry
from tests.support.runtime import HEADER, consume, create_topic, produce, shared_spark, unique

pytestmark = pytest.mark.integration

ORDER_V1 = """\
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  string order_id = 1;
  double amount = 2;
  google.protobuf.Timestamp ts = 3;
  enum Channel { UNKNOWN = 0; WEB = 1; STORE = 2; }
  Channel channel = 4;
  repeated string tags = 5;
  message Address { string city = 1; }
  Address address = 6;
  optional int64 coupon = 7;
}
"""
#: V1 with a field added: BACKWARD compatible
ORDER_V2 = ORDER_V1.replace("  optional int64 coupon = 7;\n",
                            "  optional int64 coupon = 7;\n  string note = 8;\n")
START = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


def _message_class(text: str, name: str = "shop.Order") -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(core.message(compile_proto(text, "test"), name))


def _orders(cls: Any, n: int, start: int = 0, note: bool = False) -> list[Any]:
    out = []
    for i in range(start, start + n):
        order = cls(order_id=f"o{i}", amount=float(i % 7) + 0.5, channel=i % 3,
                    tags=[f"t{i % 2}"] * (i % 3))
        order.ts.FromDatetime(START + timedelta(seconds=5 * i))
        if i % 4:
            order.address.city = f"city{i % 4}"
        if i % 5 == 0:
            order.coupon = i
        if note:
            order.note = f"n{i}"
        out.append(order)
    return out


def _produce(kafka: str, registry: SchemaRegistry, topic: str, messages: list[Any]) -> None:
    """``messages`` written by confluent-kafka's serializer (which registers the schema in its
    serialized form)."""
    serialize = ProtobufSerializer(type(messages[0]), registry.client(), {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    produce(kafka, topic, [serialize(m, ctx) for m in messages])


def _plan(spec: str, *readers: RegistrySchema) -> Plan:
    return compile_query(parse_manifest(HEADER + "spec:\n" + spec).spec,
                         CompileTarget(schemas={r.subject: r for r in readers}))


def _spec(src: str, sql: str, out: str, sink_extra: str = "", source_extra: str = "") -> str:
    return f"""\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {src}
      format: protobuf
      eventTime: {{column: ts, watermark: 1 minute}}
{source_extra}
  sql: "{sql}"
  sink: {{topic: {out}, format: protobuf{sink_extra}}}
"""


def _run(spark: Any, plan: Plan, kafka: str, checkpoint: Path, sink_id: int | None = None) -> None:
    from sluice_runtime.avro import AvroSettings
    from sluice_runtime.pipeline import build_pipeline

    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=unique("q"),
                          available_now=True, avro=AvroSettings(sink_schema_id=sink_id))
    for q in pipe.all_queries():
        q.awaitTermination(300)
    if pipe.eos_sink is not None:
        pipe.eos_sink.close()
    assert pipe.main.exception() is None


def _register_sink(registry: SchemaRegistry, plan: Plan) -> int:
    """The sink schema registered as the operator does it (``.proto`` text, type PROTOBUF)."""
    schema = plan.sink.value_schema
    assert plan.sink.format == "protobuf" and schema is not None and schema.schema_type == "PROTOBUF"
    return RegistryClient(registry.url).register(schema.subject, schema.schema_, schema.schema_type)


def _read(kafka: str, plan: Plan, topic: str, expect: int, sink_id: int) -> list[Any]:
    schema = plan.sink.value_schema
    assert schema is not None and schema.descriptor is not None and schema.message is not None
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(core.message(schema.descriptor, schema.message))
    deserialize = ProtobufDeserializer(cls, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    raw = consume(kafka, topic, expect=expect)
    assert {struct.unpack(">bI", v[:5]) for _, v, _ in raw} == {(0, sink_id)}
    return [deserialize(v, ctx) for _, v, _ in raw]


def test_protobuf_in_protobuf_out_projection_and_windowed_aggregate_exact(
        spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    src = unique("orders")
    create_topic(kafka, src, partitions=2)
    cls = _message_class(ORDER_V1)
    sent = _orders(cls, 60)  # 5 minutes of orders
    _produce(kafka, schema_registry, src, sent)
    reader = RegistryClient(schema_registry.url).latest(f"{src}-value")  # as the operator pins it
    assert reader.schema_type == "PROTOBUF" and reader.descriptor is not None

    # a projection, at-least-once: every field type through
    out = unique("flat")
    sql = ("SELECT order_id, amount, ts, channel, tags, address.city AS city, coupon, "
           "size(tags) AS tag_count FROM orders")
    plan = _plan(_spec(src, sql, out), reader)
    source = plan.steps[0]
    assert {f.name: f.type for f in source.schema_}.items() >= {
        "order_id": "string", "amount": "double", "ts": "timestamp", "channel": "string",
        "tags": "array<string>", "address": "struct<city:string>", "coupon": "bigint"}.items()
    sink_id = _register_sink(schema_registry, plan)
    _run(spark, plan, kafka, tmp_path / "flat", sink_id)
    rows = {m.order_id: m for m in _read(kafka, plan, out, 60, sink_id)}
    assert len(rows) == 60
    for order in sent:
        row = rows[order.order_id]
        assert row.amount == order.amount
        assert row.ts.ToDatetime(tzinfo=UTC) == order.ts.ToDatetime(tzinfo=UTC)
        assert row.channel == ("UNKNOWN", "WEB", "STORE")[int(order.order_id[1:]) % 3]
        assert list(row.tags) == list(order.tags) and row.tag_count == len(order.tags)
        assert row.HasField("city") == order.HasField("address")
        assert row.city == (order.address.city if order.HasField("address") else "")
        assert row.HasField("coupon") == order.HasField("coupon")  # unset reads as null, not 0
        assert row.coupon == order.coupon

    # a windowed aggregate, exactly-once
    out = unique("per-minute")
    sql = ("SELECT window(ts, '1 minute') AS minute, channel, count(*) AS n, sum(amount) AS revenue "
           "FROM orders GROUP BY window(ts, '1 minute'), channel")
    plan = _plan(_spec(src, sql, out, ", key: [channel], delivery: exactlyOnce, outputMode: update"), reader)
    sink_id = _register_sink(schema_registry, plan)
    expected: dict[tuple[datetime, str], tuple[int, float]] = {}
    for order in sent:
        moment = order.ts.ToDatetime(tzinfo=UTC).replace(second=0)
        channel = ("UNKNOWN", "WEB", "STORE")[order.channel]
        n, total = expected.get((moment, channel), (0, 0.0))
        expected[(moment, channel)] = (n + 1, total + order.amount)
    _run(spark, plan, kafka, tmp_path / "agg", sink_id)
    got = {(m.minute.start.ToDatetime(tzinfo=UTC), m.channel): (m.n, m.revenue)
           for m in _read(kafka, plan, out, len(expected), sink_id)}
    assert got == expected


def test_newer_writer_version_and_malformed_records(
        spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    src, out, dlq = unique("orders"), unique("out"), unique("dlq")
    create_topic(kafka, src)
    # Apicurio 2.6 takes no second version of a subject whose schemas are in the serialized form (it
    # parses them as .proto text), which is what confluent-kafka's serializer registers: both versions
    # go in as .proto text, and the records are written in the wire format with their ids (as the
    # serializer writes them: magic byte, id, message index 0, the message)
    client = RegistryClient(schema_registry.url)
    v1 = client.register(f"{src}-value", ORDER_V1, "PROTOBUF")
    reader = client.latest(f"{src}-value")
    v2 = client.register(f"{src}-value", ORDER_V2, "PROTOBUF")
    newer = client.latest(f"{src}-value")
    produce(kafka, src, [struct.pack(">bI", 0, v1) + b"\x00" + m.SerializeToString()
                         for m in _orders(_message_class(ORDER_V1), 10)])
    produce(kafka, src, [struct.pack(">bI", 0, v2) + b"\x00" + m.SerializeToString()
                         for m in _orders(_message_class(ORDER_V2), 5, start=10, note=True)])
    assert reader.id == v1 and newer.id == v2
    assert newer.version == (reader.version or 0) + 1
    body = _orders(_message_class(ORDER_V1), 1)[0].SerializeToString()
    bad = [b'{"order_id": "json"}', None,
           struct.pack(">bI", 0, reader.id) + b"\x00" + b"\xff\xff\xff",  # not Protobuf binary
           struct.pack(">bI", 0, reader.id) + b"\x02\x02" + body]  # message indexes [1]: another message
    produce(kafka, src, bad)
    block = f"      malformed: {{policy: deadLetter, topic: {dlq}}}"
    plan = _plan(_spec(src, "SELECT order_id, coupon FROM orders", out, source_extra=block), reader)
    sink_id = _register_sink(schema_registry, plan)
    _run(spark, plan, kafka, tmp_path / "d", sink_id)
    good = sorted(m.order_id for m in _read(kafka, plan, out, 15, sink_id))
    assert good == sorted(f"o{i}" for i in range(15))  # the V2 records read with the pinned V1
    letters = consume(kafka, dlq, expect=4)
    reasons = {v: dict(h)["sluice.error"].decode() for _, v, h in letters}
    assert reasons[bad[0]] == ("record value is not in the Confluent wire format (magic byte 0, a 4-byte "
                               "schema id, message indexes, Protobuf binary)")
    assert reasons[None] == "record value is null"
    assert reasons[bad[2]].startswith(f"record value does not decode as Protobuf message shop.Order (schema "
                                      f"id {reader.id}): ")
    assert reasons[bad[3]] == (f"record value carries message indexes [1] (schema id {reader.id}), not "
                               "those of the pinned message shop.Order ([0])")


def test_the_registry_compiles_text_refuses_references_and_answers_compatibility(
        schema_registry: SchemaRegistry) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaReference

    client = RegistryClient(schema_registry.url)
    subject = f"{unique('orders')}-value"
    client.register(subject, ORDER_V1, "PROTOBUF")  # .proto text, as a sink schema is registered
    pinned = client.latest(subject)
    assert pinned.schema_type == "PROTOBUF" and pinned.descriptor is not None
    assert core.message(pinned.descriptor).full_name == "shop.Order"

    assert client.compatibility(subject, ORDER_V2, "PROTOBUF") is not None
    assert incompatibility(subject, client.compatibility(subject, ORDER_V2, "PROTOBUF") or {}) is None
    changed = ORDER_V1.replace("double amount = 2;", "string amount = 2;")
    answer = client.compatibility(subject, changed, "PROTOBUF")
    assert answer is not None
    refused = incompatibility(subject, answer)
    assert refused is not None and "incompatible with subject" in refused

    # a schema importing another subject's file (a reference) is refused, with the reason
    shared = f"{unique('shared')}-value"
    confluent = schema_registry.client()
    money = 'syntax = "proto3";\npackage common;\nmessage Money { double v = 1; }\n'
    confluent.register_schema(shared, Schema(money, "PROTOBUF"))
    using = f"{unique('uses')}-value"
    text = ('syntax = "proto3";\npackage shop;\nimport "common/money.proto";\n'
            "message Payment { common.Money total = 1; }\n")
    references = [SchemaReference("common/money.proto", shared, 1)]
    confluent.register_schema(using, Schema(text, "PROTOBUF", references))
    with pytest.raises(RegistryRefused, match="schema references are not supported yet"):
        client.latest(using)
