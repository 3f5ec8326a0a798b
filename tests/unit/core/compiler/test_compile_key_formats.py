"""keyFormat in the compiler: a source's key columns beside its value columns (string, json, avro,
kafka:<type>), a sink's key written in a format, the errors naming their fields, and plans without a
key format unchanged (no new field in their JSON, the same hash)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.errors import CompileError
from sluice.core.plan.model import KafkaSourceV1, Plan, RegistrySchema
from sluice.core.spec import QuerySpec

KEY = {"type": "record", "name": "OrderKey", "fields": [{"name": "customer_id", "type": "long"},
                                                        {"name": "region", "type": ["null", "string"]}]}
KEY_SCHEMA = RegistrySchema(subject="orders-key", schema_=json.dumps(KEY), id=5, version=2)


def spec(source: dict[str, Any] | None = None, sql: str = "SELECT * FROM orders",
         **sink: Any) -> QuerySpec:
    src = {"name": "orders", "topic": "orders", "schema": [{"name": "amount", "type": "double"}],
           **(source or {})}
    return QuerySpec.model_validate({"sources": [src], "sql": sql, "sink": {"topic": "out", **sink}})


def compile_(query: QuerySpec, **schemas: RegistrySchema) -> Plan:
    return compile_query(query, CompileTarget(schemas={"orders-key": KEY_SCHEMA, **schemas}))


def source(plan: Plan) -> KafkaSourceV1:
    step = plan.steps[0]
    assert isinstance(step, KafkaSourceV1)
    return step


def problems(query: QuerySpec) -> list[tuple[str | None, str]]:
    with pytest.raises(CompileError) as caught:
        compile_(query)
    return [(p.field, p.message) for p in caught.value.problems]


def test_a_plan_without_key_format_is_unchanged() -> None:
    plain = compile_query(spec())
    explicit = compile_query(spec({"keyFormat": "string"}, keyFormat="string"))
    assert explicit.hash == plain.hash
    text = plain.canonical_json()
    assert "keyFormat" not in text and "keyColumns" not in text and "keySchema" not in text


def test_an_avro_key_gives_its_fields_as_columns_before_the_value() -> None:
    plan = compile_(spec({"keyFormat": "avro"}))
    step = source(plan)
    assert [(f.name, f.type) for f in step.schema_] == [
        ("customer_id", "bigint"), ("region", "string"), ("amount", "double")]
    assert [c.name for c in step.columns] == ["amount"]
    assert step.key_format == "avro" and step.key_schema == KEY_SCHEMA
    assert [c.name for c in plan.output_schema] == ["customer_id", "region", "amount"]


def test_an_avro_key_subject_override_and_a_declared_subset() -> None:
    other = KEY_SCHEMA.model_copy(update={"subject": "shop.OrderKey"})
    query = spec({"keyFormat": "avro", "keySubject": "shop.OrderKey",
                  "keySchema": [{"name": "customer_id", "type": "bigint"}]})
    step = source(compile_query(query, CompileTarget(schemas={"shop.OrderKey": other})))
    assert [c.name for c in step.key_columns or []] == ["customer_id"]
    assert step.key_schema is not None and step.key_schema.subject == "shop.OrderKey"


def test_an_avro_key_subject_is_pinned_like_a_value_subject() -> None:
    from sluice.core.compiler import source_subjects
    from sluice.core.compiler.registry import plan_source_schemas

    query = spec({"keyFormat": "avro"})
    assert source_subjects(query) == ["orders-key"]
    assert plan_source_schemas(compile_(query)) == {"orders-key": KEY_SCHEMA}


def test_a_key_column_of_another_type_than_the_avro_field() -> None:
    found = problems(spec({"keyFormat": "avro", "keySchema": [{"name": "customer_id", "type": "string"}]}))
    assert found[0][0] == "spec.sources[0].keySchema[0].type"
    assert "'customer_id' is declared as string" in found[0][1] and "subject 'orders-key'" in found[0][1]


def test_a_missing_avro_key_schema_names_the_key_format() -> None:
    with pytest.raises(CompileError) as caught:
        compile_query(spec({"keyFormat": "avro"}))
    assert caught.value.problems[0].field == "spec.sources[0].keyFormat"


def primitive_key(text: str) -> RegistrySchema:
    return KEY_SCHEMA.model_copy(update={"schema_": text})


@pytest.mark.parametrize(("schema", "typ"), [
    ('"long"', "bigint"), ('"string"', "string"), ('"int"', "int"), ('"bytes"', "binary"),
    ('{"type": "long", "logicalType": "timestamp-millis"}', "timestamp"),
    ('{"type": "enum", "name": "Region", "symbols": ["EU", "US"]}', "string"),
])
def test_a_primitive_avro_key_is_the_one_key_column_declared(schema: str, typ: str) -> None:
    """Confluent's serializer writes a primitive key (a ``String`` or ``Long``) with a schema such as
    ``"long"``: one value, read as the source's one declared key column."""
    query = spec({"keyFormat": "avro", "keySchema": [{"name": "customer_id", "type": typ}]})
    step = source(compile_query(query, CompileTarget(schemas={"orders-key": primitive_key(schema)})))
    assert [(c.name, c.type) for c in step.key_columns or []] == [("customer_id", typ)]
    assert step.key_schema == primitive_key(schema)
    assert [(f.name, f.type) for f in step.schema_] == [("customer_id", typ), ("amount", "double")]


def test_a_primitive_avro_key_needs_its_column_declared() -> None:
    with pytest.raises(CompileError) as caught:
        compile_query(spec({"keyFormat": "avro"}),
                      CompileTarget(schemas={"orders-key": primitive_key('"long"')}))
    assert [(p.field, p.message) for p in caught.value.problems] == [(
        "spec.sources[0].keySchema",
        "source 'orders': the key schema of subject 'orders-key' (version 2, id 5) is not a record but one "
        "bigint value: declare its column in keySchema (one column of type bigint, the name yours)")]


def test_a_primitive_avro_key_column_of_another_type() -> None:
    query = spec({"keyFormat": "avro", "keySchema": [{"name": "customer_id", "type": "int"}]})
    with pytest.raises(CompileError) as caught:
        compile_query(query, CompileTarget(schemas={"orders-key": primitive_key('"long"')}))
    assert [p.field for p in caught.value.problems] == ["spec.sources[0].keySchema[0].type"]
    assert "declared as int, but the key schema of subject 'orders-key'" in caught.value.problems[0].message


def test_a_primitive_avro_key_that_can_be_null_is_refused() -> None:
    query = spec({"keyFormat": "avro", "keySchema": [{"name": "customer_id", "type": "bigint"}]})
    with pytest.raises(CompileError) as caught:
        compile_query(query, CompileTarget(schemas={"orders-key": primitive_key('["null", "long"]')}))
    assert caught.value.problems[0].field == "spec.sources[0].keyFormat"
    assert "a union with null" in caught.value.problems[0].message


def test_an_avro_key_schema_without_a_spark_type_names_the_key_format() -> None:
    with pytest.raises(CompileError) as caught:
        compile_query(spec({"keyFormat": "avro", "keySchema": [{"name": "k", "type": "string"}]}),
                      CompileTarget(schemas={"orders-key": primitive_key('"null"')}))
    assert caught.value.problems[0].field == "spec.sources[0].keyFormat"
    assert "has no Spark type" in caught.value.problems[0].message


@pytest.mark.parametrize(("fmt", "typ"), [("kafka:long", "bigint"), ("kafka:int", "int"),
                                          ("kafka:short", "smallint"), ("kafka:double", "double"),
                                          ("kafka:float", "float"), ("kafka:bytes", "binary"),
                                          ("kafka:uuid", "string"), ("kafka:string", "string"),
                                          ("string", "string"), ("json", "string")])
def test_key_columns_of_each_format(fmt: str, typ: str) -> None:
    step = source(compile_(spec({"keyFormat": fmt, "keySchema": [{"name": "k", "type": typ}]})))
    assert step.key_format == fmt
    assert [(f.name, f.type) for f in step.schema_] == [("k", typ), ("amount", "double")]


def test_a_primitive_key_of_another_type() -> None:
    found = problems(spec({"keyFormat": "kafka:long", "keySchema": [{"name": "k", "type": "int"}]}))
    assert found == [("spec.sources[0].keySchema[0].type",
                      "source 'orders': a kafka:long key is a bigint column, but key column 'k' is declared "
                      "as int")]


@pytest.mark.parametrize(("fmt", "declared", "wanted"), [
    ("kafka:short", "int", "smallint"), ("kafka:float", "double", "float"),
    ("kafka:bytes", "string", "binary"), ("kafka:uuid", "binary", "string")])
def test_a_new_primitive_key_of_another_type(fmt: str, declared: str, wanted: str) -> None:
    found = problems(spec({"keyFormat": fmt, "keySchema": [{"name": "k", "type": declared}]}))
    assert found == [("spec.sources[0].keySchema[0].type",
                      f"source 'orders': a {fmt} key is a {wanted} column, but key column 'k' is declared "
                      f"as {declared}")]


def test_a_key_column_named_as_a_value_column() -> None:
    found = problems(spec({"keyFormat": "json", "keySchema": [{"name": "AMOUNT", "type": "double"}]}))
    assert found[0][0] == "spec.sources[0].keySchema[0].name"
    assert "has the name of a value column" in found[0][1]


def test_an_avro_key_field_named_as_a_value_column() -> None:
    query = spec({"keyFormat": "avro", "schema": [{"name": "region", "type": "string"}]})
    found = problems(query)
    assert found[0][0] == "spec.sources[0].keySchema[1].name"


def test_the_key_columns_in_sql_group_by_and_join() -> None:
    query = QuerySpec.model_validate({
        "sources": [{"name": "orders", "topic": "orders", "schema": [{"name": "amount", "type": "double"}],
                     "keyFormat": "avro"},
                    {"name": "customers", "topic": "customers", "keyFormat": "kafka:long",
                     "keySchema": [{"name": "id", "type": "bigint"}],
                     "schema": [{"name": "name", "type": "string"}]}],
        "sql": "SELECT o.customer_id, c.name, o.amount FROM orders o "
               "JOIN customers c ON o.customer_id = c.id",
        "sink": {"topic": "out", "key": ["customer_id"], "keyFormat": "kafka:long"}})
    plan = compile_(query)
    assert plan.sink.key_format == "kafka:long" and plan.sink.key == ["customer_id"]
    grouped = compile_(spec({"keyFormat": "avro"},
                            "SELECT region, sum(amount) AS total FROM orders GROUP BY region",
                            key=["region"], keyFormat="avro", outputMode="update"))
    assert grouped.sink.key_schema is not None and grouped.sink.key_schema.subject == "out-key"
    written = json.loads(grouped.sink.key_schema.schema_)
    assert written["name"] == "out_key" and [f["name"] for f in written["fields"]] == ["region"]


def test_sink_key_formats() -> None:
    for fmt in ("json", "kafka:string"):
        assert compile_(spec(key=["amount"], keyFormat=fmt)).sink.key_format == fmt
    named = compile_(spec(key=["amount"], keyFormat="avro", keySubject="k"))
    assert named.sink.key_schema is not None and named.sink.key_schema.subject == "k"


@pytest.mark.parametrize(("fmt", "sql"), [
    ("kafka:short", "SELECT CAST(amount AS smallint) AS k, amount FROM orders"),
    ("kafka:short", "SELECT CAST(amount AS tinyint) AS k, amount FROM orders"),
    ("kafka:float", "SELECT CAST(amount AS float) AS k, amount FROM orders"),
    ("kafka:bytes", "SELECT CAST(CAST(amount AS string) AS binary) AS k, amount FROM orders"),
    ("kafka:uuid", "SELECT uuid() AS k, amount FROM orders"),
])
def test_sink_new_primitive_key_formats(fmt: str, sql: str) -> None:
    plan = compile_(spec(sql=sql, key=["k"], keyFormat=fmt))
    assert plan.sink.key_format == fmt and plan.sink.key == ["k"]


@pytest.mark.parametrize(("fmt", "sql", "allowed", "found"), [
    ("kafka:short", "SELECT CAST(amount AS int) AS k FROM orders", "smallint or tinyint", "int"),
    ("kafka:float", "SELECT amount AS k FROM orders", "float", "double"),
    ("kafka:bytes", "SELECT CAST(amount AS string) AS k FROM orders", "binary", "string"),
    ("kafka:uuid", "SELECT CAST(amount AS bigint) AS k FROM orders", "string", "bigint"),
])
def test_a_sink_new_primitive_key_of_a_type_it_cannot_write(fmt: str, sql: str, allowed: str,
                                                            found: str) -> None:
    with pytest.raises(CompileError) as caught:
        compile_(spec(sql=sql, key=["k"], keyFormat=fmt))
    assert [(p.field, p.message) for p in caught.value.problems] == [(
        "spec.sink.keyFormat", f"a {fmt} key is written from a column of type {allowed}, but the key column "
        f"'k' is {found} (cast it)")]


def test_a_sink_primitive_key_of_a_type_it_cannot_write() -> None:
    with pytest.raises(CompileError) as caught:
        compile_(spec(key=["amount"], keyFormat="kafka:long"))
    assert [(p.field, p.message) for p in caught.value.problems] == [(
        "spec.sink.keyFormat", "a kafka:long key is written from a column of type bigint or int or smallint "
        "or tinyint, but the key column 'amount' is double (cast it)")]


@pytest.mark.parametrize(("source_or_sink", "fields", "words"), [
    ("source", {"keyMessage": "shop.Key"}, "keyMessage: only a protobuf key"),
    ("source", {"keyFormat": "xml"}, "keyFormat"),
    ("source", {"keyFormat": "json"}, "keySchema: a json key needs its columns"),
    ("source", {"keySubject": "k"}, "keySubject: only an avro or protobuf key"),
    ("source", {"keyFormat": "kafka:long"}, "keySchema: a kafka:long key is one column"),
    ("source", {"keyFormat": "kafka:uuid"}, "keySchema: a kafka:uuid key is one column (of type string)"),
    ("source", {"keyFormat": "kafka:bytes", "keySchema": [{"name": "a", "type": "binary"},
                                                          {"name": "b", "type": "binary"}]},
     "keySchema: a kafka:bytes key is one column (of type binary)"),
    ("sink", {"keyFormat": "protobuf"}, "keyFormat: protobuf needs the key columns (key)"),
    ("sink", {"keyFormat": "json", "key": ["a"], "keySubject": "k"},
     "keySubject: only an avro or protobuf key"),
    ("sink", {"keyFormat": "avro"}, "keyFormat: avro needs the key columns (key)"),
    ("sink", {"keyFormat": "kafka:int", "key": ["a", "b"]}, "keyFormat: a kafka:int key is one column"),
    ("sink", {"keyFormat": "kafka:float", "key": ["a", "b"]}, "keyFormat: a kafka:float key is one column"),
    ("sink", {"keyFormat": "kafka:short"}, "keyFormat: kafka:short needs the key columns (key)"),
])
def test_bad_key_fields_name_the_field(source_or_sink: str, fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(fields) if source_or_sink == "source" else spec(**fields)
    assert words in str(caught.value)


def test_a_key_prefix_names_the_key_columns_in_sql_beside_value_columns_of_the_same_name() -> None:
    """A key field with the name of a value column (Debezium's keys hold the row's primary key, which
    the value holds too): with ``keyPrefix`` the key's is another column in SQL."""
    values = [{"name": "customer_id", "type": "bigint"}, {"name": "amount", "type": "double"}]
    query = spec({"keyFormat": "avro", "keyPrefix": "key_", "schema": values},
                 "SELECT key_customer_id, customer_id, key_region, amount FROM orders "
                 "WHERE key_region = 'eu'")
    plan = compile_(query)
    step = source(plan)
    assert [(f.name, f.type) for f in step.schema_] == [
        ("key_customer_id", "bigint"), ("key_region", "string"), ("customer_id", "bigint"),
        ("amount", "double")]
    # the plan's key columns are the key's own fields; the prefix is the step's
    assert [c.name for c in step.key_columns or []] == ["customer_id", "region"]
    assert step.key_prefix == "key_"
    assert [c.name for c in plan.output_schema] == ["key_customer_id", "customer_id", "key_region", "amount"]
    # keySchema names the key's own fields, not the prefixed names
    subset = compile_(spec({"keyFormat": "avro", "keyPrefix": "k_",
                            "keySchema": [{"name": "region", "type": "string"}]},
                           "SELECT k_region FROM orders"))
    assert [c.name for c in subset.output_schema] == ["k_region"]


def test_a_prefixed_key_column_that_still_has_a_value_column_s_name() -> None:
    found = problems(spec({"keyFormat": "json", "keyPrefix": "key_", "keySchema": [{"name": "amount",
                                                                                    "type": "double"}],
                           "schema": [{"name": "key_amount", "type": "double"}]}, "SELECT * FROM orders"))
    assert found == [("spec.sources[0].keySchema[0].name",
                      "source 'orders': key column 'amount' ('key_amount' in SQL) has the name of a value "
                      "column; the key's and the value's columns share one namespace in SQL (set keyPrefix, "
                      "e.g. 'key_', to prefix the key's column names, or declare the value's columns "
                      "without it)")]


@pytest.mark.parametrize(("source_fields", "message"), [
    ({"keyPrefix": "key_"}, "keyPrefix: this source does not read its key"),
    ({"keyFormat": "json", "keySchema": [{"name": "k", "type": "string"}], "keyPrefix": "key-"},
     "String should match pattern"),
])
def test_a_key_prefix_is_checked(source_fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(source_fields)


def test_a_plan_without_key_prefix_has_none() -> None:
    plan = compile_(spec({"keyFormat": "avro"}))
    assert source(plan).key_prefix is None and "keyPrefix" not in plan.canonical_json()


KEY_PROTO = """\
syntax = "proto3";
package shop;
message OrderKey { int64 customer_id = 1; string region = 2; }
message Other { string x = 1; }
"""


@pytest.fixture(scope="module")
def key_descriptor() -> RegistrySchema:
    from sluice.operator.protoc import compile_proto

    return RegistrySchema(subject="orders-key", schema_type="PROTOBUF", schema_=KEY_PROTO,
                          descriptor=compile_proto(KEY_PROTO, "orders-key"), id=7, version=1)


def test_a_protobuf_key_gives_its_message_fields_as_columns(key_descriptor: RegistrySchema) -> None:
    step = source(compile_(spec({"keyFormat": "protobuf"}), **{"orders-key": key_descriptor}))
    assert [(f.name, f.type) for f in step.schema_] == [
        ("customer_id", "bigint"), ("region", "string"), ("amount", "double")]
    assert step.key_format == "protobuf" and step.key_schema is not None
    assert step.key_schema.message == "shop.OrderKey"  # the first message, pinned by its name
    other = source(compile_(spec({"keyFormat": "protobuf", "keyMessage": "shop.Other"}),
                            **{"orders-key": key_descriptor}))
    assert [c.name for c in other.key_columns or []] == ["x"]
    assert other.key_schema is not None and other.key_schema.message == "shop.Other"


def test_protobuf_key_problems_name_their_fields(key_descriptor: RegistrySchema) -> None:
    def found(source_fields: dict[str, Any], schema: RegistrySchema) -> list[str | None]:
        with pytest.raises(CompileError) as caught:
            compile_(spec(source_fields), **{"orders-key": schema})
        return [p.field for p in caught.value.problems]

    assert found({"keyFormat": "protobuf", "keyMessage": "shop.Missing"}, key_descriptor) == [
        "spec.sources[0].keyMessage"]
    assert found({"keyFormat": "protobuf"}, KEY_SCHEMA) == ["spec.sources[0].keyFormat"]  # an Avro schema
    assert found({"keyFormat": "avro"}, key_descriptor) == ["spec.sources[0].keyFormat"]
    assert found({"keyFormat": "protobuf", "keySchema": [{"name": "region", "type": "bigint"}]},
                 key_descriptor) == ["spec.sources[0].keySchema[0].type"]


def test_a_protobuf_key_needs_the_cluster_s_schema_registry() -> None:
    from sluice.core.formats.registry import registry_problems

    found = registry_problems(spec({"keyFormat": "protobuf"}), "shared", has_registry=False)
    assert [(p.field, p.message) for p in found] == [(
        "spec.sources[0].keyFormat",
        "source 'orders' has keyFormat protobuf and needs a schema registry: QueryCluster 'shared' has no "
        "spec.schemaRegistry")]


def test_a_sink_protobuf_key_is_a_message_of_the_key_columns() -> None:
    plan = compile_(spec({"keyFormat": "avro"}, "SELECT customer_id, region, amount FROM orders",
                         key=["customer_id", "region"], keyFormat="protobuf"))
    schema = plan.sink.key_schema
    assert plan.sink.key_format == "protobuf" and schema is not None
    assert (schema.subject, schema.schema_type, schema.message) == ("out-key", "PROTOBUF", "sluice.out_key")
    assert "int64 customer_id = 1;" in schema.schema_ and "string region = 2;" in schema.schema_
    from sluice.core.formats import protobuf

    assert [(c.name, c.type) for c in protobuf.message_columns(protobuf.message(
        schema.descriptor or "", schema.message))] == [("customer_id", "bigint"), ("region", "string")]
