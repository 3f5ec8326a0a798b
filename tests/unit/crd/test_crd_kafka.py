"""``spec.kafka`` of a QueryCluster: allow-listed client settings and the SASL mechanisms' credentials,
refused with the field's path by the model (so the webhook and the reconcile say the same), and the
client settings pinned in the engine without moving the digest of a cluster that has none."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sluice.core.admission import SpecModels, Verdict, review_cluster
from sluice.core.manifest import validation_problems
from sluice.crd import QueryCluster, QueryClusterSpec, StreamingQuerySpec
from sluice.crd.generate import crd_for

from tests.support.operator_fixtures import cluster_spec

MODELS = SpecModels(query=StreamingQuerySpec, cluster=QueryClusterSpec)
SECRET = {"name": "kafka", "key": "k"}
SETTINGS = {"consumer": {"client.rack": "eu-west-1a", "fetch.min.bytes": "65536"},
            "producer": {"linger.ms": "10", "compression.type": "zstd"},
            "admin": {"request.timeout.ms": "20000"}}


def kafka(**fields: Any) -> dict[str, Any]:
    return cluster_spec(kafka={"bootstrapServers": "k:9092", **fields})


def refused(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as info:
        QueryClusterSpec.model_validate(spec)
    return [f"{p.field}: {p.message}" for p in validation_problems(info.value, "spec")]


def test_client_settings_are_accepted_as_written() -> None:
    spec = QueryClusterSpec.model_validate(kafka(clientSettings=SETTINGS))
    assert spec.kafka.client_settings is not None
    assert spec.kafka.client().librdkafka("producer") == {"compression.type": "zstd", "linger.ms": "10"}
    assert spec.kafka.client().spark("consumer") == {"kafka.client.rack": "eu-west-1a",
                                                     "kafka.fetch.min.bytes": "65536"}


def test_owned_and_unknown_settings_are_refused_naming_the_path() -> None:
    problems = refused(kafka(clientSettings={
        "producer": {"transactional.id": "mine", "linger.ms": "10"},
        "consumer": {"group.id": "g", "sasl.mechanism": "PLAIN", "fetch.wait.max.ms": "5"},
    }))
    assert problems[:3] == [
        "spec.kafka.clientSettings.consumer.group.id: owned by the operator: derived from the query's "
        "identity",
        "spec.kafka.clientSettings.consumer.sasl.mechanism: owned by the operator: spec.kafka.sasl",
        "spec.kafka.clientSettings.consumer.fetch.wait.max.ms: not an allowed Kafka client setting (allowed "
        "for consumer: client.rack, fetch.min.bytes, fetch.max.wait.ms, fetch.max.bytes, "
        "max.partition.fetch.bytes, max.poll.records, check.crcs, default.api.timeout.ms, "
        "receive.buffer.bytes, "
        "send.buffer.bytes, request.timeout.ms, retry.backoff.ms, reconnect.backoff.ms, "
        "reconnect.backoff.max.ms, connections.max.idle.ms, metadata.max.age.ms, "
        "socket.connection.setup.timeout.ms, socket.connection.setup.timeout.max.ms, client.dns.lookup)",
    ]
    assert problems[3] == ("spec.kafka.clientSettings.producer.transactional.id: owned by the operator: "
                           "derived from the query's identity")
    assert refused(kafka(clientSettings={"admin": {"retry.backoff.ms": 100}})) == [
        "spec.kafka.clientSettings.admin.retry.backoff.ms: Input should be a valid string"]
    assert refused(kafka(clientSettings={"producer": {"acks": "all"}})) == [
        "spec.kafka.clientSettings.producer.acks: owned by the operator: the sink's delivery decides"]


def test_the_webhook_refuses_in_the_same_words() -> None:
    def obj(spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
                "metadata": {"name": "default", "namespace": "shop", "generation": 1}, "spec": spec}

    assert review_cluster("CREATE", obj(kafka(clientSettings=SETTINGS)), None, models=MODELS) == Verdict(True)
    verdict = review_cluster("CREATE", obj(kafka(clientSettings={"producer": {"transactional.id": "x"}})),
                             None, models=MODELS)
    assert verdict == Verdict(False, "spec.kafka.clientSettings.producer.transactional.id: owned by the "
                              "operator: derived from the query's identity", code=422)
    verdict = review_cluster("CREATE", obj(kafka(sasl={"mechanism": "OAUTHBEARER"})), None, models=MODELS)
    assert verdict == Verdict(False, "spec.kafka.sasl.tokenSecret: required with mechanism OAUTHBEARER "
                              "(or tokenFile)", code=422)


@pytest.mark.parametrize(("sasl", "expected"), [
    ({"mechanism": "PLAIN"}, ["spec.kafka.sasl.usernameSecret: required with mechanism PLAIN",
                              "spec.kafka.sasl.passwordSecret: required with mechanism PLAIN"]),
    ({"mechanism": "SCRAM-SHA-512", "usernameSecret": SECRET, "passwordSecret": SECRET,
      "tokenSecret": SECRET},
     ["spec.kafka.sasl.tokenSecret: only with mechanism OAUTHBEARER"]),
    ({"mechanism": "OAUTHBEARER"}, ["spec.kafka.sasl.tokenSecret: required with mechanism OAUTHBEARER "
                                    "(or tokenFile)"]),
    ({"mechanism": "OAUTHBEARER", "tokenSecret": SECRET, "tokenFile": "/t"},
     ["spec.kafka.sasl.tokenFile: set together with tokenSecret: exactly one of them"]),
    ({"mechanism": "OAUTHBEARER", "tokenFile": "/t", "passwordSecret": SECRET},
     ["spec.kafka.sasl.passwordSecret: not used with mechanism OAUTHBEARER (it takes tokenSecret or "
      "tokenFile)"]),
    ({"mechanism": "OAUTHBEARER", "tokenFile": "token"},
     ["spec.kafka.sasl.tokenFile: String should match pattern '^/'"]),
])
def test_each_mechanism_needs_its_credentials(sasl: dict[str, Any], expected: list[str]) -> None:
    assert refused(kafka(sasl=sasl)) == expected


@pytest.mark.parametrize("sasl", [
    {"mechanism": "SCRAM-SHA-256", "usernameSecret": SECRET, "passwordSecret": SECRET},
    {"mechanism": "OAUTHBEARER", "tokenSecret": SECRET},
    {"mechanism": "OAUTHBEARER", "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
])
def test_complete_credentials_are_accepted(sasl: dict[str, Any]) -> None:
    assert QueryClusterSpec.model_validate(kafka(sasl=sasl)).kafka.sasl is not None


def test_the_crd_schema_has_the_new_fields() -> None:
    root = crd_for(QueryCluster)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    kafka_schema = root["properties"]["spec"]["properties"]["kafka"]["properties"]
    producer = kafka_schema["clientSettings"]["properties"]["producer"]
    assert producer["additionalProperties"] == {"type": "string"}
    assert kafka_schema["sasl"]["required"] == ["mechanism"]
    assert "OAUTHBEARER" in kafka_schema["sasl"]["properties"]["mechanism"]["enum"]


@pytest.mark.parametrize("empty", [None, {}, {"consumer": {}, "producer": {}}])
def test_no_client_settings_leave_the_engine_digest_as_it_was(empty: dict[str, Any] | None) -> None:
    plain = QueryClusterSpec.model_validate(kafka()).engine("img")
    fields = {} if empty is None else {"clientSettings": empty}
    engine = QueryClusterSpec.model_validate(kafka(**fields)).engine("img")
    assert "kafkaClientSettings" not in engine.canonical()
    assert engine.compute_digest() == plain.compute_digest()


def test_client_settings_are_pinned_in_the_engine() -> None:
    base = QueryClusterSpec.model_validate(kafka())
    spec = QueryClusterSpec.model_validate(kafka(clientSettings={**SETTINGS, "admin": {}}))
    engine = spec.engine("img")
    assert engine.canonical()["kafkaClientSettings"] == {"consumer": SETTINGS["consumer"],
                                                         "producer": SETTINGS["producer"]}
    assert engine.compute_digest() != base.engine("img").compute_digest()
    again = type(engine).model_validate(engine.record())
    assert again.compute_digest() == engine.compute_digest()
    # back on a cluster (what the builders read): the pinned settings, not the cluster's current ones
    assert base.with_engine(engine).kafka.client() == spec.kafka.client()
    assert spec.with_engine(base.engine("img")).kafka.client().is_empty()
    assert engine.facts().workload["kafkaClientSettings.producer.linger.ms"] == "10"
