"""examples/avro.yaml and examples/avro-keys.yaml: their QueryCluster and StreamingQuery validate, and
the query compiles once the registry's schemas of orders-value (and orders-key) are given (as the
operator gives them), with an avro sink schema (and an avro sink key schema)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from sluice.core.compiler import CompileTarget, compile_query, source_subjects
from sluice.core.formats import avro
from sluice.core.plan.model import KafkaSourceV1, RegistrySchema
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec

EXAMPLE = Path(__file__).parents[3] / "examples" / "avro.yaml"
KEYS_EXAMPLE = EXAMPLE.with_name("avro-keys.yaml")
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}


def test_the_avro_example_validates_and_compiles() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(EXAMPLE.read_text())}
    cluster = QueryClusterSpec.model_validate(docs["QueryCluster"]["spec"])
    registry = cluster.schema_registry
    assert registry is not None and registry.basic_auth_secret == "registry-user"
    query = StreamingQuerySpec.model_validate(docs["StreamingQuery"]["spec"]).query()
    pinned = RegistrySchema(subject="orders-value", schema_=json.dumps(ORDER), id=1, version=1)
    plan = compile_query(query, CompileTarget(schemas={"orders-value": pinned}))
    schema = plan.sink.value_schema
    assert schema is not None and schema.subject == "revenue-per-minute-value"
    written = avro.parse(schema.schema_)
    assert isinstance(written, dict)
    assert [f["name"] for f in written["fields"]] == ["minute", "customer", "revenue"]


ORDER_KEY = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [
    {"name": "customer_id", "type": "long"}]}
ORDER_VALUE = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}}]}


def test_the_avro_keys_example_validates_and_groups_by_a_key_field() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(KEYS_EXAMPLE.read_text())}
    cluster = QueryClusterSpec.model_validate(docs["QueryCluster"]["spec"])
    assert cluster.schema_registry is not None
    assert docs["StreamingQuery"]["spec"]["clusterRef"]["name"] == docs["QueryCluster"]["metadata"]["name"]
    query = StreamingQuerySpec.model_validate(docs["StreamingQuery"]["spec"]).query()
    assert source_subjects(query) == ["orders-value", "orders-key"]  # what the operator reads and pins
    pinned = {"orders-value": RegistrySchema(subject="orders-value", schema_=json.dumps(ORDER_VALUE), id=1,
                                             version=1),
              "orders-key": RegistrySchema(subject="orders-key", schema_=json.dumps(ORDER_KEY), id=2,
                                           version=1)}
    plan = compile_query(query, CompileTarget(schemas=pinned))
    source = plan.steps[0]
    assert isinstance(source, KafkaSourceV1) and source.key_schema == pinned["orders-key"]
    assert [c.name for c in plan.output_schema] == ["customer_id", "orders", "revenue"]
    key, value = plan.sink.key_schema, plan.sink.value_schema
    assert key is not None and key.subject == "revenue-per-customer-key"
    assert value is not None and value.subject == "revenue-per-customer-value"
    written = avro.parse(key.schema_)
    assert isinstance(written, dict) and [f["name"] for f in written["fields"]] == ["customer_id"]
    assert written["fields"][0]["type"] == ["null", "long"]
