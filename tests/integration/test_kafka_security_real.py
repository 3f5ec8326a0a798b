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
* SASL/OAUTHBEARER against a broker of this module with an OAUTHBEARER listener
  (``tests.support.oauthkafka``: RS256 tokens checked against a JWKS file): confluent-kafka through
  the runtime's ``oauth_cb`` (producer, consumer, the exactly-once sink's transactional producer, the
  admin client), the operator's ``admin_config`` creating a topic, and Spark's Kafka source and sink
  through the runtime's Java properties (a ``file:`` token endpoint), with the cluster's client
  settings; a token of a foreign key and an expired token are refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import oauthkafka
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


# -- SASL/OAUTHBEARER ------------------------------------------------------------------------------
CLIENT_SETTINGS = {"consumer": {"fetch.max.wait.ms": "100", "client.rack": "rack-a",
                                "max.poll.records": "50"},
                   "producer": {"linger.ms": "5", "compression.type": "zstd", "delivery.timeout.ms": "60000"},
                   "admin": {"request.timeout.ms": "20000", "retry.backoff.ms": "50"}}


@pytest.fixture(scope="module")
def oauth_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[oauthkafka.OAuthBroker]:
    from sluice_dev.platform import common

    try:
        broker = oauthkafka.start(tmp_path_factory.mktemp("oauth-kafka") / "kafka")
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


def oauth_env(token: str, settings: dict[str, Any] | None = None) -> dict[str, str]:
    env = {"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "SLUICE_KAFKA_SASL_OAUTH_TOKEN": token}
    if settings:
        env["SLUICE_KAFKA_CLIENT_SETTINGS"] = json.dumps(settings)
    return env


def consume(conf: dict[str, Any], topic: str, count: int, group: str | None = None) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({**conf, "group.id": group or unique("g"), "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def test_oauthbearer_confluent_kafka_clients_of_the_runtime(oauth_kafka: oauthkafka.OAuthBroker,
                                                            tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from sluice_runtime import kafka_admin
    from sluice_runtime.kafka_security import from_env, librdkafka_config
    from sluice_runtime.sink_exactly_once import TransactionalSink

    bootstrap = oauth_kafka.oauth
    security = from_env(oauth_env(oauth_kafka.issuer.token("runtime"), CLIENT_SETTINGS))
    topic, eos_topic = unique("oauth"), unique("oauth-eos")
    kafka_admin.ensure_topics(bootstrap, [topic, eos_topic], security=security)  # the admin client
    producer = Producer(librdkafka_config(bootstrap, security, "producer"))
    for i in range(3):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    assert sorted(consume(librdkafka_config(bootstrap, security), topic, 3)) == [b"v0", b"v1", b"v2"]
    # the exactly-once sink: transactional producer and marker consumer over OAUTHBEARER
    (tmp_path / "metadata").write_text(json.dumps({"id": "ck-1"}) + "\n")
    group = unique("shop.ns.q.v1")
    sink = TransactionalSink(bootstrap=bootstrap, topic=eos_topic, query_id="q", checkpoint=str(tmp_path),
                             security=security, transactional_id=f"{group}.tx", consumer_group=group)
    try:
        assert sink.write_rows([(b"k", b"exactly-once")], 0)
    finally:
        sink.close()
    assert consume(librdkafka_config(bootstrap, security), eos_topic, 1) == [b"exactly-once"]


def test_oauthbearer_operator_admin_creates_a_topic(oauth_kafka: oauthkafka.OAuthBroker,
                                                    tmp_path: Path) -> None:
    from sluice.core.spec import Sink
    from sluice.crd.querycluster import KafkaSettings
    from sluice.operator.kafka_admin import TopicAdmin, admin_config, sink_topic_settings

    secret = KafkaSettings.model_validate({
        "bootstrapServers": oauth_kafka.oauth, "clientSettings": {"admin": CLIENT_SETTINGS["admin"]},
        "sasl": {"mechanism": "OAUTHBEARER", "tokenSecret": {"name": "kafka-token", "key": "jwt"}}})
    admin = TopicAdmin(admin_config(secret, {"token": oauth_kafka.issuer.token("operator")}), timeout=20)
    topic = unique("op-oauth")
    settings = sink_topic_settings(Sink(topic=topic, partitions=2), secret)
    assert admin.ensure_topic(topic, settings).created
    assert topic in admin.topics()
    token = tmp_path / "token"
    token.write_text(oauth_kafka.issuer.token("operator-file"))
    file = KafkaSettings.model_validate({"bootstrapServers": oauth_kafka.oauth, "sasl": {
        "mechanism": "OAUTHBEARER", "tokenFile": str(token)}})
    assert not TopicAdmin(admin_config(file), timeout=20).ensure_topic(topic, settings).created  # it exists


def test_oauthbearer_spark_source_and_sink(oauth_kafka: oauthkafka.OAuthBroker,
                                           spark_jars: list[Path]) -> None:
    """Spark's Kafka sink writes and its source reads over OAUTHBEARER with the runtime's ``kafka.``
    options (the token file of a Secret's token, the consumer's and producer's client settings); the
    JVM allows exactly the URL :meth:`KafkaSecurity.jvm_options` names (Kafka 4.0+ needs it)."""
    from sluice_runtime import kafka_admin
    from sluice_runtime.kafka_security import OAUTH_ALLOWED_URLS, from_env, spark_kafka_options

    from tests.support.runtime import shared_spark

    bootstrap = oauth_kafka.oauth
    security = from_env(oauth_env(oauth_kafka.issuer.token("spark"), CLIENT_SETTINGS))
    topic = unique("oauth-spark")
    kafka_admin.ensure_topics(bootstrap, [topic], security=security)
    spark = shared_spark(spark_jars)
    (flag,) = security.jvm_options()
    name, _, url = flag.removeprefix("-D").partition("=")
    assert name == OAUTH_ALLOWED_URLS and url == security.token_url
    system = spark._jvm.java.lang.System
    previous = system.getProperty(name)
    system.setProperty(name, url)
    try:
        sink = spark_kafka_options(bootstrap, security, "producer")
        assert sink["kafka.linger.ms"] == "5" and sink["kafka.sasl.mechanism"] == "OAUTHBEARER"
        frame = spark.createDataFrame([("k", f"s{i}") for i in range(4)], "key string, value string")
        frame.write.format("kafka").options(**sink).option("topic", topic).save()
        source = spark_kafka_options(bootstrap, security, "consumer")
        read = (spark.read.format("kafka").options(**source).option("subscribe", topic)
                .option("startingOffsets", "earliest").load())
        assert sorted(bytes(r.value).decode() for r in read.collect()) == ["s0", "s1", "s2", "s3"]
    finally:
        if previous is None:
            system.clearProperty(name)
        else:
            system.setProperty(name, previous)


def test_oauthbearer_refuses_foreign_and_expired_tokens(oauth_kafka: oauthkafka.OAuthBroker,
                                                        spark_jars: list[Path], tmp_path: Path) -> None:
    from sluice_runtime import kafka_admin
    from sluice_runtime.kafka_security import KafkaSecurity, from_env, spark_kafka_options

    from tests.support.runtime import shared_spark

    bootstrap = oauth_kafka.oauth
    foreign = from_env(oauth_env(oauthkafka.Issuer.new().token("intruder")))
    started = time.monotonic()
    with pytest.raises(kafka_admin.KafkaSetupError) as err:  # the broker refuses the signature
        kafka_admin.connect(bootstrap, foreign, timeout=30)
    assert time.monotonic() - started < 20, "waited for the timeout instead of failing on the refusal"
    assert "refused the connection" in str(err.value) and "invalid_token" in str(err.value)
    # an expired token: librdkafka will not send it, so the runtime says why before trying
    expired = tmp_path / "expired"
    expired.write_text(oauth_kafka.issuer.token("late", ttl=-120))
    late = KafkaSecurity(sasl_mechanism="OAUTHBEARER", oauth_token_file=str(expired))
    with pytest.raises(kafka_admin.KafkaSetupError, match=r"OAUTHBEARER token in .* expired at"):
        kafka_admin.connect(bootstrap, late, timeout=30)
    # Kafka's Java client sends it, and the broker refuses it
    spark = shared_spark(spark_jars)
    read = (spark.read.format("kafka").options(**spark_kafka_options(bootstrap, late, "consumer"))
            .option("subscribe", unique("never")).option("kafkaConsumer.pollTimeoutMs", "5000").load())
    with pytest.raises(Exception, match="invalid_token"):
        read.count()
