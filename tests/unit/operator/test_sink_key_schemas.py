"""An avro sink key in the operator: its schema registered under ``<topic>-key`` at rollout beside the
value's (a fake registry), a changed key schema the subject refuses stopping the rollout with the
registry's reason, and the id reaching the drivers (``SLUICE_SINK_KEY_SCHEMA_ID``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from sluice.core.compiler import compile_query
from sluice.core.plan.model import Plan, RegistrySchema
from sluice.core.spec import QuerySpec
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec
from sluice.operator import schemas
from sluice.operator.builders.driver import registry_env
from sluice.operator.env import Stop

from tests.support.operator_fixtures import cluster_spec, context, query_spec

REGISTRY = {"url": "http://registry:8080/apis/ccompat/v7"}


@dataclass
class FakeRegistry:
    url: str = REGISTRY["url"]
    refuse: set[str] = field(default_factory=set)
    registered: dict[tuple[str, str], int] = field(default_factory=dict)

    def latest(self, subject: str) -> RegistrySchema:
        raise AssertionError("not asked")

    def register(self, subject: str, schema: str) -> int:
        return self.registered.setdefault((subject, schema), 100 + len(self.registered))

    def compatibility(self, subject: str, schema: str) -> Mapping[str, Any] | None:
        if subject in self.refuse:
            return {"is_compatible": False, "messages": ["reader type: STRING not compatible with LONG"]}
        return {"is_compatible": True}


def spec(key_type: str = "customer") -> dict[str, Any]:
    sql = ("SELECT customer, sum(amount) AS total FROM orders GROUP BY customer" if key_type == "customer"
           else "SELECT cast(customer AS int) AS customer, sum(amount) AS total FROM orders "
                "GROUP BY customer")
    return query_spec(sql=sql, sink={"topic": "totals", "key": ["customer"], "keyFormat": "avro",
                                     "outputMode": "update"})


def plan(query: dict[str, Any]) -> Plan:
    return compile_query(QuerySpec.model_validate(query))


def ids(registry: FakeRegistry, plans: dict[str, Plan], running: str | None,
        key: bool) -> dict[str, int | None]:
    run = SimpleNamespace(ns="shop", env=SimpleNamespace(registry=lambda ns, settings: registry))
    cluster = QueryClusterSpec.model_validate(cluster_spec(schemaRegistry=REGISTRY))
    return schemas.sink_schema_ids(run, StreamingQuerySpec.model_validate(spec()), cluster,  # type: ignore[arg-type]
                                   "default", plans, running, 0, key=key)


def test_the_key_schema_is_registered_under_the_key_subject() -> None:
    registry, p = FakeRegistry(), plan(spec())
    assert schemas.uses_avro(p)
    assert ids(registry, {p.hash: p}, None, key=False) == {p.hash: None}  # a json value
    assert registry.registered == {}
    found = ids(registry, {p.hash: p}, None, key=True)
    [(subject, text)] = registry.registered
    assert subject == "totals-key" and p.sink.key_schema is not None and text == p.sink.key_schema.schema_
    assert found == {p.hash: registry.registered[(subject, text)]}


def test_an_incompatible_key_schema_change_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(schemas, "_problem", lambda run, spec, reason, message, *a: said.append(message))
    old, new = plan(spec()), plan(spec("int"))
    assert old.sink.key_schema != new.sink.key_schema
    with pytest.raises(Stop):
        ids(FakeRegistry(refuse={"totals-key"}), {old.hash: old, new.hash: new}, old.hash, key=True)
    assert said == ["the sink's new Avro key schema is incompatible with subject 'totals-key' under its "
                    "compatibility level, so it cannot be changed in place: reader type: STRING not "
                    "compatible with LONG"]


def test_the_key_schema_id_reaches_the_drivers() -> None:
    ctx = context(cluster=cluster_spec(schemaRegistry=REGISTRY), sink_schema_ids={"h": None},
                  sink_key_schema_ids={"h": 7})
    env = {e["name"]: e.get("value") for e in registry_env(ctx, "h")}
    assert env["SLUICE_SINK_KEY_SCHEMA_ID"] == "7" and "SLUICE_SINK_SCHEMA_ID" not in env
    from sluice_runtime.avro import AvroSettings

    assert AvroSettings.from_env({k: v for k, v in env.items() if v is not None}).sink_key_schema_id == 7
