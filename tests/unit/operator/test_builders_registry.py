"""The schema registry on the operator's side (issue 30): the drivers' ``SLUICE_SCHEMA_REGISTRY_*``,
``SLUICE_SINK_SCHEMA_ID`` and ``SLUICE_SINK_KEY_SCHEMA_ID`` (only for a plan that uses avro; credentials
and CA from Secrets, never in the spec), and the pure decisions from the registry's answers
(``sluice.core.formats.registry``)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sluice.core.formats.registry import incompatibility, registry_problems
from sluice.core.spec import QuerySpec
from sluice.crd.querycluster import QueryClusterSpec
from sluice.operator import builders

from tests.support.operator_fixtures import cluster_spec, context, query_spec

H = "ab" * 32
REGISTRY = {"url": "https://registry.shop:8081/apis/ccompat/v7", "basicAuthSecret": "registry-user",
            "tlsSecret": "registry-ca"}


def env_of(ctx: Any, plan_hash: str = H) -> dict[str, Any]:
    container = builders.driver_deployment(ctx, plan_hash, "cm")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_a_plan_writing_avro_gets_the_registry_and_its_sink_schema_id() -> None:
    ctx = context(cluster=cluster_spec(schemaRegistry=REGISTRY), sink_schema_ids={H: 42})
    env = env_of(ctx)
    assert env["SLUICE_SCHEMA_REGISTRY_URL"] == REGISTRY["url"]
    user = {"secretKeyRef": {"name": "registry-user", "key": "username"}}
    assert env["SLUICE_SCHEMA_REGISTRY_USERNAME"] == user
    assert env["SLUICE_SCHEMA_REGISTRY_PASSWORD"] == {"secretKeyRef": {"name": "registry-user",
                                                                       "key": "password"}}
    assert env["SLUICE_SCHEMA_REGISTRY_CA"] == {"secretKeyRef": {"name": "registry-ca", "key": "ca.crt"}}
    assert env["SLUICE_SINK_SCHEMA_ID"] == "42"


def test_a_plan_reading_avro_and_writing_json_gets_the_registry_without_a_sink_id() -> None:
    ctx = context(cluster=cluster_spec(schemaRegistry={"url": "http://r:8080"}), sink_schema_ids={H: None})
    env = env_of(ctx)
    assert env["SLUICE_SCHEMA_REGISTRY_URL"] == "http://r:8080"
    assert not {"SLUICE_SINK_SCHEMA_ID", "SLUICE_SCHEMA_REGISTRY_USERNAME",
                "SLUICE_SCHEMA_REGISTRY_CA"} & set(env)


def test_a_plan_writing_an_avro_key_gets_its_key_schema_id_as_the_runtime_reads_it() -> None:
    from sluice_runtime.avro import AvroSettings

    ctx = context(cluster=cluster_spec(schemaRegistry={"url": "http://r:8080"}), sink_schema_ids={H: None},
                  sink_key_schema_ids={H: 7})
    env = env_of(ctx)
    assert env["SLUICE_SINK_KEY_SCHEMA_ID"] == "7" and "SLUICE_SINK_SCHEMA_ID" not in env
    settings = AvroSettings.from_env({k: v for k, v in env.items() if isinstance(v, str)})
    assert settings.sink_key_schema_id == 7 and settings.sink_schema_id is None


def test_json_plans_pods_do_not_change_when_a_cluster_gains_a_registry() -> None:
    plain = env_of(context())
    other_plan = {"cd" * 32: 1}
    with_registry = env_of(context(cluster=cluster_spec(schemaRegistry=REGISTRY), sink_schema_ids=other_plan))
    assert plain == with_registry
    assert not any(name.startswith("SLUICE_SCHEMA_REGISTRY") for name in plain)


def test_the_registry_url_and_secret_names_are_checked() -> None:
    with pytest.raises(ValidationError, match="url"):
        QueryClusterSpec.model_validate(cluster_spec(schemaRegistry={"url": "registry:8081"}))
    with pytest.raises(ValidationError, match="basicAuthSecret"):
        QueryClusterSpec.model_validate(cluster_spec(schemaRegistry={"url": "http://r",
                                                                      "basicAuthSecret": "A_B"}))


def test_avro_without_a_registry_is_refused_naming_each_field() -> None:
    source = {"name": "orders", "topic": "orders", "format": "avro"}
    query = QuerySpec.model_validate(query_spec(sources=[source], sql="SELECT id FROM orders",
                                                sink={"topic": "out", "format": "avro"}))
    problems = registry_problems(query, "shared", has_registry=False)
    assert [p.field for p in problems] == ["spec.sources[0].format", "spec.sink.format"]
    assert "QueryCluster 'shared' has no spec.schemaRegistry" in problems[0].message
    assert registry_problems(query, "shared", has_registry=True) == []
    assert registry_problems(QuerySpec.model_validate(query_spec()), "shared", has_registry=False) == []


def test_the_registrys_compatibility_answer_becomes_the_refusal_with_its_reason() -> None:
    assert incompatibility("out-value", {"is_compatible": True}) is None
    confluent = incompatibility("out-value", {"is_compatible": False, "messages": [
        "Incompatibility{type:TYPE_MISMATCH, location:/fields/0/type}", "{compatibility: 'BACKWARD'}"]})
    assert confluent is not None and "subject 'out-value'" in confluent
    assert "TYPE_MISMATCH" in confluent and "BACKWARD" in confluent
    apicurio = incompatibility("out-value", {"is_compatible": False, "reason": "reader type: STRING not "
                                             "compatible with writer type: LONG at /fields/0/type"})
    assert apicurio is not None and apicurio.endswith("at /fields/0/type")
    assert "no reason given" in str(incompatibility("s", {"is_compatible": False}))


def test_source_subjects_ahead_of_the_running_plan_are_reported_once() -> None:
    from sluice.core.formats.registry import describe_behind, newly_behind, source_schema_report
    from sluice.core.plan.model import RegistrySchema

    def schema(version: int) -> RegistrySchema:
        return RegistrySchema(subject="orders-value", schema_='"string"', id=version + 10, version=version)

    same = source_schema_report({"orders-value": schema(1)}, {"orders-value": schema(1)})
    assert [(s.pinned_version, s.latest_version, s.behind) for s in same] == [(1, 1, False)]
    ahead = source_schema_report({"orders-value": schema(1)}, {"orders-value": schema(2)})
    assert ahead[0].behind and ahead[0].for_storage() == {
        "subject": "orders-value", "pinnedVersion": 1, "pinnedId": 11, "latestVersion": 2, "latestId": 12}
    assert newly_behind(same, ahead) == ahead and newly_behind(ahead, ahead) == []
    assert "has version 2 (id 12); the running plan reads with version 1 (id 11)" in describe_behind(ahead[0])
    unknown = source_schema_report({"orders-value": schema(1)}, {})
    assert not unknown[0].behind and unknown[0].latest_version is None


def test_a_version_on_a_topic_of_its_own_registers_value_and_key_under_that_topics_subjects() -> None:
    from sluice.core.compiler import compile_query
    from sluice.operator.schemas import _wanted

    def keyed(sql: str, **sink: Any) -> Any:
        return compile_query(QuerySpec.model_validate(query_spec(
            sql=sql, sink={"topic": "out", "format": "avro", "key": ["customer"], "keyFormat": "avro",
                           "outputMode": "update", **sink})))

    running = keyed("SELECT customer, count(*) AS n FROM orders GROUP BY customer")
    new = keyed("SELECT cast(customer AS binary) AS customer, count(*) AS n FROM orders GROUP BY customer")
    plans = {"r": running, "n": new}
    value, key = _wanted(plans, "r", {"n": "out-v2"}, False), _wanted(plans, "r", {"n": "out-v2"}, True)
    assert [(w.plan_hash, w.schema.subject if w.schema else None, w.check) for w in value + key] == [
        ("r", "out-value", False), ("n", "out-v2-value", True),
        ("r", "out-key", False), ("n", "out-v2-key", True)]
    [_, new_key] = key
    assert new_key.schema is not None and new.sink.key_schema is not None
    assert new_key.schema.schema_ == new.sink.key_schema.schema_
    # the running version moved to out-v2 by a backfill, the next one in place there: the same key
    same = keyed("SELECT customer, count(*) AS orders FROM orders GROUP BY customer")
    key = _wanted({"r": running, "s": same}, "r", {"r": "out-v2", "s": "out-v2"}, True)
    assert [(w.schema.subject if w.schema else None, w.check) for w in key] == [
        ("out-v2-key", False), ("out-v2-key", False)]
    # a named keySubject stays as named on the versioned topic
    named = keyed("SELECT cast(customer AS binary) AS customer, count(*) AS n FROM orders GROUP BY customer",
                  keySubject="customers-key")
    [w] = _wanted({"n": named}, None, {"n": "out-v2"}, True)
    assert w.schema is not None and w.schema.subject == "customers-key"
