"""The runtime's Kafka security mapping against a real broker (the session's PLAINTEXT KRaft
broker; no SASL listener is started).

* The mapped librdkafka settings of a PLAINTEXT description produce, consume and administer.
* The exactly-once sink uses the transactional id and consumer group the operator assigned.
* A SASL_PLAINTEXT description against that PLAINTEXT listener fails fast with an error naming
  the address and the protocol: in-process (``KafkaSetupError``) and as the runtime process does
  it (exit 1, one line on stderr, before any JVM starts), never a ``KeyError`` or a bare
  ``KafkaException`` after a long timeout.
* Kafka's Java client (Spark's side) accepts the ``kafka.`` options of a mutual-TLS + SCRAM
  description: PEM trust/key stores and the JAAS line (created only, no broker needed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.runtime import plan_from_yaml, unique

pytestmark = pytest.mark.integration

SASL_ENV = {
    "SLUICE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
    "SLUICE_KAFKA_SASL_USERNAME": "svc",
    "SLUICE_KAFKA_SASL_PASSWORD": "secret",
}


def test_plaintext_mapping_produces_and_consumes(kafka: str) -> None:
    from confluent_kafka import Consumer, Producer
    from sluice_runtime import kafka_admin
    from sluice_runtime.kafka_security import from_env, librdkafka_config

    security = from_env({})
    topic = unique("sec")
    kafka_admin.ensure_topics(kafka, [topic], security=security)
    conf = librdkafka_config(kafka, security)
    producer = Producer(conf)
    for i in range(5):
        producer.produce(topic, value=json.dumps({"i": i}).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(json.loads(msg.value())["i"])
    finally:
        consumer.close()
    assert sorted(got) == [0, 1, 2, 3, 4]


def test_exactly_once_sink_uses_the_operator_ids(kafka: str, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from sluice_runtime import kafka_admin
    from sluice_runtime.kafka_security import KafkaSecurity, librdkafka_config
    from sluice_runtime.sink_exactly_once import TransactionalSink

    topic, group = unique("eos"), unique("shop.ns.q.v1")
    kafka_admin.ensure_topics(kafka, [topic])
    (tmp_path / "metadata").write_text(json.dumps({"id": "ck-1"}) + "\n")
    sink = TransactionalSink(bootstrap=kafka, topic=topic, query_id="q", checkpoint=str(tmp_path),
                             security=KafkaSecurity(), transactional_id=f"{group}.tx",
                             consumer_group=group)
    try:
        assert sink.write_rows([(b"k", b"v")], 0)
    finally:
        sink.close()
    reader = Consumer({**librdkafka_config(kafka), "group.id": f"{group}.eos.ck-1"})
    try:
        (marker,) = reader.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        reader.close()
    assert marker.offset == 1  # batch 0 committed under the operator's consumer group


def test_sasl_against_a_plaintext_listener_fails_fast(kafka: str) -> None:
    from sluice_runtime import kafka_admin
    from sluice_runtime.kafka_security import from_env

    started = time.monotonic()
    with pytest.raises(kafka_admin.KafkaSetupError) as err:
        kafka_admin.ensure_topics(kafka, [unique("never")], security=from_env(SASL_ENV), timeout=30)
    assert time.monotonic() - started < 20, "waited for the timeout instead of failing on the refusal"
    message = str(err.value)
    assert f"Kafka at {kafka} (security.protocol=SASL_PLAINTEXT, sasl.mechanism=SCRAM-SHA-256)" in message
    assert "refused the connection" in message and "SASL" in message


def test_runtime_process_reports_the_refusal(kafka: str, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(plan_from_yaml(
        "  sources:\n    - name: s\n      topic: t\n      schema: [{name: a, type: string}]\n"
        "  sql: SELECT a FROM s\n  sink: {topic: o}\n"
    ).to_json())
    cmd = [sys.executable, "-m", "sluice_runtime.cli", "run", "--plan", str(plan),
           "--checkpoint", str(tmp_path / "ck"), "--bootstrap", kafka, "--http-addr", "off"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    done = subprocess.run(cmd, env={**env, **SASL_ENV}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "security.protocol=SASL_PLAINTEXT" in done.stderr and "refused" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "ck").exists()  # no Spark started
    # an unknown setting is a configuration error naming the variable (exit 2, nothing started)
    bad = {**env, "SLUICE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}
    done = subprocess.run(cmd, env=bad, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "SLUICE_KAFKA_SECURITY_PROTOCOL" in done.stderr, done.stderr


def test_java_client_accepts_the_spark_options(spark_jars: list[Path], tmp_path: Path) -> None:
    """Kafka's Java client (what Spark's connector builds from the ``kafka.`` options) takes the
    PEM stores and the JAAS line of a mutual-TLS + SCRAM description: a consumer is created (PEMs
    parsed, SCRAM login done) and the JAAS options read back with the quoting intact."""
    from sluice_runtime.kafka_security import KafkaSecurity

    from tests.support.runtime import shared_spark

    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=sluice-test",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
        check=True, capture_output=True, timeout=60,
    )
    cert, key = (tmp_path / "cert.pem").read_text(), (tmp_path / "key.pem").read_text()
    security = KafkaSecurity(tls=True, ca_pem=cert, cert_pem=cert, key_pem=key,
                             sasl_mechanism="SCRAM-SHA-512", sasl_username='app"1', sasl_password='p\\"w')
    options = security.spark_options()
    jvm = shared_spark(spark_jars)._jvm
    props = jvm.java.util.Properties()
    for name, value in options.items():
        props.setProperty(name.removeprefix("kafka."), value)
    props.setProperty("bootstrap.servers", "127.0.0.1:1")  # never contacted: creation only
    deserializer = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
    props.setProperty("key.deserializer", deserializer)
    props.setProperty("value.deserializer", deserializer)
    jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props).close()
    jaas = jvm.org.apache.kafka.common.security.JaasConfig("KafkaClient", options["kafka.sasl.jaas.config"])
    (entry,) = jaas.getAppConfigurationEntry("KafkaClient")
    assert entry.getLoginModuleName() == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert dict(entry.getOptions()) == {"username": 'app"1', "password": 'p\\"w'}
