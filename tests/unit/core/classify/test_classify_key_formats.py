"""keyFormat in the classifier: a source's or sink's key format changing is a topology change, as a
value format change is; an avro key's reader schema moving to a later version is data-selection (as a
value's); a sink's new key subject is data-selection; an unchanged key format changes nothing."""

from __future__ import annotations

import json
from typing import Any

from sluice.core.classify import classify
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.spec import QuerySpec

K1 = {"type": "record", "name": "Key", "fields": [{"name": "customer", "type": "string"}]}
K2 = {**K1, "fields": [*K1["fields"], {"name": "shard", "type": ["null", "int"], "default": None}]}
SQL = "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer"


def plan(key: dict[str, Any] | None = None, version: int = 1, source: dict[str, Any] | None = None,
         **sink: Any) -> Plan:
    src = {"name": "orders", "topic": "orders", "schema": [{"name": "amount", "type": "double"}],
           **(source if source is not None else {"keyFormat": "avro"})}
    query = QuerySpec.model_validate({"sources": [src], "sql": SQL, "sink": {
        "topic": "out", "key": ["customer"], "outputMode": "update", **sink}})
    pinned = RegistrySchema(subject="orders-key", schema_=json.dumps(key or K1), id=version + 10,
                            version=version)
    return compile_query(query, CompileTarget(schemas={"orders-key": pinned}))


def test_the_same_key_format_changes_nothing() -> None:
    assert classify(plan(), plan()).category == "none"


def test_a_source_key_format_change_is_topology() -> None:
    json_key = plan(source={"keyFormat": "json", "keySchema": [{"name": "customer", "type": "string"}]})
    decision = classify(json_key, plan())
    assert (decision.category, decision.decision) == ("topology", "replace")
    [change] = [c for c in decision.changes if c.field == "keyFormat"]
    assert "record key format" in change.message and "'json'" in change.message


def test_a_sink_key_format_change_is_topology() -> None:
    decision = classify(plan(), plan(keyFormat="json"))
    assert decision.category == "topology"
    assert [c.field for c in decision.changes] == ["keyFormat"]


def test_a_later_key_reader_schema_is_data_selection() -> None:
    decision = classify(plan(), plan(K2, 2))
    assert (decision.category, decision.decision) == ("data-selection", "in-place")
    assert "keySchema" in {c.field for c in decision.changes}


def test_a_new_sink_key_subject_is_data_selection() -> None:
    decision = classify(plan(keyFormat="avro"), plan(keyFormat="avro", keySubject="totals-key"))
    assert (decision.category, decision.decision) == ("data-selection", "in-place")
    assert [c.field for c in decision.changes] == ["keySchema.subject"]


def test_a_key_prefix_is_data_selection() -> None:
    """The key's columns renamed in SQL (the SQL renamed with them): the keys are read the same way."""
    def prefixed(prefix: str | None) -> Plan:
        extra = {"keyPrefix": prefix} if prefix else {}
        query = QuerySpec.model_validate({
            "sources": [{"name": "orders", "topic": "orders",
                         "schema": [{"name": "amount", "type": "double"}], "keyFormat": "json",
                         "keySchema": [{"name": "customer", "type": "string"}], **extra}],
            "sql": f"SELECT {prefix or ''}customer AS customer, amount FROM orders",
            "sink": {"topic": "out", "key": ["customer"]}})
        return compile_query(query)

    decision = classify(prefixed(None), prefixed("key_"))
    assert (decision.category, decision.decision) == ("data-selection", "in-place")
    [change] = [c for c in decision.changes if c.field == "keyPrefix"]
    assert (change.old, change.new) == ("", "key_") and "key column prefix" in change.message
