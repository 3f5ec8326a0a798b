"""Operator process pieces: kopf error translation, registration, logs, metrics, Kafka settings.

Lease leader election talks to the API server: see tests/integration/test_reconcile_real.py.
"""

from __future__ import annotations

import json
import logging

import kopf
import pytest
from prometheus_client import CollectorRegistry
from sluice.operator.env import Env, Retry, Stop
from sluice.operator.kube import Kube, KubeError
from sluice.operator.metrics import OperatorMetrics


def test_errors_become_kopf_errors() -> None:
    from sluice.operator.handlers import _kopf

    # no API call happens here: the client is never connected
    _kopf.configure(lambda: Env(kube=Kube(None), metrics=OperatorMetrics(CollectorRegistry())))
    with pytest.raises(kopf.TemporaryError) as temp:
        with _kopf.kopf_errors("StreamingQuery", "reconcile"):
            raise Retry("cluster missing", 40)
    assert temp.value.delay == 40
    with pytest.raises(kopf.PermanentError):
        with _kopf.kopf_errors("StreamingQuery", "reconcile"):
            raise Stop("bad sql")
    with pytest.raises(kopf.TemporaryError):
        with _kopf.kopf_errors("StreamingQuery", "reconcile"):
            raise KubeError(409, {}, "PUT")


def test_registry_has_one_handler_per_cause() -> None:
    from sluice.operator.main import build_registry

    registry = build_registry()
    ids = {h.id.split("/")[0] for h in registry._changing.get_all_handlers()}  # type: ignore[attr-defined]
    assert {"reconcile-create", "reconcile-update", "reconcile-resume", "finalize", "cluster-create",
            "cluster-update", "cluster-resume"} <= ids


def test_json_logs() -> None:
    from sluice.commands.operator import JsonFormatter

    record = logging.LogRecord("sluice.operator", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    out = json.loads(JsonFormatter().format(record))
    assert out["message"] == "hello x" and out["level"] == "info" and out["logger"] == "sluice.operator"


def test_metrics_track_phases() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.phase("ns", "a", "Starting")
    m.phase("ns", "a", "Running")
    m.phase("ns", "b", "Running")
    assert m.queries.labels(phase="Running")._value.get() == 2
    assert m.queries.labels(phase="Starting")._value.get() == 0
    m.phase("ns", "a", None)
    assert m.queries.labels(phase="Running")._value.get() == 1
    assert m.transitions.labels(from_phase="Starting", to_phase="Running")._value.get() == 1


def test_kafka_admin_config_from_secrets() -> None:
    from sluice.crd.querycluster import KafkaSettings
    from sluice.operator.kafka_admin import admin_config, sink_topic_settings

    plain = KafkaSettings.model_validate({"bootstrapServers": "k:9092"})
    conf = admin_config(plain)
    assert conf["bootstrap.servers"] == "k:9092" and "security.protocol" not in conf
    secured = KafkaSettings.model_validate({
        "bootstrapServers": "k:9093", "defaultPartitions": 6, "defaultReplicationFactor": 3,
        "tls": {"caSecret": {"name": "ca", "key": "ca.crt"}},
        "sasl": {"mechanism": "SCRAM-SHA-512", "usernameSecret": {"name": "s", "key": "u"},
                 "passwordSecret": {"name": "s", "key": "p"}},
    })
    conf = admin_config(secured, {"ca": "PEM", "username": "alice", "password": "pw"})
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["ssl.ca.pem"] == "PEM" and conf["sasl.username"] == "alice" and conf["sasl.password"] == "pw"
    from sluice.core.spec import Sink

    defaults = sink_topic_settings(Sink(topic="t"), secured)
    assert (defaults.partitions, defaults.replication, defaults.config) == (6, 3, {})
    own = sink_topic_settings(Sink(topic="t", partitions=12, replication_factor=2), secured)
    assert (own.partitions, own.replication) == (12, 2)
