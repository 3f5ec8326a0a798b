"""The admission webhook on avro queries (pure): a query with avro needs the QueryCluster's registry;
its sources compile with the subjects' latest schemas the kopf side read (not read: allowed with a
warning, the operator compiles it); an avro sink's new schema the registry calls incompatible is
refused with the registry's reason (``sink_check``), an unchanged one is not asked about."""

from __future__ import annotations

import json
from typing import Any

from sluice.core.admission import RunningPlan, SpecModels, review_query
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.plan.model import RegistrySchema
from sluice.core.spec import QuerySpec
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec

MODELS = SpecModels(query=StreamingQuerySpec, cluster=QueryClusterSpec)
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "customer", "type": "string"},
                                                       {"name": "amount", "type": "double"}]}
SCHEMAS = {"orders-value": RegistrySchema(subject="orders-value", schema_=json.dumps(ORDER), id=1, version=1)}
CLUSTER = {"serviceId": "shop", "kafka": {"bootstrapServers": "k:9092"},
           "schemaRegistry": {"url": "http://registry:8080"}}
SQL = "SELECT customer, amount FROM orders"


def query(sql: str = SQL, generation: int = 1) -> dict[str, Any]:
    spec = {"sources": [{"name": "orders", "topic": "orders", "format": "avro"}], "sql": sql,
            "sink": {"topic": "out", "format": "avro"}}
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": "totals", "namespace": "shop", "uid": "u", "generation": generation},
            "spec": spec}


def test_avro_without_a_registry_in_the_cluster_is_refused_naming_the_fields() -> None:
    no_registry = {k: v for k, v in CLUSTER.items() if k != "schemaRegistry"}
    verdict = review_query("CREATE", query(), None, {}, models=MODELS, cluster=no_registry)
    assert not verdict.allowed
    assert "spec.sources[0].format: source 'orders' has format avro" in verdict.message
    assert "spec.sink.format" in verdict.message and "no spec.schemaRegistry" in verdict.message


def test_sources_compile_with_the_schemas_read_and_sql_errors_are_refused() -> None:
    assert review_query("CREATE", query(), None, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS).allowed
    verdict = review_query("CREATE", query("SELECT custmer FROM orders"), None, {}, models=MODELS,
                           cluster=CLUSTER, schemas=SCHEMAS)
    assert not verdict.allowed and "did you mean 'customer'" in verdict.message


def test_without_the_registrys_answer_the_query_is_allowed_with_a_warning() -> None:
    verdict = review_query("CREATE", query(), None, {}, models=MODELS, cluster=CLUSTER,
                           unavailable="the schema registry at http://registry:8080: refused")
    assert verdict.allowed and "not compiled here: the operator compiles the query" in verdict.warnings[0]


def test_an_incompatible_sink_schema_is_refused_with_the_registrys_reason() -> None:
    asked: list[str] = []

    def sink_check(schema: RegistrySchema, what: str) -> str | None:
        asked.append(schema.subject)
        return "the sink's new Avro schema is incompatible with subject 'out-value': reader type: STRING"

    verdict = review_query("CREATE", query(), None, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS,
                           sink_check=sink_check)
    assert not verdict.allowed and "reader type: STRING" in verdict.message
    assert asked == ["out-value"]


def test_an_unchanged_sink_schema_is_not_asked_about() -> None:
    plan = compile_query(QuerySpec.model_validate(query()["spec"]), CompileTarget(schemas=SCHEMAS))
    digest = plan.hash
    old = query()
    old["status"] = {"plan": {"hash": digest, "version": 1, "configMap": f"totals-plan-{digest[:12]}"}}
    new = query("SELECT customer, amount FROM orders WHERE amount > 0", generation=2)

    def sink_check(schema: RegistrySchema, what: str) -> str | None:
        raise AssertionError("not asked: the running plan writes this schema already")

    verdict = review_query("UPDATE", new, old, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS,
                           sink_check=sink_check,
                           running_plan=RunningPlan(f"totals-plan-{digest[:12]}", plan.to_json()))
    assert verdict.allowed


def test_a_replace_with_backfill_is_checked_against_the_versioned_topics_subject() -> None:
    def grouped(sql: str, generation: int, **upgrade: Any) -> dict[str, Any]:
        obj = query(sql, generation)
        obj["spec"]["sink"] = {"topic": "out", "format": "avro", "outputMode": "update"}
        obj["spec"]["upgrade"] = {"replaceStrategy": "backfill", **upgrade}
        return obj

    old = grouped("SELECT customer, sum(amount) AS total FROM orders GROUP BY customer", 1)
    plan = compile_query(QuerySpec.model_validate({k: v for k, v in old["spec"].items() if k != "upgrade"}),
                         CompileTarget(schemas=SCHEMAS))
    old["status"] = {"plan": {"hash": plan.hash, "version": 1, "configMap": f"totals-plan-{plan.hash[:12]}"}}
    running = RunningPlan(f"totals-plan-{plan.hash[:12]}", plan.to_json())
    new = grouped("SELECT amount, count(*) AS n FROM orders GROUP BY amount", 2)  # a new grouping key
    asked: list[str] = []

    def sink_check(schema: RegistrySchema, what: str) -> str | None:
        asked.append(schema.subject)
        return "incompatible" if schema.subject == "out-value" else None

    verdict = review_query("UPDATE", new, old, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS,
                           sink_check=sink_check, running_plan=running)
    assert verdict.allowed and asked == ["out-v2-value"]
    assert any("replace with backfill, output moves to topic out-v2" in w for w in verdict.warnings)
    # without replaces the same edit is checked against the topic's own subject, and refused
    asked.clear()
    no_replace = grouped(new["spec"]["sql"], 2, allowReplace=False)
    refused = review_query("UPDATE", no_replace, old, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS,
                           sink_check=sink_check, running_plan=running)
    assert not refused.allowed and asked == ["out-value"]


def test_an_avro_sink_key_of_a_json_value_is_checked_under_its_key_subject_when_it_changes() -> None:
    def keyed(sql: str, generation: int) -> dict[str, Any]:
        obj = query(sql, generation)
        obj["spec"]["sink"] = {"topic": "out", "key": ["customer"], "keyFormat": "avro",
                               "outputMode": "update"}
        return obj

    old = keyed("SELECT customer, sum(amount) AS total FROM orders GROUP BY customer", 1)
    plan = compile_query(QuerySpec.model_validate(old["spec"]), CompileTarget(schemas=SCHEMAS))
    old["status"] = {"plan": {"hash": plan.hash, "version": 1, "configMap": f"totals-plan-{plan.hash[:12]}"}}
    running = RunningPlan(f"totals-plan-{plan.hash[:12]}", plan.to_json())
    asked: list[tuple[str, str]] = []

    def sink_check(schema: RegistrySchema, what: str) -> str | None:
        asked.append((schema.subject, what))
        return f"{what} is incompatible with subject {schema.subject!r}"

    same_key = keyed("SELECT customer, sum(amount) AS total FROM orders WHERE amount > 0 "
                     "GROUP BY customer", 2)
    assert review_query("UPDATE", same_key, old, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS,
                        sink_check=sink_check, running_plan=running).allowed
    assert asked == []  # the running plan writes this key schema already
    retyped = keyed("SELECT cast(customer AS binary) AS customer, sum(amount) AS total FROM orders "
                    "GROUP BY customer", 2)
    verdict = review_query("UPDATE", retyped, old, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS,
                           sink_check=sink_check, running_plan=running)
    assert asked == [("out-key", "the sink's new Avro key schema")]
    assert not verdict.allowed and "key schema is incompatible with subject 'out-key'" in verdict.message


def test_a_replace_with_backfill_checks_the_key_under_the_versioned_topics_key_subject() -> None:
    def keyed(sql: str, generation: int, **sink: Any) -> dict[str, Any]:
        obj = query(sql, generation)
        obj["spec"]["sink"] = {"topic": "out", "format": "avro", "key": ["customer"], "keyFormat": "avro",
                               "outputMode": "update", **sink}
        obj["spec"]["upgrade"] = {"replaceStrategy": "backfill"}
        return obj

    def asked_for(**sink: Any) -> tuple[list[tuple[str, str]], Any]:
        old = keyed("SELECT customer, sum(amount) AS total FROM orders GROUP BY customer", 1, **sink)
        spec = QuerySpec.model_validate({k: v for k, v in old["spec"].items() if k != "upgrade"})
        plan = compile_query(spec, CompileTarget(schemas=SCHEMAS))
        # the running version is plan version 2, so the replace writes out-v3
        old["status"] = {"plan": {"hash": plan.hash, "version": 2,
                                  "configMap": f"totals-plan-{plan.hash[:12]}"}}
        running = RunningPlan(f"totals-plan-{plan.hash[:12]}", plan.to_json())
        # a new grouping whose key column is retyped (string -> binary): value and key schemas change
        new = keyed("SELECT cast(customer AS binary) AS customer, count(*) AS n FROM orders "
                    "GROUP BY customer", 2, **sink)
        asked: list[tuple[str, str]] = []

        def sink_check(schema: RegistrySchema, what: str) -> str | None:
            asked.append((schema.subject, what))
            return f"{what} is incompatible with subject {schema.subject!r}" if schema.subject.endswith(
                "out-key") else None

        return asked, review_query("UPDATE", new, old, {}, models=MODELS, cluster=CLUSTER, schemas=SCHEMAS,
                                   sink_check=sink_check, running_plan=running)

    asked, verdict = asked_for()
    assert asked == [("out-v3-value", "the sink's new Avro schema"),
                     ("out-v3-key", "the sink's new Avro key schema")]
    assert verdict.allowed  # the old topic's key subject, which would refuse it, is not asked
    # a named keySubject is kept on the versioned topic (and refused there)
    asked, verdict = asked_for(keySubject="shared-out-key")
    assert asked == [("out-v3-value", "the sink's new Avro schema"),
                     ("shared-out-key", "the sink's new Avro key schema")]
    assert not verdict.allowed and "incompatible with subject 'shared-out-key'" in verdict.message
