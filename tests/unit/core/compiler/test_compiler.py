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


# -- defects found by the audit ------------------------------------------------------------------

ORDERS_WIDE: dict[str, Any] = dict(
    ORDERS,
    schema=[
        *ORDERS["schema"],
        {"name": "info", "type": "struct<a:int,b:string>"},
        {"name": "tags", "type": "array<string>"},
    ],
)


def wide(sql: str, **extra: Any) -> QuerySpec:
    data = {"sources": [ORDERS_WIDE, PAYMENTS], "sql": sql, "sink": {"topic": "out"}, **extra}
    return QuerySpec.model_validate(data)


UPDATE = {"topic": "out", "outputMode": "update"}


def problem_of(sql: str) -> Any:
    with pytest.raises(CompileError) as info:
        compile_query(wide(sql))
    return info.value.problems[0]


BAD_SQL = [
    "SELECT FROM orders",
    "SELECT DISTINCT FROM orders",
    "SELECT order_id,, Amount FROM orders",
    "SELECT order_id, FROM orders",
    "SELECT , order_id FROM orders",
    "SELECT upper(order_id,) AS u FROM orders",
    "SELECT order_id FROM orders,",
    "SELECT count(*) AS n FROM orders GROUP BY",
    "SELECT order_id FROM",
    "SELECT * FROM orders JOIN",
    "SELECT * FROM range(10)",
    "SELECT upper(order_id, 1) AS u FROM orders",
    "SELECT upper() AS u FROM orders",
    "SELECT order_id FROM orders o WHERE o.",
    "SELECT CAST(order_id AS money) AS m FROM orders",
    "SELECT CAST(order_id AS jsonb) AS m FROM orders",
    "SELECT CAST(order_id AS uuid) AS m FROM orders",
    "SELECT CAST(order_id AS text) AS m FROM orders",
    "SELECT CAST(order_id AS varchar) AS m FROM orders",
    "SELECT CAST(order_id AS array<text>) AS m FROM orders",
    "SELECT CAST(Amount AS decimal(5,7)) AS m FROM orders",
    "SELECT CAST(info AS int) AS m FROM orders",
    "SELECT CAST(tags AS timestamp) AS m FROM orders",
    "SELECT order_id FROM orders WHERE ts > ts - INTERVAL 1 FORTNIGHT",
    "SELECT * EXCEPT (nope) FROM orders",
    "SELECT * EXCEPT info FROM orders",
    "SELECT * REPLACE (Amount AS a) FROM orders",
    "SELECT order_id FROM orders; SELECT 1",
    "SELECT order_id FROM orders; -- one\nSELECT 2 -- two",
    "EXPLAIN SELECT order_id FROM orders",
    "SHOW TABLES",
    "",
    "-- only a comment",
    "SELECT 'never closed FROM orders",
    "SELECT a b c FROM orders",
    "SELECT window(ts, '5 minutes', '10 minutes') AS w, count(*) AS n FROM orders "
    "GROUP BY window(ts, '5 minutes', '10 minutes')",
]


@pytest.mark.parametrize("sql", BAD_SQL)
def test_every_sql_problem_is_located_and_reads_like_a_sentence(sql: str) -> None:
    problem = problem_of(sql)
    assert problem.field == "spec.sql"
    assert problem.line is not None and problem.column is not None, problem.render()
    for leak in ("<Token", "TokenType", "<class", "sqlglot", "SENTINEL"):
        assert leak not in problem.message


@pytest.mark.parametrize(
    ("sql", "where", "fragment"),
    [
        ("SELECT FROM orders", (1, 8), "the SELECT list is empty"),
        ("SELECT order_id,, Amount FROM orders", (1, 17), "two commas here with nothing between them"),
        ("SELECT order_id,\n  FROM orders", (1, 16), "this comma is followed by 'FROM'"),
        ("SELECT order_id FROM", (1, 17), "expected a source name but got the end of the SQL"),
        ("SELECT * FROM range(10)", (1, 15), "table-valued functions such as range(...) are not supported"),
        ("SELECT upper(order_id, 1) AS u FROM orders", (1, 8), "function 'upper' takes at most 1 argument"),
        ("SELECT CAST(order_id AS money) AS m FROM orders", (1, 25), "unknown type 'money'"),
        ("SELECT CAST(order_id AS jsonb) AS m FROM orders", (1, 25), "unknown type 'jsonb'"),
        ("SELECT CAST(order_id AS text) AS m FROM orders", (1, 25), "unknown type 'text': Spark SQL has no"),
        (
            "SELECT CAST(Amount AS decimal(5,7)) AS m FROM orders",
            (1, 23),
            "scale (7) exceeds the precision (5)",
        ),
        ("SELECT CAST(info AS int) AS m FROM orders", (1, 21), "cannot cast 'info' (struct<a:int,b:string>)"),
        ("SELECT ts + INTERVAL 1 FORTNIGHT AS t FROM orders", (1, 13), "unknown unit 'FORTNIGHT'"),
        ("SELECT * EXCEPT (Amount, amount) FROM orders", (1, 26), "listed twice"),
    ],
)
def test_problem_messages_and_positions(sql: str, where: tuple[int, int], fragment: str) -> None:
    problem = problem_of(sql)
    assert (problem.line, problem.column) == where, problem.render()
    assert fragment in problem.message


def test_unknown_cast_type_lists_the_supported_types() -> None:
    message = problem_of("SELECT CAST(order_id AS uuid) AS m FROM orders").message
    assert "(use string)" in message
    assert "supported types: string, varchar(n)" in message and "struct<name:T,...>" in message


def test_decimal_scale_beyond_precision_in_the_source_schema() -> None:
    bad = dict(ORDERS, schema=[*ORDERS["schema"], {"name": "p", "type": "decimal(5,7)"}])
    with pytest.raises(CompileError) as info:
        compile_query(QuerySpec.model_validate({"sources": [bad], "sql": "SELECT 1", "sink": {"topic": "t"}}))
    assert "the scale (7) exceeds the precision (5)" in info.value.problems[0].message


def test_comments_between_group_and_by_and_after_the_last_semicolon_are_accepted() -> None:
    base = compile_query(wide("SELECT order_id, count(*) AS n FROM orders GROUP BY order_id", sink=UPDATE))
    for sql in (
        "SELECT order_id, count(*) AS n FROM orders GROUP /* x */ BY order_id",
        "SELECT order_id, count(*) AS n FROM orders GROUP -- why\nBY order_id",
        "SELECT order_id, count(*) AS n FROM orders GROUP BY order_id; -- bye",
        "SELECT order_id, count(*) AS n FROM orders GROUP BY order_id;\n/* bye */\n",
    ):
        assert compile_query(wide(sql, sink=UPDATE)).hash == base.hash, sql


def test_star_except_is_the_explicit_column_list() -> None:
    star = compile_query(wide("SELECT * EXCEPT (info, TAGS) FROM orders"))
    explicit = compile_query(wide("SELECT order_id, Amount, ts FROM orders"))
    assert star.hash == explicit.hash
    joined = compile_query(
        wide(
            "SELECT * EXCEPT (p.order_id, o.info, tags) FROM orders o JOIN payments p "
            "ON o.order_id = p.order_id AND p.pts BETWEEN o.ts AND o.ts + INTERVAL 1 HOUR"
        )
    )
    assert [(f.name, f.qualifier) for f in joined.steps[-2].schema_] == [
        ("order_id", None),
        ("Amount", None),
        ("ts", None),
        ("pts", None),
    ]
    ambiguous = problem_of(
        "SELECT * EXCEPT (order_id) FROM orders o JOIN payments p ON o.order_id = p.order_id"
    )
    assert "ambiguous" in ambiguous.message and "'o.order_id'" in ambiguous.message


def test_window_slide_may_equal_but_not_exceed_the_window() -> None:
    sql = "SELECT window(ts, '{a}', '{b}') AS w, count(*) AS n FROM orders GROUP BY window(ts, '{a}', '{b}')"
    compile_query(wide(sql.format(a="5 minutes", b="300 seconds")))
    problem = problem_of(sql.format(a="1 hour", b="61 minutes"))
    assert "('61 minutes') is longer than the window ('1 hour')" in problem.message
