"""``sluice diff OLD NEW`` asks the platform's real schema registry (Apicurio, Confluent-compatible API)
about an avro sink's changed schema, as the admission webhook does: a compatible change (a nullable
field added) stays in place; an incompatible one (a field's type changed) under BACKWARD is ``reject``
with the registry's reason naming the subject; an incompatible key under FULL the same; without
``$SLUICE_SCHEMA_REGISTRY_URL`` the diff names the sink's field and fails. ``kubectl sluice diff``'s
check asks a replace with backfill under the versioned topic's subjects, value and avro key. Nothing
skips."""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from sluice.commands import diff
from sluice.commands.registry import URL_ENV
from sluice.core.compiler import compile_query
from sluice.core.plan.model import Plan
from sluice.core.spec import QuerySpec

from tests.support.registry_fixture import SchemaRegistry

pytestmark = pytest.mark.integration

SQL = "SELECT customer, amount FROM orders"
#: a column added (stateless: in place): a nullable field with a default, BACKWARD compatible
SQL_NAME = "SELECT customer, amount, upper(customer) AS name FROM orders"
#: amount: double -> string (in place): not BACKWARD compatible
SQL_AMOUNT_TEXT = "SELECT customer, cast(amount AS string) AS amount FROM orders"
BAND = "SELECT cast(amount AS int) AS band, count(*) AS orders FROM orders GROUP BY cast(amount AS int)"
#: the key column widened (int -> bigint): BACKWARD compatible, not FORWARD (so not FULL)
BAND_WIDENED = BAND.replace("SELECT cast(amount AS int) AS band",
                            "SELECT cast(cast(amount AS int) AS bigint) AS band")


def spec(topic: str, sql: str, **sink: Any) -> dict[str, Any]:
    columns = [{"name": "customer", "type": "string"}, {"name": "amount", "type": "double"}]
    return {"sources": [{"name": "orders", "topic": "orders", "schema": columns}],
            "sql": sql, "sink": {"topic": topic, "format": "avro", **sink}}


def write(path: Path, query: dict[str, Any]) -> str:
    path.write_text(json.dumps({"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
                                "metadata": {"name": "totals"}, "spec": query}))
    return str(path)


def running(registry: SchemaRegistry, query: dict[str, Any]) -> SchemaRegistryClient:
    """The old query's sink schemas registered, as the operator registers them at its rollout."""
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    plan = compile_query(QuerySpec.model_validate(query))
    for schema in (plan.sink.value_schema, plan.sink.key_schema):
        if schema is not None:
            client.register_schema(schema.subject, Schema(schema.schema_, "AVRO"))
    return client


def live_at_version_3(old_spec: dict[str, Any], new_spec: dict[str, Any]
                      ) -> tuple[Plan, Plan, dict[str, Any]]:
    """Both specs' plans, and the live query ``kubectl sluice diff`` reads: ``old_spec`` running as
    plan version 3 (a replace with backfill writes ``<topic>-v4``)."""
    old_plan = compile_query(QuerySpec.model_validate(old_spec))
    new_plan = compile_query(QuerySpec.model_validate(new_spec))
    live = {"spec": old_spec, "status": {"plan": {"hash": old_plan.hash, "version": 3,
                                                  "configMap": f"totals-plan-{old_plan.hash[:12]}"}}}
    return old_plan, new_plan, live


def run_diff(old: str, new: str, output: str, env: dict[str, str]) -> int:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(URL_ENV, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        return diff.run(argparse.Namespace(old=old, new=new, output=output))


def test_a_compatible_sink_change_stays_in_place_and_an_incompatible_one_is_rejected_with_the_reason(
        schema_registry: SchemaRegistry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"diff-{uuid.uuid4().hex[:8]}"
    old = write(tmp_path / "old.yaml", spec(topic, SQL))
    client = running(schema_registry, spec(topic, SQL))
    client.set_compatibility(f"{topic}-value", "BACKWARD")

    compatible = write(tmp_path / "name.yaml", spec(topic, SQL_NAME))
    assert run_diff(old, compatible, "json", schema_registry.env) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["category"], result["decision"]) == ("schema-evolution", "in-place")
    assert not any("incompatible" in r for r in result["reasons"])

    incompatible = write(tmp_path / "text.yaml", spec(topic, SQL_AMOUNT_TEXT))
    assert run_diff(old, incompatible, "json", schema_registry.env) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["decision"] == "reject" and result["category"] == "schema-evolution"
    reason = result["reasons"][0]
    prefix = (f"the sink's new Avro schema is incompatible with subject '{topic}-value' under its "
              "compatibility level, so it cannot be changed in place: ")
    assert reason.startswith(prefix), reason
    detail = reason[len(prefix):]
    assert detail != "no reason given" and "/fields/1" in detail, detail  # the registry's own words
    assert result["changes"]  # the classification's changes stay

    assert run_diff(old, incompatible, "text", schema_registry.env) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[:3] == [f"{old} -> {incompatible}", "category: schema-evolution", "decision: reject"]
    assert text[3:5] == ["reasons:", f"  - {reason}"]
    assert client.get_versions(f"{topic}-value") == [1]  # asked, never registered


def test_an_incompatible_avro_key_under_full_is_rejected_naming_the_key_subject(
        schema_registry: SchemaRegistry, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"diff-key-{uuid.uuid4().hex[:8]}"
    json_value = {"format": "json", "key": ["band"], "keyFormat": "avro", "outputMode": "update"}
    old = write(tmp_path / "old.yaml", spec(topic, BAND, **json_value))
    client = running(schema_registry, spec(topic, BAND, **json_value))
    client.set_compatibility(f"{topic}-key", "FULL")
    new = write(tmp_path / "new.yaml", spec(topic, BAND_WIDENED, **json_value))
    assert run_diff(old, new, "json", schema_registry.env) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["decision"] == "reject"
    assert result["reasons"][0].startswith(f"the sink's new Avro key schema is incompatible with subject "
                                           f"'{topic}-key' under its compatibility level")
    # under BACKWARD the same key change is compatible: in place
    client.set_compatibility(f"{topic}-key", "BACKWARD")
    assert run_diff(old, new, "json", schema_registry.env) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "in-place"


def test_a_changed_avro_sink_without_the_registry_url_names_the_field_and_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"diff-none-{uuid.uuid4().hex[:8]}"
    old = write(tmp_path / "old.yaml", spec(topic, SQL))
    new = write(tmp_path / "new.yaml", spec(topic, SQL_AMOUNT_TEXT))
    assert run_diff(old, new, "json", {}) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"{new}: spec.sink.format: the sink's new Avro schema goes under subject "
                            f"'{topic}-value': set {URL_ENV} to the schema registry's base URL to check "
                            "its compatibility here\n")
    # an avro sink whose schema does not change asks nothing: no registry needed
    same = write(tmp_path / "same.yaml", spec(topic, f"{SQL} WHERE amount > 0"))
    assert run_diff(old, same, "json", {}) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "in-place"


GROUPED = "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer"
#: a new grouping key (a replace) whose output the old subject refuses (customer: string -> double)
REGROUPED = "SELECT amount AS customer, count(*) AS total FROM orders GROUP BY amount"


def test_kubectl_diff_asks_under_the_versioned_subject_of_a_backfill_and_the_topics_otherwise(
        schema_registry: SchemaRegistry) -> None:
    """``kubectl sluice diff``'s check (``registry_verdict``): the live query's plan version is known, so
    a replace with backfill is asked under ``<topic>-v<N+1>-value``, as the webhook asks it."""
    from sluice.core.classify import classify
    from sluice.core.spec import UpgradePolicy
    from sluice.kubectl.diff import registry_verdict

    topic = f"kdiff-{uuid.uuid4().hex[:8]}"
    old_spec = spec(topic, GROUPED, outputMode="update")
    new_spec = spec(topic, REGROUPED, outputMode="update")
    client = running(schema_registry, old_spec)
    client.set_compatibility(f"{topic}-value", "BACKWARD")
    old_plan, new_plan, live = live_at_version_3(old_spec, new_spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(URL_ENV, schema_registry.url)
        backfill = UpgradePolicy.model_validate({"replaceStrategy": "backfill"})
        decision = classify(old_plan, new_plan, backfill)
        assert decision.decision == "replace"
        # <topic>-v4-value has no version yet: anything goes there
        assert registry_verdict(decision, live, new_spec, new_plan, old_plan, backfill) == decision
        hand_off = UpgradePolicy()
        verdict = registry_verdict(classify(old_plan, new_plan, hand_off), live, new_spec, new_plan,
                                   old_plan, hand_off)
    assert verdict.decision == "reject" and verdict.category == "topology"
    assert verdict.reasons[0].startswith(f"the sink's new Avro schema is incompatible with subject "
                                         f"'{topic}-value'")


def test_kubectl_diff_asks_about_an_avro_key_under_the_versioned_topics_key_subject(
        schema_registry: SchemaRegistry) -> None:
    """``keyFormat: avro``: a replace with backfill asks the key under ``<topic>-v<N+1>-key`` as the value
    under ``-value``, not under the old topic's ``<topic>-key`` (which would refuse it)."""
    from sluice.core.classify import classify
    from sluice.core.spec import UpgradePolicy
    from sluice.kubectl.diff import registry_verdict

    topic = f"kdiffkey-{uuid.uuid4().hex[:8]}"
    keyed = {"outputMode": "update", "key": ["customer"], "keyFormat": "avro"}
    old_spec = spec(topic, GROUPED, **keyed)
    new_spec = spec(topic, REGROUPED, **keyed)  # the key column customer: string -> double
    client = running(schema_registry, old_spec)
    client.set_compatibility(f"{topic}-key", "BACKWARD")
    old_plan, new_plan, live = live_at_version_3(old_spec, new_spec)
    backfill = UpgradePolicy.model_validate({"replaceStrategy": "backfill"})
    decision = classify(old_plan, new_plan, backfill)
    assert decision.decision == "replace"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(URL_ENV, schema_registry.url)
        # <topic>-v4-key has no version yet: anything goes there
        assert registry_verdict(decision, live, new_spec, new_plan, old_plan, backfill) == decision
        # once it holds a key the new one is not compatible with, the backfill is refused naming it
        assert old_plan.sink.key_schema is not None
        client.register_schema(f"{topic}-v4-key", Schema(old_plan.sink.key_schema.schema_, "AVRO"))
        client.set_compatibility(f"{topic}-v4-key", "BACKWARD")
        refused = registry_verdict(decision, live, new_spec, new_plan, old_plan, backfill)
    assert refused.decision == "reject"
    assert refused.reasons[0].startswith(f"the sink's new Avro key schema is incompatible with subject "
                                         f"'{topic}-v4-key'")
    assert client.get_versions(f"{topic}-key") == [1]  # the diff registers nothing
