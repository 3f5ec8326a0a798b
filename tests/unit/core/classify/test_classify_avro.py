"""Avro in the classifier: a source's pinned reader schema moving to a later subject version is a
data-selection change in place (its column changes reported as for any source); an avro sink's schema
follows the output schema, judged on its own, and a new subject is data-selection; a format change
keeps the conservative topology rule."""

from __future__ import annotations

import json
from typing import Any

from sluice.core.classify import classify
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.spec import QuerySpec

V1 = {"type": "record", "name": "Order", "fields": [{"name": "customer", "type": "string"},
                                                    {"name": "amount", "type": "double"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}
SQL = "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer"


def plan(schema: dict[str, Any] = V1, version: int = 1, sql: str = SQL, **sink: Any) -> Plan:
    spec = QuerySpec.model_validate({
        "sources": [{"name": "orders", "topic": "orders", "format": "avro"}], "sql": sql,
        "sink": {"topic": "out", "format": "avro", "key": ["customer"], "outputMode": "update", **sink}})
    pinned = RegistrySchema(subject="orders-value", schema_=json.dumps(schema), id=version + 10,
                            version=version)
    return compile_query(spec, CompileTarget(schemas={"orders-value": pinned}))


def test_a_later_reader_schema_is_data_selection_in_place() -> None:
    decision = classify(plan(), plan(V2, 2))
    assert (decision.category, decision.decision) == ("data-selection", "in-place")
    fields = {c.field for c in decision.changes}
    assert {"valueSchema", "columns.coupon"} <= fields
    [reader] = [c for c in decision.changes if c.field == "valueSchema"]
    assert "'orders-value' version 1 (id 11)" in reader.message and "version 2 (id 12)" in reader.message


def test_an_avro_sink_schema_follows_the_output_schema() -> None:
    rows = "SELECT customer, amount FROM orders"
    widened = "SELECT customer, amount, amount * 2 AS twice FROM orders"
    decision = classify(plan(sql=rows, outputMode="append"), plan(sql=widened, outputMode="append"))
    assert not any(c.field.startswith("valueSchema") for c in decision.changes)
    assert (decision.category, decision.decision) == ("schema-evolution", "in-place")


def test_a_new_sink_subject_is_data_selection() -> None:
    decision = classify(plan(), plan(subject="totals"))
    assert (decision.category, decision.decision) == ("data-selection", "in-place")
    assert [c.field for c in decision.changes] == ["valueSchema.subject"]


def test_a_source_format_change_stays_a_topology_change() -> None:
    json_plan = compile_query(QuerySpec.model_validate({
        "sources": [{"name": "orders", "topic": "orders", "schema": [
            {"name": "customer", "type": "string"}, {"name": "amount", "type": "double"}]}],
        "sql": SQL, "sink": {"topic": "out", "format": "avro", "key": ["customer"], "outputMode": "update"}}))
    decision = classify(json_plan, plan())
    assert decision.category == "topology"
    assert "format" in {c.field for c in decision.changes}


PROTO_V1 = ('syntax = "proto3";\npackage shop;\n'
            "message Order { string customer = 1; double amount = 2; }\n")
PROTO_V2 = PROTO_V1.replace("double amount = 2;", "double amount = 2; string coupon = 3;")


def proto_plan(text: str, version: int, sql: str = SQL) -> Plan:
    from sluice.operator.protoc import compile_proto

    spec = QuerySpec.model_validate({
        "sources": [{"name": "orders", "topic": "orders", "format": "protobuf"}], "sql": sql,
        "sink": {"topic": "out", "format": "protobuf", "key": ["customer"], "outputMode": "update"}})
    pinned = RegistrySchema(subject="orders-value", schema_type="PROTOBUF", schema_=text,
                            descriptor=compile_proto(text, "orders-value"), id=version + 10, version=version)
    return compile_query(spec, CompileTarget(schemas={"orders-value": pinned}))


def test_protobuf_a_later_reader_schema_is_data_selection_in_place_and_the_sink_follows_the_output() -> None:
    decision = classify(proto_plan(PROTO_V1, 1), proto_plan(PROTO_V2, 2))
    assert (decision.category, decision.decision) == ("data-selection", "in-place")
    [reader] = [c for c in decision.changes if c.field == "valueSchema"]
    assert "read with the new descriptor" in reader.message and "version 2 (id 12)" in reader.message
    rows = "SELECT customer, amount FROM orders"
    widened = "SELECT customer, amount, amount * 2 AS twice FROM orders"
    decision = classify(proto_plan(PROTO_V1, 1, rows), proto_plan(PROTO_V1, 1, widened))
    assert not any(c.field.startswith("valueSchema") for c in decision.changes)
