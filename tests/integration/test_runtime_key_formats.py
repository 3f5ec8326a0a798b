"""Record key formats (``keyFormat``) on real PySpark, a real broker and a real schema registry
(Apicurio, Confluent-compatible API): keys and values produced with confluent-kafka's own
``AvroSerializer`` (``MessageField.KEY`` for keys) and Kafka's primitive serializers, the output read
back with ``AvroDeserializer`` and the primitive deserializers. A query grouping by an Avro key field
writing an Avro key and value; a join on the Avro key fields of two sources; ``kafka:long``,
``kafka:int``, ``kafka:short``, ``kafka:double``, ``kafka:float``, ``kafka:bytes`` and ``kafka:uuid``
keys read and written, a key of the wrong length (a key that is no UUID's text) dead-lettered with its
reason, a sink's ``kafka:uuid`` key column that is no UUID failing the query. Nothing skips."""

from __future__ import annotations

import base64
import json
import struct
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import (
    DoubleDeserializer,
    DoubleSerializer,
    IntegerDeserializer,
    IntegerSerializer,
    MessageField,
    SerializationContext,
)
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan, RegistrySchema

from tests.support.registry_fixture import SchemaRegistry, register_avro
from tests.support.runtime import HEADER, consume, consume_json, create_topic, shared_spark, unique

pytestmark = pytest.mark.integration

KEY = {"type": "record", "name": "CustomerKey", "namespace": "shop",
       "fields": [{"name": "customer_id", "type": "long"}]}
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
CUSTOMER_KEY = {"type": "record", "name": "Id", "namespace": "crm",
                "fields": [{"name": "id", "type": "long"}]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "crm", "fields": [
    {"name": "name", "type": "string"},
    {"name": "since", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
START = datetime(2026, 1, 1, 10, tzinfo=UTC)


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)




def _produce(kafka: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(60) == 0


def _produce_avro(kafka: str, client: SchemaRegistryClient, topic: str, key_schema: dict[str, Any],
                  value_schema: dict[str, Any], records: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    keys = AvroSerializer(client, json.dumps(key_schema))
    values = AvroSerializer(client, json.dumps(value_schema))
    key_ctx = SerializationContext(topic, MessageField.KEY)
    value_ctx = SerializationContext(topic, MessageField.VALUE)
    _produce(kafka, topic, [(keys(k, key_ctx), values(v, value_ctx)) for k, v in records])


def _plan(spec: str, *readers: RegistrySchema) -> Plan:
    target = CompileTarget(schemas={r.subject: r for r in readers})
    return compile_query(parse_manifest(HEADER + "spec:\n" + spec).spec, target)


def _run(spark: Any, plan: Plan, kafka: str, checkpoint: Path, avro: Any) -> None:
    from sluice_runtime.pipeline import build_pipeline

    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=unique("q"),
                          available_now=True, avro=avro)
    for q in pipe.all_queries():
        q.awaitTermination(300)
    if pipe.eos_sink is not None:
        pipe.eos_sink.close()
    assert pipe.main.exception() is None


def _settings(registry: SchemaRegistry, sink_id: int | None = None, key_id: int | None = None) -> Any:
    from sluice_runtime.avro import AvroSettings, Registry

    return AvroSettings(registry=Registry(registry.url), sink_schema_id=sink_id, sink_key_schema_id=key_id)


def _orders() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [({"customer_id": 100 + i % 3},
             {"order_id": f"o{i}", "amount": float(i), "ts": START + timedelta(seconds=i)})
            for i in range(30)]


def test_group_by_an_avro_key_field_into_an_avro_key(spark: Any, kafka: str, schema_registry: SchemaRegistry,
                                                     tmp_path: Path) -> None:
    client = schema_registry.client()
    src, out = unique("orders"), unique("revenue")
    create_topic(kafka, src, partitions=2)
    create_topic(kafka, out, partitions=1)
    key_reader = register_avro(client, f"{src}-key", KEY)
    value_reader = register_avro(client, f"{src}-value", ORDER)
    sent = _orders()
    _produce_avro(kafka, client, src, KEY, ORDER, sent)
    spec = f"""\
  shufflePartitions: 2
  sources:
    - {{name: orders, topic: {src}, format: avro, keyFormat: avro}}
  sql: SELECT customer_id, count(*) AS n, sum(amount) AS revenue FROM orders GROUP BY customer_id
  sink: {{topic: {out}, format: avro, key: [customer_id], keyFormat: avro, outputMode: update}}
"""
    plan = _plan(spec, key_reader, value_reader)
    assert [f.name for f in plan.steps[0].schema_] == ["customer_id", "order_id", "amount", "ts"]
    key_schema, value_schema = plan.sink.key_schema, plan.sink.value_schema
    assert key_schema is not None and key_schema.subject == f"{out}-key" and value_schema is not None
    key_id = register_avro(client, key_schema.subject, key_schema.schema_).id  # as the operator does
    value_id = register_avro(client, value_schema.subject, value_schema.schema_).id
    _run(spark, plan, kafka, tmp_path / "c", _settings(schema_registry, value_id, key_id))

    raw = consume(kafka, out, expect=3)
    assert raw and {struct.unpack(">bI", k[:5]) for k, _, _ in raw} == {(0, key_id)}
    keys, values = AvroDeserializer(client), AvroDeserializer(client)
    key_ctx = SerializationContext(out, MessageField.KEY)
    value_ctx = SerializationContext(out, MessageField.VALUE)
    final: dict[int, tuple[int, float]] = {}
    for k, v, _ in raw:  # update mode: the last record of each key is its result
        key, value = keys(k, key_ctx), values(v, value_ctx)
        assert key == {"customer_id": value["customer_id"]}
        final[key["customer_id"]] = (value["n"], value["revenue"])
    expected: dict[int, tuple[int, float]] = {}
    for k, v in sent:
        n, total = expected.get(k["customer_id"], (0, 0.0))
        expected[k["customer_id"]] = (n + 1, total + v["amount"])
    assert final == expected == {100: (10, 135.0), 101: (10, 145.0), 102: (10, 155.0)}


def test_join_on_avro_key_fields(spark: Any, kafka: str, schema_registry: SchemaRegistry,
                                 tmp_path: Path) -> None:
    client = schema_registry.client()
    orders_topic, customers_topic, out = unique("orders"), unique("customers"), unique("joined")
    create_topic(kafka, orders_topic)
    create_topic(kafka, customers_topic)
    readers = [register_avro(client, f"{orders_topic}-key", KEY),
               register_avro(client, f"{orders_topic}-value", ORDER),
               register_avro(client, f"{customers_topic}-key", CUSTOMER_KEY),
               register_avro(client, f"{customers_topic}-value", CUSTOMER)]
    _produce_avro(kafka, client, orders_topic, KEY, ORDER, _orders())
    customers = [({"id": 100 + i}, {"name": f"n{i}", "since": START}) for i in (0, 1, 5)]  # 102 has none
    _produce_avro(kafka, client, customers_topic, CUSTOMER_KEY, CUSTOMER, customers)
    spec = f"""\
  shufflePartitions: 2
  sources:
    - {{name: orders, topic: {orders_topic}, format: avro, keyFormat: avro,
       eventTime: {{column: ts, watermark: 1 minute}}}}
    - {{name: customers, topic: {customers_topic}, format: avro, keyFormat: avro,
       eventTime: {{column: since, watermark: 1 minute}}}}
  sql: SELECT o.order_id, o.customer_id, c.id, c.name FROM orders o JOIN customers c ON o.customer_id = c.id
  sink: {{topic: {out}, key: [order_id], keyFormat: json}}
"""
    _run(spark, _plan(spec, *readers), kafka, tmp_path / "c", _settings(schema_registry))
    raw = consume(kafka, out, expect=20)
    rows = sorted((json.loads(v) for _, v, _ in raw), key=lambda r: r["order_id"])
    expected = [{"order_id": f"o{i}", "customer_id": 100 + i % 3, "id": 100 + i % 3, "name": f"n{i % 3}"}
                for i in range(30) if i % 3 != 2]
    assert rows == sorted(expected, key=lambda r: r["order_id"])
    compact = (",", ":")
    assert sorted(k for k, _, _ in raw) == sorted(
        json.dumps({"order_id": r["order_id"]}, separators=compact).encode() for r in expected)


def test_primitive_avro_keys_read_with_the_pinned_schema_across_writer_versions(
    spark: Any, kafka: str, schema_registry: SchemaRegistry, tmp_path: Path,
) -> None:
    """Confluent's serializer writes an ``Integer`` or ``Long`` key with a primitive schema. The key
    subject has ``"int"`` then ``"long"``: keys written with either are read as the one declared
    key column with the pinned reader (``"long"``, Avro's promotion of an int); a key not in the wire
    format is dead-lettered with its reason; a null key gives a null column."""
    client = schema_registry.client()
    src, out, dlq = unique("devices"), unique("out"), unique("dlq")
    create_topic(kafka, src)
    ctx = SerializationContext(src, MessageField.KEY)
    # each producer writes with the subject's latest version at the time, and its id
    registered = {"auto.register.schemas": False, "use.latest.version": True}

    def written(schema: str, keys: list[int], first: int) -> list[tuple[bytes | None, bytes]]:
        # a client of its own: a client caches the latest version it has seen
        serializer = AvroSerializer(schema_registry.client(), schema, conf=registered)
        return [(serializer(k, ctx), json.dumps({"v": float(first + i)}).encode())
                for i, k in enumerate(keys)]

    register_avro(client, f"{src}-key", '"int"')
    records = written('"int"', [1, -7], 0)  # producers on the first version, then on the second
    reader = register_avro(client, f"{src}-key", '"long"')
    records += written('"long"', [2**40, 1], 2)
    writer_ids = {struct.unpack(">bI", k[:5])[1] for k, _ in records}
    assert len(writer_ids) == 2 and reader.id in writer_ids  # two writer schemas, the newer pinned
    _produce(kafka, src, [*records, (b"not-avro", b'{"v": 9.0}'), (None, b'{"v": 10.0}')])
    spec = f"""\
  shufflePartitions: 2
  sources:
    - name: readings
      topic: {src}
      keyFormat: avro
      keySchema: [{{name: device, type: bigint}}]
      schema: [{{name: v, type: double}}]
      malformed: {{policy: deadLetter, topic: {dlq}}}
  sql: SELECT device, v FROM readings
  sink: {{topic: {out}, key: [device], keyFormat: "kafka:long"}}
"""
    plan = _plan(spec, reader)
    step = plan.steps[0]
    assert step.key_schema == reader and [(c.name, c.type) for c in step.key_columns or []] == [
        ("device", "bigint")]
    _run(spark, plan, kafka, tmp_path / "c", _settings(schema_registry))
    got = sorted(((r.get("device"), r["v"]) for r in consume_json(kafka, out, expect=5)), key=_order)
    assert got == sorted([(1, 0.0), (-7, 1.0), (2**40, 2.0), (1, 3.0), (None, 10.0)], key=_order)
    dead = consume(kafka, dlq, expect=1)
    assert [key for key, _, _ in dead] == [b"not-avro"]
    assert dict(dead[0][2])["sluice.error"].decode() == (
        "record key is not in the Confluent wire format (magic byte 0, a 4-byte schema id, Avro binary)")


def test_a_key_prefix_reads_a_key_field_beside_the_value_field_of_the_same_name(
    spark: Any, kafka: str, tmp_path: Path,
) -> None:
    """A Debezium-style topic: the key holds the row's primary key, which the value holds too (and a
    tombstone-like record whose value's id differs shows which column is which)."""
    src, out = unique("rows"), unique("out")
    create_topic(kafka, src)
    _produce(kafka, src, [(json.dumps({"id": i}).encode(),
                           json.dumps({"id": i * 10, "name": f"n{i}"}).encode()) for i in range(3)])
    spec = f"""\
  sources:
    - name: rows
      topic: {src}
      keyFormat: json
      keyPrefix: key_
      keySchema: [{{name: id, type: bigint}}]
      schema: [{{name: id, type: bigint}}, {{name: name, type: string}}]
  sql: SELECT key_id, id, name FROM rows
  sink: {{topic: {out}, key: [key_id], keyFormat: "kafka:long"}}
"""
    _run(spark, _plan(spec), kafka, tmp_path / "c", None)
    rows = sorted(consume_json(kafka, out, expect=3), key=lambda r: r["key_id"])
    assert rows == [{"key_id": i, "id": i * 10, "name": f"n{i}"} for i in range(3)]
    assert sorted(struct.unpack(">q", k)[0] for k, _, _ in consume(kafka, out, expect=3)) == [0, 1, 2]


DEVICE_KEY = """\
syntax = "proto3";
package iot;
message DeviceKey { string site = 1; int64 device = 2; }
"""


def test_protobuf_keys_read_and_written(spark: Any, kafka: str, schema_registry: SchemaRegistry,
                                        tmp_path: Path) -> None:
    """Keys written by confluent-kafka's ``ProtobufSerializer`` (``MessageField.KEY``, registering the key
    schema under ``<topic>-key``), pinned by the operator's registry client: the key message's fields are
    columns; a key not in the wire format is dead-lettered with its reason, a null key gives nulls. The
    sink writes its key columns as a Protobuf message (the schema registered as the operator registers
    it), read back by ``ProtobufDeserializer``."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import message_factory
    from sluice.core.formats import protobuf as core
    from sluice.operator.protoc import compile_proto
    from sluice.operator.registry import RegistryClient

    src, out, dlq = unique("readings"), unique("out"), unique("dlq")
    create_topic(kafka, src)
    cls = message_factory.GetMessageClass(core.message(compile_proto(DEVICE_KEY, "test"), "iot.DeviceKey"))
    serialize = ProtobufSerializer(cls, schema_registry.client(), {"use.deprecated.format": False})
    ctx = SerializationContext(src, MessageField.KEY)
    keys = [("berlin", 1), ("berlin", 2), ("", 0)]  # the last: every field at its default (no bytes)
    records = [(serialize(cls(site=site, device=device), ctx), json.dumps({"v": float(i)}).encode())
               for i, (site, device) in enumerate(keys)]
    _produce(kafka, src, [*records, (b"not-protobuf", b'{"v": 9.0}'), (None, b'{"v": 10.0}')])
    reader = RegistryClient(schema_registry.url).latest(f"{src}-key")  # as the operator pins it
    assert reader.schema_type == "PROTOBUF"
    spec = f"""\
  sources:
    - name: readings
      topic: {src}
      keyFormat: protobuf
      schema: [{{name: v, type: double}}]
      malformed: {{policy: deadLetter, topic: {dlq}}}
  sql: SELECT site, device, v FROM readings
  sink: {{topic: {out}, key: [site, device], keyFormat: protobuf}}
"""
    plan = _plan(spec, reader)
    step = plan.steps[0]
    assert [(c.name, c.type) for c in step.key_columns or []] == [("site", "string"), ("device", "bigint")]
    key_schema = plan.sink.key_schema
    assert key_schema is not None and key_schema.subject == f"{out}-key" and key_schema.message is not None
    key_id = RegistryClient(schema_registry.url).register(key_schema.subject, key_schema.schema_,
                                                          key_schema.schema_type)  # as the operator does
    _run(spark, plan, kafka, tmp_path / "c", _settings(schema_registry, key_id=key_id))
    got = sorted(((r.get("site"), r.get("device"), r["v"]) for r in consume_json(kafka, out, expect=4)),
                 key=lambda r: r[2])
    assert got == [("berlin", 1, 0.0), ("berlin", 2, 1.0), ("", 0, 2.0), (None, None, 10.0)]
    written = message_factory.GetMessageClass(core.message(key_schema.descriptor or "", key_schema.message))
    deserialize = ProtobufDeserializer(written, {"use.deprecated.format": False})
    out_ctx = SerializationContext(out, MessageField.KEY)
    raw = consume(kafka, out, expect=4)
    assert {struct.unpack(">bI", k[:5]) for k, _, _ in raw} == {(0, key_id)}
    keys_out = sorted((json.loads(v)["v"], deserialize(k, out_ctx)) for k, v, _ in raw)
    # a null key column is a field not set (proto3 optional): the row with a null key has neither
    assert [(v, m.site if m.HasField("site") else None, m.device if m.HasField("device") else None)
            for v, m in keys_out] == [(0.0, "berlin", 1), (1.0, "berlin", 2), (2.0, "", 0),
                                      (10.0, None, None)]
    dead = consume(kafka, dlq, expect=1)
    assert [key for key, _, _ in dead] == [b"not-protobuf"]
    assert dict(dead[0][2])["sluice.error"].decode() == (
        "record key is not in the Confluent wire format (magic byte 0, a 4-byte schema id, message indexes, "
        "Protobuf binary)")


def _float32(value: float) -> float:
    """``value`` as a Java float (a JSON float is written in its shortest text, read back as a double)."""
    return float(struct.unpack(">f", struct.pack(">f", value))[0])


UUIDS = ["00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
         "123e4567-e89b-12d3-a456-426614174000", "7f9c24e8-3b12-4fef-91e0-56a1d7b7c0de"]

PRIMITIVES: dict[str, tuple[str, Any, Any, list[Any]]] = {
    # format: (Spark type, serialize, deserialize, keys); Kafka's LongSerializer writes struct ">q"
    "kafka:long": ("bigint", lambda v: struct.pack(">q", v), lambda b: struct.unpack(">q", b)[0],
                   [-(2**63), -1, 0, 2**40 + 7, 2**63 - 1]),
    "kafka:int": ("int", lambda v: IntegerSerializer()(v), lambda b: IntegerDeserializer()(b),
                  [-(2**31), -1, 0, 7, 2**31 - 1]),
    "kafka:double": ("double", lambda v: DoubleSerializer()(v), lambda b: DoubleDeserializer()(b),
                     [-2.5, 0.0, 1e300, 3.25, -1.5e-300]),
    # confluent-kafka has no ShortSerializer, FloatSerializer, ByteArraySerializer or UUIDSerializer: their
    # bytes are written here as Kafka's Java serializers write them. ShortSerializer: 2 bytes big-endian
    # two's complement (struct ">h").
    "kafka:short": ("smallint", lambda v: struct.pack(">h", v), lambda b: struct.unpack(">h", b)[0],
                    [-(2**15), -1, 0, 7, 2**15 - 1]),
    # FloatSerializer: Float.floatToRawIntBits, 4 bytes big-endian (struct ">f" is the IEEE 754 binary32
    # bits); the largest float, the smallest subnormal.
    "kafka:float": ("float", lambda v: struct.pack(">f", v), lambda b: struct.unpack(">f", b)[0],
                    [-2.5, 0.0, _float32(3.4028234663852886e38), 3.25, _float32(2**-149)]),
    # ByteArraySerializer / BytesSerializer: the bytes as they are.
    "kafka:bytes": ("binary", bytes, bytes, [b"\x00", b"\xff\xfe", b"abc", bytes(range(256))]),
    # UUIDSerializer: UUID.toString() (lower case, 8-4-4-4-12) in UTF-8, as Python's str(uuid.UUID).
    "kafka:uuid": ("string", lambda v: str(uuid.UUID(v)).encode("utf-8"),
                   lambda b: str(uuid.UUID(b.decode("utf-8"))), UUIDS),
}
#: keys that are not of the format, and the reason they are dead-lettered with (kafka:bytes: any key is)
BAD_KEYS: dict[str, tuple[list[bytes], str]] = {
    **{fmt: ([b"abc"], f"record key is not a {fmt} key ({width} bytes, big-endian, as Kafka's serializer "
                       "writes it)")
       for fmt, width in (("kafka:long", 8), ("kafka:int", 4), ("kafka:double", 8), ("kafka:short", 2),
                          ("kafka:float", 4))},
    # a letter that is no hex digit; a UUID's text with a line break after it (Java's "$" matches before it)
    "kafka:uuid": ([b"123e4567-e89b-12d3-a456-42661417400g", UUIDS[2].encode("utf-8") + b"\n"],
                   "record key is not a kafka:uuid key (a UUID's text, 8-4-4-4-12 hex digits, in UTF-8, as "
                   "Kafka's serializer writes it)"),
}


def _json_key(fmt: str, value: Any) -> Any:
    """A key column as the sink's JSON value has it, as the test's keys are (binary: base64)."""
    if value is None:
        return None
    if fmt == "kafka:bytes":
        return base64.b64decode(value)
    return _float32(value) if fmt == "kafka:float" else value


@pytest.mark.parametrize("fmt", sorted(PRIMITIVES))
def test_kafka_primitive_keys_read_and_written(spark: Any, kafka: str, fmt: str, tmp_path: Path) -> None:
    typ, serialize, deserialize, keys = PRIMITIVES[fmt]
    src, out, dlq = unique("readings"), unique("out"), unique("dlq")
    create_topic(kafka, src)
    records = [(serialize(k), json.dumps({"v": float(i)}).encode()) for i, k in enumerate(keys)]
    bad = BAD_KEYS.get(fmt)
    extra = [(k, b'{"v": 9.0}') for k in bad[0]] if bad is not None else []
    _produce(kafka, src, [*records, *extra, (None, b'{"v": 10.0}')])
    spec = f"""\
  shufflePartitions: 2
  sources:
    - name: readings
      topic: {src}
      keyFormat: "{fmt}"
      keySchema: [{{name: device, type: {typ}}}]
      schema: [{{name: v, type: double}}]
      malformed: {{policy: deadLetter, topic: {dlq}}}
  sql: SELECT device, v FROM readings
  sink: {{topic: {out}, key: [device], keyFormat: "{fmt}"}}
"""
    plan = _plan(spec)
    _run(spark, plan, kafka, tmp_path / "c", None)
    raw = consume(kafka, out, expect=len(keys) + 1)
    expected = sorted([*((k, float(i)) for i, k in enumerate(keys)), (None, 10.0)], key=_order)
    got = [((deserialize(k) if k is not None else None), json.loads(v)["v"]) for k, v, _ in raw]
    assert sorted(got, key=_order) == expected
    written = consume_json(kafka, out, expect=len(keys) + 1)
    values = [(_json_key(fmt, r.get("device")), r["v"]) for r in written]
    assert sorted(values, key=_order) == expected
    if bad is None:
        return
    dead = consume(kafka, dlq, expect=len(bad[0]))
    assert sorted(key for key, _, _ in dead) == sorted(bad[0])
    assert {dict(headers)["sluice.error"].decode() for _, _, headers in dead} == {bad[1]}


def test_uuid_keys_read_in_upper_case_and_a_sink_value_that_is_no_uuid(spark: Any, kafka: str,
                                                                      tmp_path: Path) -> None:
    src, out = unique("readings"), unique("out")
    create_topic(kafka, src)
    upper = UUIDS[2].upper().encode("utf-8")  # UUID.fromString reads it: the same UUID
    _produce(kafka, src, [(upper, b'{"v": 1.0, "s": "not-a-uuid"}')])
    spec = f"""\
  shufflePartitions: 2
  sources:
    - name: readings
      topic: {src}
      keyFormat: "kafka:uuid"
      keySchema: [{{name: device, type: string}}]
      schema: [{{name: v, type: double}}, {{name: s, type: string}}]
  sql: SELECT device, v FROM readings
  sink: {{topic: {out}, key: [device], keyFormat: "kafka:uuid"}}
"""
    _run(spark, _plan(spec), kafka, tmp_path / "c", None)
    [(key, value, _)] = consume(kafka, out, expect=1)
    assert key == UUIDS[2].encode("utf-8") and json.loads(value) == {"device": UUIDS[2], "v": 1.0}

    from sluice_runtime.pipeline import build_pipeline

    failing = spec.replace("SELECT device, v FROM readings", "SELECT s AS device, v FROM readings").replace(
        f"topic: {out}", f"topic: {unique('out')}")
    pipe = build_pipeline(spark, _plan(failing), checkpoint=str(tmp_path / "f"), bootstrap=kafka,
                          query_id=unique("q"), available_now=True, avro=None)
    with pytest.raises(Exception, match="is not a UUID's text \\(kafka:uuid\\): not-a-uuid"):
        pipe.main.awaitTermination(300)
    for q in pipe.all_queries():
        q.stop()


def _order(pair: tuple[Any, float]) -> tuple[float, float]:
    return (pair[1], 0.0)
