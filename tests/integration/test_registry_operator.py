"""Avro sources and sinks in the reconcile, against the real API server, Kafka and the platform's real
schema registry (Apicurio, Confluent-compatible API; global compatibility BACKWARD).

A new avro query pins the latest version of its source subject (a later version leaves the pinned plan
as it is), registers its sink schema at rollout and hands the id to the drivers
(``SLUICE_SINK_SCHEMA_ID``; an avro sink key's under ``<topic>-key``, ``SLUICE_SINK_KEY_SCHEMA_ID``); an
incompatible sink change, value or key, is refused with the registry's reason before anything is
registered or rolls, by the reconcile and by the admission webhook; a replace with backfill registers
value and key under the versioned topic's subjects (``<topic>-v2-value``, ``<topic>-v2-key``); a
registry that does not answer is a RegistryUnreachable condition and a retry. A protobuf query pins
its source subject compiled (descriptor and message), registers its sink schema as ``.proto`` text
and is refused an incompatible sink change under the registry's Protobuf rules.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from sluice.core.plan.model import KafkaSourceV1, Plan, RegistrySchema
from sluice.operator.env import Retry, Stop
from sluice.operator.reconcile import reconcile_query

from tests.support.drivers import DriverSide
from tests.support.registry_fixture import SchemaRegistry as Registry
from tests.support.world import World, closed_port_address

pytestmark = pytest.mark.integration

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": "double"},
]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"],
                                   {"name": "coupon", "type": ["null", "string"], "default": None}]}
SQL = "SELECT customer, count(*) AS orders, sum(amount) AS total FROM orders GROUP BY customer"


def client(registry: Registry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url, "timeout": 30})


def avro_world(w: World, registry: Registry, url: str | None = None) -> str:
    """The QueryCluster with the registry; ORDER_V1 registered under the source subject (returned)."""
    w.edit_cluster(schemaRegistry={"url": url or registry.url})
    subject = f"orders-{w.ns}-value"
    client(registry).register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))
    return subject


def running_avro_query(w: World, registry: Registry, **extra: Any) -> str:
    """:func:`avro_world` and an avro query reconciled twice (its plan pinned, its sink schema
    registered); the source subject."""
    subject = avro_world(w, registry)
    w.add_query(**avro_spec(w), **extra)
    reconcile_query(w.env, w.current())
    reconcile_query(w.env, w.current())
    return subject


def avro_spec(w: World, sql: str = SQL) -> dict[str, Any]:
    return {"sources": [{"name": "orders", "topic": f"orders-{w.ns}", "format": "avro"}], "sql": sql,
            "sink": {"topic": w.topic, "format": "avro", "key": ["customer"], "outputMode": "update"}}


def pinned_plan(w: World) -> Plan:
    cm = w.k.get("ConfigMap", w.ns, w.status()["plan"]["configMap"])
    assert cm is not None
    return Plan.from_json(cm["data"]["plan.json"])


def pinned_source(plan: Plan) -> RegistrySchema:
    """The registry schema the plan's source pinned."""
    step = plan.steps[0]
    assert isinstance(step, KafkaSourceV1) and step.value_schema is not None
    return step.value_schema


def driver_env(w: World) -> dict[str, Any]:
    [container] = w.deployment()["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_a_new_avro_query_pins_the_latest_schema_and_a_later_version_changes_nothing(
        world: World, schema_registry: Registry) -> None:
    w = world
    subject = avro_world(w, schema_registry)
    w.add_query(**avro_spec(w))
    assert reconcile_query(w.env, w.current()) == "Starting"
    plan = pinned_plan(w)
    latest = client(schema_registry).get_latest_version(subject)
    pinned = pinned_source(plan)
    assert (pinned.subject, pinned.id, pinned.version) == (subject, latest.schema_id, 1)
    assert [c.name for c in plan.steps[0].schema_] == ["order_id", "customer", "amount"]

    # the subject moves on: the running plan stays pinned (and no re-plan is offered for it)
    client(schema_registry).register_schema(subject, Schema(json.dumps(ORDER_V2), "AVRO"))
    before = w.status()["plan"]
    reconcile_query(w.env, w.current())
    after = w.status()["plan"]
    assert after["hash"] == before["hash"] and "replan" not in after
    assert pinned_source(pinned_plan(w)).version == 1
    # ... and the subject's new version is reported (once), not acted on
    v2 = client(schema_registry).get_latest_version(subject)
    assert w.status()["sourceSchemas"] == [{"subject": subject, "pinnedVersion": 1,
                                            "pinnedId": latest.schema_id, "latestVersion": 2,
                                            "latestId": v2.schema_id}]
    assert w.reasons().count("SourceSchemaUpdated") == 1
    reconcile_query(w.env, w.current())
    assert w.reasons().count("SourceSchemaUpdated") == 1

    # an edit compiles a new plan, which pins the subject's latest version
    reconcile_query(w.env, w.edit(sql=SQL + " HAVING count(*) > 0"))
    target = w.status()["rollout"]["targetConfigMap"]
    cm = w.k.get("ConfigMap", w.ns, target)
    assert cm is not None
    new_plan = Plan.from_json(cm["data"]["plan.json"])
    assert pinned_source(new_plan).version == 2
    assert [c.name for c in new_plan.steps[0].schema_][-1] == "coupon"


def test_the_sink_schema_is_registered_at_rollout_and_its_id_reaches_the_drivers(
        world: World, schema_registry: Registry) -> None:
    w = world
    running_avro_query(w, schema_registry)
    sink = pinned_plan(w).sink
    assert sink.value_schema is not None and sink.value_schema.subject == f"{w.topic}-value"
    registered = client(schema_registry).get_latest_version(f"{w.topic}-value")
    assert json.loads(registered.schema.schema_str) == json.loads(sink.value_schema.schema_)
    env = driver_env(w)
    assert env["SLUICE_SINK_SCHEMA_ID"] == str(registered.schema_id)
    assert env["SLUICE_SCHEMA_REGISTRY_URL"] == schema_registry.url
    # idempotent: another reconcile registers the same schema again, same id, no new version
    reconcile_query(w.env, w.current())
    assert client(schema_registry).get_versions(f"{w.topic}-value") == [1]
    assert driver_env(w)["SLUICE_SINK_SCHEMA_ID"] == str(registered.schema_id)
    # the QueryCluster's registry moves (here: another name of the same one): the drivers follow
    moved = schema_registry.url.replace("127.0.0.1", "localhost")
    w.edit_cluster(schemaRegistry={"url": moved})
    reconcile_query(w.env, w.current())
    assert driver_env(w)["SLUICE_SCHEMA_REGISTRY_URL"] == moved
    assert driver_env(w)["SLUICE_SINK_SCHEMA_ID"] == str(registered.schema_id)


def test_a_compatible_sink_change_rolls_and_an_incompatible_one_is_refused_with_the_registrys_reason(
        world: World, schema_registry: Registry) -> None:
    w = world
    running_avro_query(w, schema_registry)
    subject = f"{w.topic}-value"
    running = w.status()["plan"]["hash"]

    # total: double -> string is not BACKWARD compatible for a reader of the new schema
    incompatible = SQL.replace("sum(amount) AS total", "cast(sum(amount) AS string) AS total")
    with pytest.raises(Stop) as stopped:
        reconcile_query(w.env, w.edit(sql=incompatible))
    assert "incompatible with subject" in str(stopped.value) and "/fields/" in str(stopped.value)
    status = w.status()
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "SchemaIncompatible"
    assert status["plan"]["hash"] == running and "rollout" not in status
    assert client(schema_registry).get_versions(subject) == [1]  # nothing registered
    assert "SchemaIncompatible" in w.reasons()

    # a field added (nullable, default null) is compatible: registered, rolled out with its id
    compatible = SQL.replace("FROM orders", ", max(amount) AS biggest FROM orders")
    reconcile_query(w.env, w.edit(sql=compatible))
    status = w.status()
    assert status["rollout"]["step"] == "Verifying"
    assert next(c for c in status["conditions"] if c["type"] == "Degraded")["status"] == "False"
    assert client(schema_registry).get_versions(subject) == [1, 2]
    new_id = client(schema_registry).get_latest_version(subject).schema_id
    assert driver_env(w)["SLUICE_SINK_SCHEMA_ID"] == str(new_id)
    DriverSide(w.k.api, w.ns).take_over(status["rollout"]["targetHash"], batches=3)
    reconcile_query(w.env, w.current())
    assert w.status()["lastUpgrade"]["outcome"] == "Succeeded"


BAND = "SELECT cast(amount AS int) AS band, count(*) AS orders FROM orders GROUP BY cast(amount AS int)"
#: the key column widened (int -> bigint), the grouping as it was: in place; BACKWARD compatible for the
#: value, not FORWARD compatible (an old reader of int cannot read a long), which a FULL key subject needs
BAND_WIDENED = BAND.replace("SELECT cast(amount AS int) AS band",
                            "SELECT cast(cast(amount AS int) AS bigint) AS band")


def avro_key_spec(w: World, sql: str = SQL, key: str = "customer") -> dict[str, Any]:
    """:func:`avro_spec` whose sink writes its key as Avro too (``keyFormat: avro``: ``<topic>-key``)."""
    spec = avro_spec(w, sql)
    spec["sink"] = {**spec["sink"], "key": [key], "keyFormat": "avro"}
    return spec


def test_an_avro_sink_key_schema_is_registered_under_the_key_subject_and_its_id_reaches_the_drivers(
        world: World, schema_registry: Registry) -> None:
    w = world
    avro_world(w, schema_registry)
    w.add_query(**avro_key_spec(w))
    reconcile_query(w.env, w.current())
    reconcile_query(w.env, w.current())
    sink = pinned_plan(w).sink
    assert sink.key_schema is not None and sink.key_schema.subject == f"{w.topic}-key"
    assert sink.value_schema is not None and sink.value_schema.subject == f"{w.topic}-value"
    registry = client(schema_registry)
    key = registry.get_latest_version(f"{w.topic}-key")
    value = registry.get_latest_version(f"{w.topic}-value")
    assert json.loads(key.schema.schema_str) == json.loads(sink.key_schema.schema_)
    assert [f["name"] for f in json.loads(key.schema.schema_str)["fields"]] == ["customer"]
    env = driver_env(w)
    assert env["SLUICE_SINK_KEY_SCHEMA_ID"] == str(key.schema_id)
    assert env["SLUICE_SINK_SCHEMA_ID"] == str(value.schema_id) != env["SLUICE_SINK_KEY_SCHEMA_ID"]
    # idempotent: the same key schema again keeps its id and adds no version
    reconcile_query(w.env, w.current())
    assert registry.get_versions(f"{w.topic}-key") == [1]
    assert driver_env(w)["SLUICE_SINK_KEY_SCHEMA_ID"] == str(key.schema_id)


def test_an_avro_sink_key_alone_is_registered_for_a_json_value(
        world: World, schema_registry: Registry) -> None:
    w = world
    avro_world(w, schema_registry)
    spec = avro_key_spec(w)
    spec["sink"] = {k: v for k, v in spec["sink"].items() if k != "format"}  # the value in json
    w.add_query(**spec)
    reconcile_query(w.env, w.current())
    key = client(schema_registry).get_latest_version(f"{w.topic}-key")
    env = driver_env(w)
    assert env["SLUICE_SINK_KEY_SCHEMA_ID"] == str(key.schema_id) and "SLUICE_SINK_SCHEMA_ID" not in env
    assert env["SLUICE_SCHEMA_REGISTRY_URL"] == schema_registry.url
    assert f"{w.topic}-value" not in client(schema_registry).get_subjects()


def test_an_incompatible_sink_key_change_is_refused_with_the_registrys_reason_and_nothing_registered(
        world: World, schema_registry: Registry) -> None:
    w = world
    avro_world(w, schema_registry)
    w.add_query(**avro_key_spec(w, BAND, key="band"))
    reconcile_query(w.env, w.current())
    registry = client(schema_registry)
    key_subject, value_subject = f"{w.topic}-key", f"{w.topic}-value"
    registry.set_compatibility(key_subject, "FULL")  # keys that old and new consumers both read
    running = w.status()["plan"]["hash"]
    drivers = driver_env(w)

    with pytest.raises(Stop) as stopped:
        reconcile_query(w.env, w.edit(sql=BAND_WIDENED))
    said = str(stopped.value)
    assert said.startswith(
        f"the sink's new Avro key schema is incompatible with subject '{key_subject}'"), said
    assert "/fields/0/type" in said  # the registry's reason, naming the key's field
    status = w.status()
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "SchemaIncompatible"
    assert degraded["message"] == said
    assert status["plan"]["hash"] == running and "rollout" not in status
    assert "SchemaIncompatible" in w.reasons()
    # nothing half-applied: the value's compatible change is not registered either, the drivers unchanged
    assert registry.get_versions(key_subject) == [1] and registry.get_versions(value_subject) == [1]
    assert driver_env(w) == drivers

    # the key subject's level relaxed to BACKWARD by its owner: the same edit rolls out with both new ids
    registry.set_compatibility(key_subject, "BACKWARD")
    reconcile_query(w.env, w.current())
    assert w.status()["rollout"]["step"] == "Verifying"
    assert registry.get_versions(key_subject) == [1, 2] and registry.get_versions(value_subject) == [1, 2]
    new_key = registry.get_latest_version(key_subject)
    assert driver_env(w)["SLUICE_SINK_KEY_SCHEMA_ID"] == str(new_key.schema_id)


def test_an_unreachable_registry_is_a_condition_and_a_retry_not_a_half_applied_rollout(
        world: World, schema_registry: Registry) -> None:
    w = world
    avro_world(w, schema_registry, url=f"http://{closed_port_address()}/apis/ccompat/v7")
    w.add_query(**avro_spec(w))
    with pytest.raises(Retry) as retried:
        reconcile_query(w.env, w.current())
    assert "schema registry" in str(retried.value) and "unreachable" in str(retried.value)
    status = w.status()
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "RegistryUnreachable"
    assert "plan" not in status and w.of_kind("Deployment") == []
    assert "RegistryUnreachable" in w.reasons()
    # the registry answers again: the query starts
    w.edit_cluster(schemaRegistry={"url": schema_registry.url})
    assert reconcile_query(w.env, w.current()) == "Starting"


def test_avro_without_a_registry_in_the_cluster_names_the_fields(world: World) -> None:
    w = world
    w.add_query(**avro_spec(w))
    with pytest.raises(Stop) as stopped:
        reconcile_query(w.env, w.current())
    assert "spec.sources[0].format" in str(stopped.value) and "spec.sink.format" in str(stopped.value)
    degraded = next(c for c in w.status()["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "InvalidSpec" and "has no spec.schemaRegistry" in degraded["message"]


@pytest.fixture
def webhook_env(world: World) -> Iterator[World]:
    """The admission handlers configured with this world's Env (restored afterwards)."""
    from sluice.operator.handlers import _kopf

    before = _kopf._ENV_FACTORY
    _kopf.configure(lambda: world.env)
    try:
        yield world
    finally:
        _kopf._ENV_FACTORY, _kopf._ENV = before, None


def admit(operation: str, new: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """The webhook's answer (kopf's AdmissionError on refusal), its warnings otherwise."""
    from sluice.operator.handlers.admission import validate_query

    warnings: list[str] = []
    validate_query(body=new, warnings=warnings, operation=operation, old=old, new=new)
    return warnings


def test_the_webhook_reads_the_registry_and_refuses_an_incompatible_sink_change(
        webhook_env: World, schema_registry: Registry) -> None:
    import kopf

    w = webhook_env
    running_avro_query(w, schema_registry)
    live = w.current()

    incompatible = json.loads(json.dumps(live))
    incompatible["spec"]["sql"] = SQL.replace("sum(amount) AS total", "cast(sum(amount) AS string) AS total")
    with pytest.raises(kopf.AdmissionError) as refused:
        admit("UPDATE", incompatible, live)
    assert "incompatible with subject" in str(refused.value) and "/fields/" in str(refused.value)

    compatible = json.loads(json.dumps(live))
    compatible["spec"]["sql"] = SQL.replace("FROM orders", ", max(amount) AS biggest FROM orders")
    admit("UPDATE", compatible, live)  # allowed (in place: schema-evolution warnings)
    assert client(schema_registry).get_versions(f"{w.topic}-value") == [1]  # the webhook registers nothing

    unknown = json.loads(json.dumps(live))
    unknown["metadata"] = {"name": "other", "namespace": w.ns}
    unknown["spec"]["sources"][0]["topic"] = f"nothing-{w.ns}"
    warnings = admit("CREATE", unknown)
    assert any("not compiled here: the operator compiles the query" in text for text in warnings), warnings


def test_the_webhook_refuses_an_incompatible_sink_key_change_with_the_registrys_reason(
        webhook_env: World, schema_registry: Registry) -> None:
    import kopf

    w = webhook_env
    avro_world(w, schema_registry)
    w.add_query(**avro_key_spec(w, BAND, key="band"))
    reconcile_query(w.env, w.current())
    registry = client(schema_registry)
    key_subject = f"{w.topic}-key"
    registry.set_compatibility(key_subject, "FULL")
    live = w.current()

    widened = json.loads(json.dumps(live))
    widened["spec"]["sql"] = BAND_WIDENED  # the value's change is compatible (BACKWARD), the key's is not
    with pytest.raises(kopf.AdmissionError) as refused:
        admit("UPDATE", widened, live)
    said = str(refused.value)
    assert said.startswith(
        f"the sink's new Avro key schema is incompatible with subject '{key_subject}'"), said
    assert "/fields/0/type" in said
    assert registry.get_versions(key_subject) == [1] and registry.get_versions(f"{w.topic}-value") == [1]

    # a compatible key change (another key column: the record gains a nullable field) is admitted
    more = json.loads(json.dumps(live))
    more["spec"]["sink"]["key"] = ["band", "orders"]
    admit("UPDATE", more, live)
    # ... and so is the widening once the key subject's level allows it; the webhook registers nothing
    registry.set_compatibility(key_subject, "BACKWARD")
    admit("UPDATE", widened, live)
    assert registry.get_versions(key_subject) == [1]


def test_sluice_plan_compiles_an_avro_query_with_the_registry_of_the_environment(
        schema_registry: Registry, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice.commands import plan as plan_command
    from sluice.commands.registry import URL_ENV

    subject = f"cli-orders-{tmp_path.name}-value"
    client(schema_registry).register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))
    manifest = tmp_path / "q.yaml"
    manifest.write_text(json.dumps({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery", "metadata": {"name": "q"},
        "spec": {"sources": [{"name": "orders", "topic": "orders", "format": "avro", "subject": subject}],
                 "sql": SQL, "sink": {"topic": "out", "format": "avro", "key": ["customer"],
                                      "outputMode": "update"}}}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(URL_ENV, schema_registry.url)
        assert plan_command.run(argparse.Namespace(file=str(manifest), output="json")) == 0
    plan = Plan.from_json(capsys.readouterr().out)
    assert pinned_source(plan).subject == subject and pinned_source(plan).version == 1


def test_a_rollback_of_an_avro_query_compiles_the_kept_query_with_its_pinned_schema(
        world: World, schema_registry: Registry) -> None:
    from sluice.operator.rollback_request import prepare

    w = world
    subject = running_avro_query(w, schema_registry)
    first = w.status()["plan"]["hash"]
    reconcile_query(w.env, w.edit(sql=SQL + " HAVING count(*) > 1"))
    DriverSide(w.k.api, w.ns).take_over(w.status()["rollout"]["targetHash"], batches=3)
    reconcile_query(w.env, w.current())
    assert w.status()["plan"]["hash"] != first
    # the subject gains a version meanwhile: going back still gives back the first plan
    client(schema_registry).register_schema(subject, Schema(json.dumps(ORDER_V2), "AVRO"))
    done = prepare(w.k, w.current(), compile_query=w.env.compile)
    assert done.target == first and done.new_hash == first  # the kept plan, schema and all

    # the spec patched back: the reconcile compiles it with the schema the first plan pinned
    reconcile_query(w.env, w.edit(**done.patch))
    assert w.status()["rollout"]["targetHash"] == first
    cm = w.k.get("ConfigMap", w.ns, w.status()["rollout"]["targetConfigMap"])
    assert cm is not None
    assert pinned_source(Plan.from_json(cm["data"]["plan.json"])).version == 1


def test_an_engine_upgrade_keeps_the_pinned_source_schema(world: World, schema_registry: Registry) -> None:
    from sluice.operator.waves import roll_fleet

    w = world
    subject = avro_world(w, schema_registry)
    w.add_query(**avro_spec(w))
    reconcile_query(w.env, w.current())
    status = w.status()
    DriverSide(w.k.api, w.ns).take_over(status["plan"]["hash"], batches=5, engine=status["engine"]["digest"])
    client(schema_registry).register_schema(subject, Schema(json.dumps(ORDER_V2), "AVRO"))
    w.edit_cluster(sparkVersion="4.4.0")  # a new Spark line: the plan is compiled again, for it
    cluster = w.k.get("QueryCluster", w.ns, "default")
    assert cluster is not None
    roll_fleet(w.env, cluster)
    reconcile_query(w.env, w.current())
    rollout = w.status()["rollout"]
    cm = w.k.get("ConfigMap", w.ns, rollout["targetConfigMap"])
    assert cm is not None
    target = Plan.from_json(cm["data"]["plan.json"])
    assert target.spark_version == "4.4.0"
    assert pinned_source(target).version == 1  # not the subject's version 2: the user changed nothing


def test_a_registry_that_never_answers_does_not_hold_the_webhook_past_its_timeout(webhook_env: World) -> None:
    import socket
    import time

    w = webhook_env
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        w.edit_cluster(schemaRegistry={"url": f"http://127.0.0.1:{silent.getsockname()[1]}"})
        new = {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
               "metadata": {"name": "totals", "namespace": w.ns}, "spec": avro_spec(w)}
        started = time.monotonic()
        warnings = admit("CREATE", new)
        took = time.monotonic() - started
    assert any("not compiled here" in text and "ReadTimeout" in text for text in warnings), warnings
    assert took < 5.0  # the API server waits 10 s (timeoutSeconds) for the whole answer


def test_a_replace_with_backfill_registers_under_the_versioned_topics_subject(
        world: World, schema_registry: Registry) -> None:
    w = world
    running_avro_query(w, schema_registry, upgrade={"replaceStrategy": "backfill"})
    # a new grouping key (a replace) whose output the old subject would refuse (total: double -> string)
    sql = "SELECT order_id, cast(sum(amount) AS string) AS total FROM orders GROUP BY order_id"
    reconcile_query(w.env, w.edit(sql=sql, sink={"topic": w.topic, "format": "avro", "key": ["order_id"],
                                                 "outputMode": "update"}))
    status = w.status()
    versioned = f"{w.topic}-v2"
    assert status["rollout"]["step"] == "Backfilling" and status["rollout"]["outputTopic"] == versioned
    assert client(schema_registry).get_versions(f"{w.topic}-value") == [1]
    registered = client(schema_registry).get_latest_version(f"{versioned}-value")
    [container] = w.deployment("backfill")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SLUICE_SINK_SCHEMA_ID"] == str(registered.schema_id)
    assert env["SLUICE_OUTPUT_TOPIC"] == versioned


def test_a_replace_with_backfill_registers_the_avro_key_under_the_versioned_topics_key_subject(
        world: World, schema_registry: Registry) -> None:
    """``keyFormat: avro``: the key follows the versioned topic as the value does, ``<topic>-v2-key``
    (TopicNameStrategy), and its id there reaches the backfill's drivers; ``<topic>-key`` keeps the
    running version's key only."""
    w = world
    avro_world(w, schema_registry)
    sink = {"topic": w.topic, "format": "avro", "key": ["customer"], "keyFormat": "avro",
            "outputMode": "update"}
    w.add_query(**{**avro_spec(w), "sink": sink}, upgrade={"replaceStrategy": "backfill"})
    reconcile_query(w.env, w.current())
    reconcile_query(w.env, w.current())
    registry = client(schema_registry)
    assert registry.get_versions(f"{w.topic}-key") == [1]
    old_key = registry.get_latest_version(f"{w.topic}-key")
    # a new grouping key (a replace): the key record now has order_id, not customer
    sql = "SELECT order_id, cast(sum(amount) AS string) AS total FROM orders GROUP BY order_id"
    reconcile_query(w.env, w.edit(sql=sql, sink={**sink, "key": ["order_id"]}))
    status = w.status()
    versioned = f"{w.topic}-v2"
    assert status["rollout"]["step"] == "Backfilling" and status["rollout"]["outputTopic"] == versioned
    assert registry.get_versions(f"{w.topic}-key") == [1]  # not under the old topic's key subject
    assert registry.get_latest_version(f"{w.topic}-key").schema_id == old_key.schema_id
    key = registry.get_latest_version(f"{versioned}-key")
    assert "order_id" in key.schema.schema_str and "customer" not in key.schema.schema_str
    value = registry.get_latest_version(f"{versioned}-value")
    [container] = w.deployment("backfill")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SLUICE_SINK_KEY_SCHEMA_ID"] == str(key.schema_id)
    assert env["SLUICE_SINK_SCHEMA_ID"] == str(value.schema_id)
    assert env["SLUICE_OUTPUT_TOPIC"] == versioned


ORDER_PROTO = ('syntax = "proto3";\npackage shop;\n'
               "message Order { string order_id = 1; string customer = 2; double amount = 3; }\n")


def test_a_protobuf_query_pins_the_compiled_schema_registers_its_sink_and_refuses_an_incompatible_change(
        world: World, schema_registry: Registry) -> None:
    from sluice.core.formats import protobuf

    w = world
    w.edit_cluster(schemaRegistry={"url": schema_registry.url})
    subject = f"orders-{w.ns}-value"
    source_id = client(schema_registry).register_schema(subject, Schema(ORDER_PROTO, "PROTOBUF"))
    spec = avro_spec(w)
    spec["sources"][0]["format"] = "protobuf"
    spec["sink"]["format"] = "protobuf"
    w.add_query(**spec)
    reconcile_query(w.env, w.current())
    reconcile_query(w.env, w.current())
    plan = pinned_plan(w)
    pinned = pinned_source(plan)
    assert (pinned.schema_type, pinned.id, pinned.message) == ("PROTOBUF", source_id, "shop.Order")
    assert pinned.descriptor is not None
    assert [c.name for c in protobuf.columns(pinned.descriptor)] == ["order_id", "customer", "amount"]
    sink = plan.sink.value_schema
    assert sink is not None and sink.schema_type == "PROTOBUF"
    registered = client(schema_registry).get_latest_version(f"{w.topic}-value")
    assert registered.schema.schema_type == "PROTOBUF" and registered.schema.schema_str == sink.schema_
    assert driver_env(w)["SLUICE_SINK_SCHEMA_ID"] == str(registered.schema_id)

    # total: double -> string changes a field's type: the registry's Protobuf rules refuse it
    running = w.status()["plan"]["hash"]
    incompatible = SQL.replace("sum(amount) AS total", "cast(sum(amount) AS string) AS total")
    with pytest.raises(Stop) as stopped:
        reconcile_query(w.env, w.edit(sql=incompatible))
    assert str(stopped.value).startswith(f"the sink's new Protobuf schema is incompatible with subject "
                                         f"'{w.topic}-value'")
    assert w.status()["plan"]["hash"] == running and "rollout" not in w.status()
    assert client(schema_registry).get_versions(f"{w.topic}-value") == [1]  # nothing registered
