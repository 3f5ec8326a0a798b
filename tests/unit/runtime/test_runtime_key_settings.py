"""The driver's settings for avro keys: SLUICE_SINK_KEY_SCHEMA_ID, and what keeps a plan with avro
keys from starting (named before the JVM starts)."""

from __future__ import annotations

import json

import pytest
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.spec import QuerySpec
from sluice_runtime import avro

KEY = RegistrySchema(subject="orders-key", schema_=json.dumps(
    {"type": "record", "name": "K", "fields": [{"name": "customer_id", "type": "long"}]}), id=4, version=1)


def plan() -> Plan:
    query = QuerySpec.model_validate({
        "sources": [{"name": "orders", "topic": "orders", "keyFormat": "avro",
                     "schema": [{"name": "amount", "type": "double"}]}],
        "sql": "SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id",
        "sink": {"topic": "out", "key": ["customer_id"], "keyFormat": "avro", "outputMode": "update"}})
    return compile_query(query, CompileTarget(schemas={"orders-key": KEY}))


def test_the_key_schema_id_from_the_environment() -> None:
    settings = avro.AvroSettings.from_env({avro.SINK_KEY_SCHEMA_ID_ENV: "12"})
    assert settings.sink_key_schema_id == 12 and settings.sink_schema_id is None
    with pytest.raises(avro.AvroConfigError, match="SLUICE_SINK_KEY_SCHEMA_ID must be a schema id"):
        avro.AvroSettings.from_env({avro.SINK_KEY_SCHEMA_ID_ENV: "x"})


def test_a_plan_with_avro_keys_names_what_it_lacks() -> None:
    assert avro.startup_problems(plan(), avro.AvroSettings()) == [
        "SLUICE_SCHEMA_REGISTRY_URL is not set: the avro key of source orders needs the schema registry for "
        "the writer schemas of its records",
        "SLUICE_SINK_KEY_SCHEMA_ID is not set: the avro key of the sink of topic out writes the id the "
        "operator registered its schema under",
    ]
    ready = avro.AvroSettings(registry=avro.Registry("http://r"), sink_key_schema_id=3)
    assert avro.startup_problems(plan(), ready) == []
    assert avro.has_sources(plan())
    assert avro.source_schemas(plan()) == [KEY]
