"""The CRD models: what the operator accepts in StreamingQuery and QueryCluster objects."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError
from sluice.core.spec import QuerySpec
from sluice.crd import QueryCluster, QueryClusterSpec, StreamingQuery, StreamingQuerySpec

from tests.support import paths
from tests.support.operator_fixtures import cluster_spec, query_spec

REPO = paths.REPO


def test_example_manifest_parses() -> None:
    doc = yaml.safe_load((REPO / "examples" / "revenue.yaml").read_text())
    sq = StreamingQuery.model_validate(doc)
    assert sq.spec.deletion_policy == "Retain"
    assert sq.spec.suspend is False
    assert sq.spec.cluster_ref is None
    assert sq.status.phase is None


def test_query_part_drops_operator_fields() -> None:
    spec = StreamingQuerySpec.model_validate(query_spec(suspend=True, deletionPolicy="Delete",
                                                        restartNonce="x", clusterRef={"name": "c"}))
    query = spec.query()
    assert isinstance(query, QuerySpec)
    assert query.sql == spec.sql
    assert query.sink == spec.sink
    assert not hasattr(query, "suspend")


def test_operator_fields_do_not_change_the_query() -> None:
    a = StreamingQuerySpec.model_validate(query_spec()).query()
    b = StreamingQuerySpec.model_validate(query_spec(suspend=True, restartNonce="2")).query()
    assert a == b


@pytest.mark.parametrize("bad", [
    {"deletionPolicy": "Keep"},
    {"unknownField": 1},
    {"sql": ""},
    {"sources": []},
    {"resources": {"executors": -1}},
    {"resources": {"driver": {"requests": {"cpu": "lots"}}}},
])
def test_invalid_query_specs(bad: dict) -> None:
    with pytest.raises(ValidationError):
        StreamingQuerySpec.model_validate(query_spec(**bad))


def test_cluster_defaults() -> None:
    qc = QueryClusterSpec.model_validate(cluster_spec())
    assert qc.executors == 0
    assert qc.image is None
    assert qc.storage.size == "1Gi" and qc.storage.access_mode == "ReadWriteOnce"
    assert qc.upgrade.allow_replace is True
    assert qc.kafka.default_partitions == 1
    assert qc.driver.requests is not None


@pytest.mark.parametrize("bad", [
    {"serviceId": "Shop_1"},
    {"serviceId": ""},
    {"kafka": {"bootstrapServers": ""}},
    {"kafka": {"bootstrapServers": "k:9092", "sasl": {"mechanism": "PLAIN", "username": "inline"}}},
    {"executors": -1},
    {"storage": {"accessMode": "Sometimes"}},
])
def test_invalid_cluster_specs(bad: dict) -> None:
    with pytest.raises(ValidationError):
        QueryClusterSpec.model_validate(cluster_spec(**bad))


def test_secrets_only_by_reference() -> None:
    qc = QueryClusterSpec.model_validate(cluster_spec(kafka={
        "bootstrapServers": "k:9093",
        "sasl": {"mechanism": "SCRAM-SHA-512", "usernameSecret": {"name": "kafka", "key": "user"},
                 "passwordSecret": {"name": "kafka", "key": "password"}},
        "tls": {"caSecret": {"name": "kafka-ca", "key": "ca.crt"}},
    }))
    assert qc.kafka.sasl is not None and qc.kafka.sasl.password_secret.key == "password"


def test_full_object_round_trip() -> None:
    obj = {"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
           "metadata": {"name": "default"}, "spec": cluster_spec()}
    qc = QueryCluster.model_validate(obj)
    dumped = qc.model_dump(by_alias=True, exclude_none=True)
    assert dumped["spec"]["serviceId"] == "shop"
    assert dumped["apiVersion"] == "sluice.dev/v1alpha1"


def test_resources_merge() -> None:
    spec = StreamingQuerySpec.model_validate(query_spec(resources={"driver": {"limits": {"memory": "4Gi"}}}))
    qc = QueryClusterSpec.model_validate(cluster_spec())
    merged = qc.driver.merged(spec.resources.driver if spec.resources else None)
    assert merged.as_k8s() == {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}


@pytest.mark.parametrize("value", [-1, 100])
def test_standby_replicas_out_of_range_is_refused_naming_the_field(value: int) -> None:
    from sluice.core.manifest import validation_problems

    with pytest.raises(ValidationError) as info:
        StreamingQuerySpec.model_validate(query_spec(standbyReplicas=value))
    assert [p.field for p in validation_problems(info.value, "spec")] == ["spec.standbyReplicas"]
    with pytest.raises(ValidationError) as info:
        QueryClusterSpec.model_validate(cluster_spec(standbyReplicas=value))
    assert [p.field for p in validation_problems(info.value, "spec")] == ["spec.standbyReplicas"]


def test_standby_replicas_schema_bounds_and_override() -> None:
    from sluice.crd.generate import openapi_schema

    for model in (StreamingQuerySpec, QueryClusterSpec):
        prop = openapi_schema(model)["properties"]["standbyReplicas"]
        assert (prop["minimum"], prop["maximum"], prop["type"]) == (0, 3, "integer")
    assert StreamingQuerySpec.model_validate(query_spec()).standby_replicas is None  # cluster default
    assert StreamingQuerySpec.model_validate(query_spec(standbyReplicas=0)).standby_replicas == 0


def test_the_webhook_knows_every_engine_field_of_a_querycluster() -> None:
    """``sluice.core.admission.ENGINE_FIELDS`` (what the webhook warns about) names the QueryCluster
    fields the engine snapshot (``sluice.crd.engine.Engine``) is made of: one list per layer, kept
    equal here."""
    from sluice.core.admission import ENGINE_FIELDS
    from sluice.crd.engine import Engine

    kafka = {"kafka_bootstrap_servers": "kafka.bootstrapServers", "kafka_tls": "kafka.tls",
             "kafka_sasl": "kafka.sasl", "kafka_client_settings": "kafka.clientSettings",
             "lease_seconds": "lease.durationSeconds", "object_store": "storage.objectStore"}
    snapshot = {kafka.get(name, Engine.model_fields[name].alias or name) for name in Engine.model_fields
                if name != "template"}  # the operator's pod template version: no QueryCluster field
    assert snapshot == set(ENGINE_FIELDS)
