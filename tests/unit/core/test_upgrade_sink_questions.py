"""What ``sluice diff`` and ``kubectl sluice diff`` ask the schema registry about an upgrade (pure,
``sluice.core.formats.registry``): an avro sink's changed schema, value then key, under the subject the
webhook checks it under; a replace with backfill onto a versioned topic moves the value and the key to
that topic's subjects (not asked without the plan version; a subject the sink names stays); a refusal
turns the decision into ``reject``. (The real
registry: tests/integration/test_diff_sink_registry.py.)"""

from __future__ import annotations

from typing import Any

from sluice.core.classify import classify
from sluice.core.compiler import compile_query
from sluice.core.formats.registry import (
    NEW_KEY_SCHEMA,
    NEW_VALUE_SCHEMA,
    admission_registry_check,
    backfill_topic,
    refused_upgrade,
    sink_questions,
    upgrade_sink_questions,
    versioned_key_subject,
    versioned_sink_schema,
    versioned_subject,
)
from sluice.core.naming import QueryIdentity
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.spec import QuerySpec, UpgradePolicy

SOURCE = {"name": "orders", "topic": "orders",
          "schema": [{"name": "customer", "type": "string"}, {"name": "amount", "type": "double"}]}
BACKFILL = UpgradePolicy.model_validate({"replaceStrategy": "backfill"})


def spec(sql: str, **sink: Any) -> QuerySpec:
    return QuerySpec.model_validate({"sources": [SOURCE], "sql": sql,
                                     "sink": {"topic": "out", "format": "avro", **sink}})


def plan(query: QuerySpec) -> Plan:
    return compile_query(query)


TOTALS = "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer"
TOTALS_POSITIVE = "SELECT customer, sum(amount) AS total FROM orders WHERE amount > 0 GROUP BY customer"
#: the output column's type changes (double -> string), the grouping stays: in place
TOTALS_TEXT = "SELECT customer, cast(sum(amount) AS string) AS total FROM orders GROUP BY customer"
#: a new grouping key: a replace
BY_AMOUNT = "SELECT amount, count(*) AS n FROM orders GROUP BY amount"


def subjects(questions: list[tuple[RegistrySchema, str]]) -> list[tuple[str, str]]:
    return [(schema.subject, what) for schema, what in questions]


def test_an_unchanged_sink_schema_is_not_asked_about() -> None:
    old, new = spec(TOTALS, outputMode="update"), spec(TOTALS_POSITIVE, outputMode="update")
    assert upgrade_sink_questions(new, plan(new), plan(old), UpgradePolicy()) == []


def test_a_changed_value_schema_in_place_is_asked_under_the_topics_subject() -> None:
    old, new = spec(TOTALS, outputMode="update"), spec(TOTALS_TEXT, outputMode="update")
    new_plan = plan(new)
    assert classify(plan(old), new_plan, UpgradePolicy()).decision == "in-place"
    questions = upgrade_sink_questions(new, new_plan, plan(old), UpgradePolicy())
    assert subjects(questions) == [("out-value", NEW_VALUE_SCHEMA)]
    assert questions[0][0] == new_plan.sink.value_schema


def test_a_json_sink_asks_nothing() -> None:
    old = QuerySpec.model_validate({**spec(TOTALS).model_dump(by_alias=True),
                                    "sink": {"topic": "out", "outputMode": "update"}})
    new = QuerySpec.model_validate({**spec(TOTALS_TEXT).model_dump(by_alias=True),
                                    "sink": {"topic": "out", "outputMode": "update"}})
    assert upgrade_sink_questions(new, plan(new), plan(old), UpgradePolicy()) == []


def test_a_replace_with_backfill_asks_under_the_versioned_subject_only_when_the_version_is_known() -> None:
    old, new = spec(TOTALS, outputMode="update"), spec(BY_AMOUNT, outputMode="update")
    old_plan, new_plan = plan(old), plan(new)
    assert classify(old_plan, new_plan, BACKFILL).decision == "replace"
    # kubectl sluice diff: the live query runs plan version 3, so the new version writes out-v4
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, BACKFILL, version=4)) == [
        ("out-v4-value", NEW_VALUE_SCHEMA)]
    # sluice diff: no plan version, so the versioned subject is not known: not asked
    assert upgrade_sink_questions(new, new_plan, old_plan, BACKFILL) == []
    # a hand-off replace keeps the topic: asked under its subject, as the webhook asks
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, UpgradePolicy())) == [
        ("out-value", NEW_VALUE_SCHEMA)]
    # no replaces allowed: the same edit is asked under the topic's own subject
    no_replace = UpgradePolicy.model_validate({"replaceStrategy": "backfill", "allowReplace": False})
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, no_replace)) == [
        ("out-value", NEW_VALUE_SCHEMA)]


#: the key column's type changes (string -> binary) with the grouping: the key schema changes too
BY_BINARY_CUSTOMER = ("SELECT cast(customer AS binary) AS customer, count(*) AS n FROM orders "
                      "GROUP BY customer")


def keyed(sql: str, **sink: Any) -> QuerySpec:
    return spec(sql, outputMode="update", key=["customer"], keyFormat="avro", **sink)


def test_the_key_follows_a_versioned_topic_as_the_value_does() -> None:
    old, new = keyed(TOTALS), keyed(BY_BINARY_CUSTOMER)
    old_plan, new_plan = plan(old), plan(new)
    assert classify(old_plan, new_plan, BACKFILL).decision == "replace"
    # kubectl sluice diff (the version known): both under the versioned topic's subjects
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, BACKFILL, version=2)) == [
        ("out-v2-value", NEW_VALUE_SCHEMA), ("out-v2-key", NEW_KEY_SCHEMA)]
    # sluice diff (N unknown): neither goes under a subject known here, so nothing is asked
    assert upgrade_sink_questions(new, new_plan, old_plan, BACKFILL) == []
    # a hand-off replace keeps the topic and its subjects
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, UpgradePolicy())) == [
        ("out-value", NEW_VALUE_SCHEMA), ("out-key", NEW_KEY_SCHEMA)]


def test_a_named_key_subject_is_kept_on_a_versioned_topic() -> None:
    old, new = keyed(TOTALS, keySubject="shared-key"), keyed(BY_BINARY_CUSTOMER, keySubject="shared-key")
    old_plan, new_plan = plan(old), plan(new)
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, BACKFILL, version=3)) == [
        ("out-v3-value", NEW_VALUE_SCHEMA), ("shared-key", NEW_KEY_SCHEMA)]
    # N unknown: the named key subject is known, so it is asked; the versioned value is not
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, BACKFILL)) == [
        ("shared-key", NEW_KEY_SCHEMA)]
    # and a named value subject with the key's default: the key moves, the value stays
    old, new = keyed(TOTALS, subject="shared-value"), keyed(BY_BINARY_CUSTOMER, subject="shared-value")
    old_plan, new_plan = plan(old), plan(new)
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, BACKFILL, version=3)) == [
        ("shared-value", NEW_VALUE_SCHEMA), ("out-v3-key", NEW_KEY_SCHEMA)]
    assert subjects(upgrade_sink_questions(new, new_plan, old_plan, BACKFILL)) == [
        ("shared-value", NEW_VALUE_SCHEMA)]


def test_the_subjects_of_a_versioned_topic_value_and_key() -> None:
    new_plan = plan(keyed(BY_BINARY_CUSTOMER))
    assert (versioned_subject(new_plan, "out-v2"), versioned_key_subject(new_plan, "out-v2")) == (
        "out-v2-value", "out-v2-key")
    for topic in (None, "", "out"):  # the plan's own topic: its own subjects
        assert versioned_subject(new_plan, topic) is None and versioned_key_subject(new_plan, topic) is None
    key = versioned_sink_schema(new_plan, "out-v2", key=True)
    assert key is not None and new_plan.sink.key_schema is not None
    assert key.subject == "out-v2-key" and key.schema_ == new_plan.sink.key_schema.schema_
    assert versioned_sink_schema(new_plan, None, key=True) == new_plan.sink.key_schema
    named = plan(keyed(BY_BINARY_CUSTOMER, keySubject="shared-key"))
    assert versioned_key_subject(named, "out-v2") is None
    assert versioned_sink_schema(named, "out-v2", key=True) == named.sink.key_schema
    json_key = plan(spec(TOTALS, outputMode="update", key=["customer"], keyFormat="json"))
    assert versioned_key_subject(json_key, "out-v2") is None
    assert versioned_sink_schema(json_key, "out-v2", key=True) is None


def test_the_backfill_topic_is_the_versioned_one_or_none() -> None:
    old_plan, new_plan = plan(keyed(TOTALS)), plan(keyed(BY_BINARY_CUSTOMER))
    identity = QueryIdentity(service_id="-", namespace="-", name="-", uid="", plan_version=4)
    assert backfill_topic(new_plan, old_plan, BACKFILL, identity) == "out-v4"
    assert backfill_topic(new_plan, old_plan, UpgradePolicy(), identity) is None  # hand-off
    assert backfill_topic(new_plan, None, BACKFILL, identity) is None
    # the edit names a new sink topic: the version writes it, under its own subjects
    renamed = plan(spec(BY_BINARY_CUSTOMER, topic="out2", outputMode="update", key=["customer"],
                        keyFormat="avro"))
    assert backfill_topic(renamed, old_plan, BACKFILL, identity) is None


def test_the_webhooks_check_asks_the_same_questions_in_order_and_stops_at_a_refusal() -> None:
    old = spec(TOTALS, outputMode="update", key=["customer"], keyFormat="avro")
    new = spec("SELECT cast(customer AS binary) AS customer, count(*) AS n FROM orders GROUP BY customer",
               outputMode="update", key=["customer"], keyFormat="avro")
    query, new_plan, old_plan = new, plan(new), plan(old)
    asked: list[str] = []

    def accept(schema: RegistrySchema, what: str) -> str | None:
        asked.append(schema.subject)
        return None

    assert admission_registry_check(query, new_plan, old_plan, accept) is None
    assert asked == [s for s, _ in subjects(sink_questions(query, new_plan, old_plan))] == ["out-value",
                                                                                          "out-key"]
    asked.clear()

    def refuse(schema: RegistrySchema, what: str) -> str | None:
        asked.append(schema.subject)
        return f"{what} is incompatible with subject {schema.subject!r}"

    assert admission_registry_check(query, new_plan, old_plan, refuse, "out-v2") == (
        "the sink's new Avro schema is incompatible with subject 'out-v2-value'")
    assert asked == ["out-v2-value"]  # the key is not asked once the value is refused
    asked.clear()
    assert admission_registry_check(query, new_plan, old_plan, accept, "out-v2") is None
    assert asked == ["out-v2-value", "out-v2-key"]  # on a topic of its own, the key follows it


def test_a_refusal_rejects_with_the_registrys_reason_first() -> None:
    old, new = spec(TOTALS, outputMode="update"), spec(TOTALS_TEXT, outputMode="update")
    decision = classify(plan(old), plan(new), UpgradePolicy())
    refused = refused_upgrade(decision, "the sink's new Avro schema is incompatible with subject 'out-value'")
    assert refused.decision == "reject" and refused.category == decision.category
    assert refused.reasons == ["the sink's new Avro schema is incompatible with subject 'out-value'",
                               *decision.reasons]
    assert refused.changes == decision.changes


def test_a_protobuf_sink_key_is_asked_about_as_a_protobuf_key_schema() -> None:
    from sluice.core.formats.registry import NEW_PROTOBUF_KEY_SCHEMA, NEW_PROTOBUF_SCHEMA

    query = QuerySpec.model_validate({"sources": [SOURCE], "sql": TOTALS, "sink": {
        "topic": "out", "format": "protobuf", "key": ["customer"], "keyFormat": "protobuf",
        "outputMode": "update"}})
    asked = sink_questions(query, plan(query), None)
    assert [(schema.subject, schema.schema_type, what) for schema, what in asked] == [
        ("out-value", "PROTOBUF", NEW_PROTOBUF_SCHEMA), ("out-key", "PROTOBUF", NEW_PROTOBUF_KEY_SCHEMA)]
