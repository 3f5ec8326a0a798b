"""Operator process pieces: Lease leader election, kopf error translation, registration, logs."""

from __future__ import annotations

import json
import logging
import threading

import kopf
import pytest
from operator_fixtures import FakeKube
from prometheus_client import CollectorRegistry
from sluice.operator.kube import KubeError
from sluice.operator.leader import LeaderElector
from sluice.operator.metrics import OperatorMetrics
from sluice.operator.reconcile import Env, Retry, Stop


def elector(kube: FakeKube, identity: str, lease: int = 15) -> LeaderElector:
    return LeaderElector(kube, "ops", "sluice-operator", identity, lease_seconds=lease,  # type: ignore[arg-type]
                         renew_seconds=0.01)


def test_only_one_candidate_wins() -> None:
    kube = FakeKube()
    a, b = elector(kube, "a"), elector(kube, "b")
    assert a.try_acquire() is True
    assert b.try_acquire() is False
    assert a.try_acquire() is True  # renewal
    lease = kube.objects[("Lease", "ops", "sluice-operator")]
    assert lease["spec"]["holderIdentity"] == "a"


def test_expired_lease_is_taken_over_and_transitions_counted() -> None:
    kube = FakeKube()
    a, b = elector(kube, "a"), elector(kube, "b")
    assert a.try_acquire()
    kube.objects[("Lease", "ops", "sluice-operator")]["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
    assert b.try_acquire() is True
    spec = kube.objects[("Lease", "ops", "sluice-operator")]["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert a.try_acquire() is False


def test_release_hands_over_at_once() -> None:
    kube = FakeKube()
    a, b = elector(kube, "a"), elector(kube, "b")
    assert a.try_acquire()
    a.release()
    assert b.try_acquire() is True


def test_conflicting_update_loses() -> None:
    kube = FakeKube()
    a = elector(kube, "a")
    assert a.try_acquire()
    original_replace = kube.replace

    def racing_replace(obj: dict) -> dict:
        raise KubeError(409, {"message": "conflict"}, "PUT")

    kube.replace = racing_replace  # type: ignore[method-assign]
    kube.objects[("Lease", "ops", "sluice-operator")]["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
    assert elector(kube, "b").try_acquire() is False
    kube.replace = original_replace  # type: ignore[method-assign]


def test_wait_for_leadership_stops_on_flag() -> None:
    kube = FakeKube()
    assert elector(kube, "a").try_acquire()
    stop = threading.Event()
    stop.set()
    assert elector(kube, "b").wait_for_leadership(stop) is False


def test_renewal_failure_sets_lost() -> None:
    kube = FakeKube()
    a = elector(kube, "a", lease=0)
    assert a.try_acquire()
    kube.objects[("Lease", "ops", "sluice-operator")]["spec"]["holderIdentity"] = "thief"
    kube.objects[("Lease", "ops", "sluice-operator")]["spec"]["leaseDurationSeconds"] = 3600
    stop, lost = threading.Event(), threading.Event()
    a.keep_renewing(stop, lost)
    assert lost.is_set()


def test_errors_become_kopf_errors() -> None:
    from sluice.operator.handlers import _common

    _common.configure(lambda: Env(kube=FakeKube(), metrics=OperatorMetrics(CollectorRegistry())))  # type: ignore[arg-type]
    with pytest.raises(kopf.TemporaryError) as temp:
        with _common.kopf_errors("StreamingQuery", "reconcile"):
            raise Retry("cluster missing", 40)
    assert temp.value.delay == 40
    with pytest.raises(kopf.PermanentError):
        with _common.kopf_errors("StreamingQuery", "reconcile"):
            raise Stop("bad sql")
    with pytest.raises(kopf.TemporaryError):
        with _common.kopf_errors("StreamingQuery", "reconcile"):
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
    m.phase("ns/a", "Starting")
    m.phase("ns/a", "Running")
    m.phase("ns/b", "Running")
    assert m.queries.labels(phase="Running")._value.get() == 2
    assert m.queries.labels(phase="Starting")._value.get() == 0
    m.phase("ns/a", None)
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
    assert sink_topic_settings(None, None, secured) == (6, 3)
    assert sink_topic_settings(12, 2, secured) == (12, 2)
