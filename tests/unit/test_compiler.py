"""Targeted compiler behaviour beyond the corpus: pinned settings, ids, normalization, positions."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.core.compiler import compile_query
from sluice.core.errors import CompileError
from sluice.core.plan.model import KafkaSourceV1, StreamStreamJoinV1, WatermarkV1
from sluice.core.spec import QuerySpec

ORDERS: dict[str, Any] = {
    "name": "orders",
    "topic": "orders",
    "schema": [
        {"name": "order_id", "type": "string"},
        {"name": "Amount", "type": "double"},
        {"name": "ts", "type": "timestamp"},
    ],
    "eventTime": {"column": "ts", "watermark": "60 SECONDS"},
    "maxOffsetsPerTrigger": 1000,
}
PAYMENTS: dict[str, Any] = {
    "name": "payments",
    "topic": "payments",
    "schema": [{"name": "order_id", "type": "string"}, {"name": "pts", "type": "timestamp"}],
    "eventTime": {"column": "pts", "watermark": "1 minute"},
    "malformed": {"policy": "skip"},
}


def spec(sql: str, **extra: Any) -> QuerySpec:
    data = {"sources": [ORDERS, PAYMENTS], "sql": sql, "sink": {"topic": "out"}, **extra}
    return QuerySpec.model_validate(data)


def test_settings_and_source_parameters_are_pinned() -> None:
    plan = compile_query(spec("SELECT order_id FROM orders", shufflePartitions=32))
    assert plan.settings.shuffle_partitions == 32
    assert plan.settings.spark_conf()["spark.sql.shuffle.partitions"] == "32"
    source, watermark = plan.steps[0], plan.steps[1]
    assert isinstance(source, KafkaSourceV1) and isinstance(watermark, WatermarkV1)
    assert source.max_offsets_per_trigger == 1000
    assert source.malformed.topic == "out.dlq"
    assert watermark.delay == "60 seconds"
    assert watermark.inputs == ["source-orders"]
    # only referenced sources are read
    assert [s.id for s in plan.steps] == ["source-orders", "watermark-orders", "project-1", "sink"]


def test_identifier_case_and_aliases_do_not_change_the_plan() -> None:
    a = compile_query(spec("SELECT o.order_id, o.amount FROM orders o WHERE o.amount > 1"))
    b = compile_query(spec("select O.ORDER_ID, O.AMOUNT from ORDERS O where amount > 1"))
    assert a.hash == b.hash
    assert [f.name for f in a.output_schema] == ["order_id", "Amount"]  # declared spelling


def test_join_aliases_are_normalized() -> None:
    sql = (
        "SELECT O.order_id FROM orders O JOIN payments P ON O.order_id = P.order_id "
        "AND P.pts BETWEEN O.ts AND O.ts + INTERVAL 1 HOUR"
    )
    plan = compile_query(spec(sql))
    join = plan.step("join-1")
    assert isinstance(join, StreamStreamJoinV1)
    assert (join.left_alias, join.right_alias) == ("o", "p")
    assert join.keys[0].left == "o.order_id"
    assert join.time_condition == "p.pts BETWEEN o.ts AND o.ts + INTERVAL '1' HOUR"
    assert {f.qualifier for f in join.schema_} == {"o", "p"}


def test_sql_problem_positions_count_within_the_sql() -> None:
    with pytest.raises(CompileError) as info:
        compile_query(spec("SELECT order_id,\n       amout\nFROM orders"))
    problem = info.value.problems[0]
    assert (problem.field, problem.line, problem.column) == ("spec.sql", 2, 8)
    assert "did you mean 'Amount'" in problem.message


def test_all_spec_problems_are_reported_together() -> None:
    bad = dict(ORDERS, schema=[{"name": "order_id", "type": "strin"}, {"name": "ts", "type": "timestamp"}])
    bad["eventTime"] = {"column": "ts", "watermark": "later"}
    with pytest.raises(CompileError) as info:
        compile_query(
            QuerySpec.model_validate({"sources": [bad, bad], "sql": "SELECT 1", "sink": {"topic": "t"}})
        )
    fields = [p.field for p in info.value.problems]
    assert "spec.sources[0].schema[0].type" in fields
    assert "spec.sources[0].eventTime.watermark" in fields
    assert "spec.sources[1].name" in fields


def test_trigger_is_normalized() -> None:
    plan = compile_query(spec("SELECT * FROM orders", trigger={"processingTime": "5 SECONDS"}))
    assert plan.sink.trigger.processing_time == "5 seconds"
