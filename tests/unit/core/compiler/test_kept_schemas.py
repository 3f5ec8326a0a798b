"""Which source schemas a compile uses: those a plan of the same query pinned (a rollback, an edit
undone, only the engine moved on), else none known (the operator fetches each subject's latest)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from sluice.core.compiler import CompileTarget, compile_query, source_subjects
from sluice.core.compiler.registry import KeptSchemas, kept_source_schemas, plan_source_schemas
from sluice.core.engine import query_digest
from sluice.core.plan.model import RegistrySchema
from sluice.core.spec import QuerySpec

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}
FIRST = RegistrySchema(subject="orders-value", schema_=json.dumps(V1), id=1, version=1)
LATEST = RegistrySchema(subject="orders-value", schema_=json.dumps(V2), id=2, version=2)


def query(sql: str) -> QuerySpec:
    return QuerySpec.model_validate({"sources": [{"name": "orders", "topic": "orders", "format": "avro"}],
                                     "sql": sql, "sink": {"topic": "out"}})


def test_a_query_a_plan_ran_before_compiles_with_the_schemas_that_plan_pinned() -> None:
    before, edited = query("SELECT * FROM orders"), query("SELECT id FROM orders")
    first = compile_query(before, CompileTarget(schemas={"orders-value": FIRST}))
    kept = [KeptSchemas(query_digest(edited), {"orders-value": LATEST}),
            KeptSchemas(query_digest(before), plan_source_schemas(first))]

    chosen = kept_source_schemas(query_digest(before), source_subjects(before), kept)

    assert chosen == {"orders-value": FIRST}  # not the version the subject gained since
    assert compile_query(before, CompileTarget(schemas=chosen)).hash == first.hash


def test_the_first_plan_of_the_same_query_wins() -> None:
    same = query_digest(query("SELECT * FROM orders"))
    kept = [KeptSchemas(same, {"orders-value": FIRST}), KeptSchemas(same, {"orders-value": LATEST})]
    assert kept_source_schemas(same, ["orders-value"], kept) == {"orders-value": FIRST}


def test_a_new_query_asks_for_the_latest_versions() -> None:
    kept = [KeptSchemas(query_digest(query("SELECT * FROM orders")), {"orders-value": FIRST})]
    new = query_digest(query("SELECT id FROM orders"))
    assert kept_source_schemas(new, ["orders-value"], kept) is None
    assert kept_source_schemas(new, ["orders-value"], []) is None


def test_a_kept_plan_that_lacks_a_subject_or_whose_query_is_unknown_is_not_used() -> None:
    same = query_digest(query("SELECT * FROM orders"))
    kept = [KeptSchemas(None, {"orders-value": FIRST}), KeptSchemas(same, {"other-value": FIRST})]
    assert kept_source_schemas(same, ["orders-value"], kept) is None


def test_a_query_without_avro_sources_needs_no_schemas() -> None:
    assert kept_source_schemas("any", [], [KeptSchemas("any", {"orders-value": FIRST})]) == {}


def test_the_kept_plans_are_read_no_further_than_the_first_that_fits() -> None:
    same = query_digest(query("SELECT * FROM orders"))
    read: list[int] = []

    def versions() -> Iterator[KeptSchemas]:
        for i, version in enumerate([KeptSchemas(same, {"orders-value": FIRST}), KeptSchemas(same)]):
            read.append(i)
            yield version

    assert kept_source_schemas(same, ["orders-value"], versions()) == {"orders-value": FIRST}
    assert read == [0]
