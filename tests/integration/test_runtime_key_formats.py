"""Record key formats (``keyFormat``) on real PySpark, a real broker and a real schema registry
(Apicurio, Confluent-compatible API): keys and values produced with confluent-kafka's own
``AvroSerializer`` (``MessageField.KEY`` for keys) and Kafka's primitive serializers, the output read
back with ``AvroDeserializer`` and the primitive deserializers. A query grouping by an Avro key field
writing an Avro key and value; a join on the Avro key fields of two sources; ``kafka:long``,
``kafka:int`` and ``kafka:double`` keys read and written, a key of the wrong length dead-lettered with
its reason. Nothing skips."""

from __future__ import annotations

import json
import struct
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


PRIMITIVES: dict[str, tuple[str, Any, Any, list[Any]]] = {
    # format: (Spark type, serialize, deserialize, keys); Kafka's LongSerializer writes struct ">q"
    "kafka:long": ("bigint", lambda v: struct.pack(">q", v), lambda b: struct.unpack(">q", b)[0],
                   [-(2**63), -1, 0, 2**40 + 7, 2**63 - 1]),
    "kafka:int": ("int", lambda v: IntegerSerializer()(v), lambda b: IntegerDeserializer()(b),
                  [-(2**31), -1, 0, 7, 2**31 - 1]),
    "kafka:double": ("double", lambda v: DoubleSerializer()(v), lambda b: DoubleDeserializer()(b),
                     [-2.5, 0.0, 1e300, 3.25, -1.5e-300]),
}


@pytest.mark.parametrize("fmt", sorted(PRIMITIVES))
def test_kafka_primitive_keys_read_and_written(spark: Any, kafka: str, fmt: str, tmp_path: Path) -> None:
    typ, serialize, deserialize, keys = PRIMITIVES[fmt]
    src, out, dlq = unique("readings"), unique("out"), unique("dlq")
    create_topic(kafka, src)
    records = [(serialize(k), json.dumps({"v": float(i)}).encode()) for i, k in enumerate(keys)]
    _produce(kafka, src, [*records, (b"abc", b'{"v": 9.0}'), (None, b'{"v": 10.0}')])
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
    values = [(r.get("device"), r["v"]) for r in consume_json(kafka, out, expect=len(keys) + 1)]
    assert sorted(values, key=_order) == expected
    [(key, _, headers)] = consume(kafka, dlq, expect=1)
    assert key == b"abc"
    width = 4 if fmt == "kafka:int" else 8
    assert dict(headers)["sluice.error"].decode() == (
        f"record key is not a {fmt} key ({width} bytes, big-endian, as Kafka's serializer writes it)")


def _order(pair: tuple[Any, float]) -> tuple[float, float]:
    return (pair[1], 0.0)
