"""Avro sources and sinks in the compiler: the registry's schema (passed in, no I/O) pinned in the plan,
declared columns checked against it, the sink's schema derived from the output; json plans as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError
from sluice.core.compiler import CompileTarget, compile_query, source_subjects
from sluice.core.errors import CompileError
from sluice.core.formats import avro
from sluice.core.plan.model import KafkaSinkV1, KafkaSourceV1, Plan, RegistrySchema
from sluice.core.spec import QuerySpec

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
JSON_SOURCE = {"name": "o", "topic": "o", "schema": [{"name": "a", "type": "int"}]}
PINNED = RegistrySchema(subject="orders-value", schema_=json.dumps(ORDER), id=7, version=3)


def query(*, source: dict[str, Any] | None = None, sql: str = "SELECT id, amount FROM orders",
          sink: dict[str, Any] | None = None) -> QuerySpec:
    src = {"name": "orders", "topic": "orders", "format": "avro", **(source or {})}
    return QuerySpec.model_validate({"sources": [src], "sql": sql, "sink": sink or {"topic": "big"}})


def target(*schemas: RegistrySchema) -> CompileTarget:
    return CompileTarget(schemas={s.subject: s for s in schemas})


def source_step(plan: Plan) -> KafkaSourceV1:
    step = plan.steps[0]
    assert isinstance(step, KafkaSourceV1)
    return step


def test_an_avro_source_without_columns_takes_the_subjects_fields_and_pins_the_schema() -> None:
    plan = compile_query(query(), target(PINNED))
    step = source_step(plan)
    assert step.format == "avro"
    assert [(c.name, c.type) for c in step.columns] == [
        ("id", "bigint"), ("amount", "decimal(10,2)"), ("ts", "timestamp"), ("note", "string")]
    assert step.value_schema == PINNED


def test_the_subject_defaults_to_topic_value_and_can_be_named() -> None:
    assert source_subjects(query()) == ["orders-value"]
    named = query(source={"subject": "shop.Order"})
    assert source_subjects(named) == ["shop.Order"]
    step = source_step(compile_query(named, target(PINNED.model_copy(update={"subject": "shop.Order"}))))
    assert step.value_schema is not None and step.value_schema.subject == "shop.Order"


def test_a_later_subject_version_is_another_plan_and_the_same_version_the_same_plan() -> None:
    first = compile_query(query(), target(PINNED))
    again = compile_query(query(), target(PINNED))
    later = PINNED.model_copy(update={"id": 8, "version": 4})
    assert first.hash == again.hash
    assert compile_query(query(), target(later)).hash != first.hash


def test_declared_columns_may_be_a_subset_of_the_fields_with_their_types() -> None:
    declared = query(source={"schema": [{"name": "ID", "type": "long"}, {"name": "ts", "type": "timestamp"}]},
                     sql="SELECT ID FROM orders")
    step = source_step(compile_query(declared, target(PINNED)))
    assert [(c.name, c.type) for c in step.columns] == [("ID", "bigint"), ("ts", "timestamp")]
    assert step.value_schema == PINNED  # records are read with the whole schema


def test_a_declared_column_that_is_not_a_field_is_refused_naming_source_and_column() -> None:
    wrong = query(source={"schema": [{"name": "customer", "type": "string"}]},
                  sql="SELECT customer FROM orders")
    with pytest.raises(CompileError) as caught:
        compile_query(wrong, target(PINNED))
    problem = caught.value.problems[0]
    assert problem.field == "spec.sources[0].schema[0].name"
    assert "source 'orders': column 'customer' is not a field" in problem.message
    assert "subject 'orders-value' (version 3, id 7)" in problem.message


def test_a_declared_column_of_another_type_is_refused() -> None:
    wrong = query(source={"schema": [{"name": "amount", "type": "double"}]}, sql="SELECT amount FROM orders")
    with pytest.raises(CompileError) as caught:
        compile_query(wrong, target(PINNED))
    problem = caught.value.problems[0]
    assert problem.field == "spec.sources[0].schema[0].type"
    assert "declared as double, but the field 'amount'" in problem.message
    assert "is decimal(10,2)" in problem.message


def test_an_unresolved_subject_is_a_clear_error() -> None:
    with pytest.raises(CompileError) as caught:
        compile_query(query())
    problem = caught.value.problems[0]
    assert problem.field == "spec.sources[0].format"
    assert "subject 'orders-value' was not resolved" in problem.message


def test_a_registry_schema_without_spark_type_names_the_field() -> None:
    bad = {"type": "record", "name": "R", "fields": [{"name": "k", "type": ["int", "string"]}]}
    with pytest.raises(CompileError) as caught:
        compile_query(query(sql="SELECT k FROM orders"),
                      target(PINNED.model_copy(update={"schema_": json.dumps(bad)})))
    assert "value.k: a union of int and string has no Spark type" in caught.value.problems[0].message


def test_event_time_on_a_column_from_the_registry() -> None:
    timed = query(source={"eventTime": {"column": "ts", "watermark": "1 minute"}})
    plan = compile_query(timed, target(PINNED))
    assert [s.id for s in plan.steps][:2] == ["source-orders", "watermark-orders"]


def test_an_avro_sink_pins_the_schema_derived_from_the_output() -> None:
    plan = compile_query(query(sink={"topic": "big.orders", "format": "avro"}), target(PINNED))
    sink = plan.steps[-1]
    assert isinstance(sink, KafkaSinkV1) and sink.format == "avro" and sink.value_schema is not None
    assert (sink.value_schema.subject, sink.value_schema.id, sink.value_schema.version) == (
        "big.orders-value", None, None)
    written = avro.parse(sink.value_schema.schema_)
    assert isinstance(written, dict) and written["name"] == "big_orders"
    assert avro.columns(written) == plan.output_schema


def test_an_avro_sink_subject_can_be_named() -> None:
    plan = compile_query(query(sink={"topic": "big", "format": "avro", "subject": "totals"}), target(PINNED))
    assert plan.sink.value_schema is not None and plan.sink.value_schema.subject == "totals"


def test_an_output_column_without_avro_name_is_refused_for_an_avro_sink() -> None:
    with pytest.raises(CompileError) as caught:
        compile_query(query(sql="SELECT id, amount AS `a b` FROM orders",
                            sink={"topic": "big", "format": "avro"}), target(PINNED))
    problem = caught.value.problems[0]
    assert problem.field == "spec.sink.format"
    assert "give the column an alias" in problem.message


def test_a_json_source_needs_its_columns_and_has_no_subject() -> None:
    with pytest.raises(ValidationError, match="a json source needs its columns"):
        QuerySpec.model_validate({"sources": [{"name": "o", "topic": "o"}], "sql": "SELECT 1",
                                  "sink": {"topic": "x"}})
    with pytest.raises(ValidationError, match="only an avro or protobuf sink"):
        QuerySpec.model_validate({"sources": [JSON_SOURCE], "sql": "SELECT a FROM o",
                                  "sink": {"topic": "x", "subject": "s"}})


def test_a_json_plan_carries_no_registry_schema_and_dumps_as_before() -> None:
    spec = QuerySpec.model_validate({"sources": [JSON_SOURCE], "sql": "SELECT a FROM o",
                                     "sink": {"topic": "x"}})
    plan = compile_query(spec, target(PINNED))  # schemas of subjects nobody reads change nothing
    assert plan.hash == compile_query(spec).hash
    assert "valueSchema" not in plan.canonical_json()
