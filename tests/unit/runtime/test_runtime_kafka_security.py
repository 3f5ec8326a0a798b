"""The runtime's Kafka security mapping (``sluice_runtime.kafka_security``): one neutral
description -> librdkafka settings and Spark Kafka options; inconsistent settings rejected naming
the variable. Also the ids the runtime takes from the operator, and the connector fallback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sluice_runtime import cli, connector, kafka_security
from sluice_runtime.kafka_security import KafkaSecurity, KafkaSecurityError, from_env
from sluice_runtime.sink_exactly_once import TransactionalSink, marker_group

CA = "-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nQ0VSVA==\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nS0VZ\n-----END PRIVATE KEY-----\n"

#: every key librdkafka may receive from the mapping (anything else would make it refuse to start)
LIBRDKAFKA_KEYS = {
    "security.protocol", "ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem",
    "sasl.mechanism", "sasl.username", "sasl.password",
}


def test_plaintext_by_default() -> None:
    sec = from_env({})
    assert sec == KafkaSecurity() and sec.protocol == "PLAINTEXT"
    assert kafka_security.librdkafka_config("h:1", sec) == {
        "bootstrap.servers": "h:1", "security.protocol": "PLAINTEXT",
    }
    assert kafka_security.spark_kafka_options("h:1") == {
        "kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize(
    ("env", "protocol"),
    [
        ({"SLUICE_KAFKA_TLS": "true"}, "SSL"),
        ({"SLUICE_KAFKA_TLS": "false"}, "PLAINTEXT"),
        ({"SLUICE_KAFKA_SASL_MECHANISM": "PLAIN", "SLUICE_KAFKA_SASL_USERNAME": "u",
          "SLUICE_KAFKA_SASL_PASSWORD": "p"}, "SASL_PLAINTEXT"),
        ({"SLUICE_KAFKA_TLS": "TRUE", "SLUICE_KAFKA_SASL_MECHANISM": "scram-sha-512",
          "SLUICE_KAFKA_SASL_USERNAME": "u", "SLUICE_KAFKA_SASL_PASSWORD": "p"}, "SASL_SSL"),
    ],
)
def test_protocol_is_derived(env: dict[str, str], protocol: str) -> None:
    sec = from_env(env)
    assert sec.protocol == protocol
    assert sec.librdkafka()["security.protocol"] == protocol
    assert sec.spark_options()["kafka.security.protocol"] == protocol
    assert set(sec.librdkafka()) <= LIBRDKAFKA_KEYS


def test_mutual_tls_and_scram() -> None:
    sec = from_env({
        "SLUICE_KAFKA_TLS": "true", "SLUICE_KAFKA_TLS_CA": CA, "SLUICE_KAFKA_TLS_CERT": CERT,
        "SLUICE_KAFKA_TLS_KEY": KEY, "SLUICE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "SLUICE_KAFKA_SASL_USERNAME": "svc", "SLUICE_KAFKA_SASL_PASSWORD": 'p"a\\ss',
    })
    assert sec.librdkafka() == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.pem": CA, "ssl.certificate.pem": CERT, "ssl.key.pem": KEY,
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "svc", "sasl.password": 'p"a\\ss',
    }
    assert sec.spark_options() == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": CA,
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": CERT,
        "kafka.ssl.keystore.key": KEY,
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="svc" password="p\\"a\\\\ss";',
    }
    assert 'p"a' not in repr(sec) and KEY not in repr(sec)  # secrets stay out of logs


def test_plain_jaas_and_tls_without_ca() -> None:
    sec = from_env({"SLUICE_KAFKA_TLS": "1", "SLUICE_KAFKA_SASL_MECHANISM": "PLAIN",
                    "SLUICE_KAFKA_SASL_USERNAME": "u", "SLUICE_KAFKA_SASL_PASSWORD": "p"})
    opts = sec.spark_options()
    assert opts["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    )
    # no CA: the system trust store (no PEM trust store configured)
    assert not any(k.startswith("kafka.ssl.") for k in opts) and "ssl.ca.pem" not in sec.librdkafka()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SLUICE_KAFKA_SECURITY_PROTOCOL": "SSL"}, "unknown Kafka setting SLUICE_KAFKA_SECURITY_PROTOCOL"),
        ({"SLUICE_KAFKA_TLS": "maybe"}, "SLUICE_KAFKA_TLS must be true or false"),
        ({"SLUICE_KAFKA_TLS_CA": CA}, "SLUICE_KAFKA_TLS_CA is set but SLUICE_KAFKA_TLS is not true"),
        ({"SLUICE_KAFKA_TLS": "true", "SLUICE_KAFKA_TLS_CERT": CERT},
         "SLUICE_KAFKA_TLS_CERT is set without SLUICE_KAFKA_TLS_KEY"),
        ({"SLUICE_KAFKA_TLS": "true", "SLUICE_KAFKA_TLS_KEY": KEY},
         "SLUICE_KAFKA_TLS_KEY is set without SLUICE_KAFKA_TLS_CERT"),
        ({"SLUICE_KAFKA_TLS": "true", "SLUICE_KAFKA_TLS_CA": "/etc/ca.pem"},
         "SLUICE_KAFKA_TLS_CA is not a PEM certificate"),
        ({"SLUICE_KAFKA_TLS": "true", "SLUICE_KAFKA_TLS_CERT": CERT,
          "SLUICE_KAFKA_TLS_KEY": KEY.replace("PRIVATE KEY", "RSA PRIVATE KEY")},
         "SLUICE_KAFKA_TLS_KEY: the key must be PKCS#8"),
        ({"SLUICE_KAFKA_SASL_USERNAME": "u", "SLUICE_KAFKA_SASL_PASSWORD": "p"},
         "SLUICE_KAFKA_SASL_USERNAME is set but SLUICE_KAFKA_SASL_MECHANISM is not"),
        ({"SLUICE_KAFKA_SASL_MECHANISM": "GSSAPI", "SLUICE_KAFKA_SASL_USERNAME": "u",
          "SLUICE_KAFKA_SASL_PASSWORD": "p"}, "SLUICE_KAFKA_SASL_MECHANISM: unknown SASL mechanism 'GSSAPI'"),
        ({"SLUICE_KAFKA_SASL_MECHANISM": "PLAIN", "SLUICE_KAFKA_SASL_USERNAME": "u"},
         "SLUICE_KAFKA_SASL_MECHANISM is set but SLUICE_KAFKA_SASL_PASSWORD is not"),
        ({"SLUICE_KAFKA_SASL_MECHANISM": "PLAIN", "SLUICE_KAFKA_SASL_PASSWORD": "p"},
         "SLUICE_KAFKA_SASL_MECHANISM is set but SLUICE_KAFKA_SASL_USERNAME is not"),
        ({"SLUICE_KAFKA_SASL_MECHANISM": "PLAIN", "SLUICE_KAFKA_SASL_USERNAME": "",
          "SLUICE_KAFKA_SASL_PASSWORD": "p"}, "SLUICE_KAFKA_SASL_USERNAME is empty"),
        ({"SLUICE_KAFKA_SASL_MECHANISM": "PLAIN", "SLUICE_KAFKA_SASL_USERNAME": "u",
          "SLUICE_KAFKA_SASL_PASSWORD": "p\n"}, "SLUICE_KAFKA_SASL_PASSWORD contains a line break"),
    ],
)
def test_inconsistent_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSecurityError, match=re.escape(message)):
        from_env(env)
    # the CLI reports it as a configuration error (exit 2 with the message, no traceback)
    args = cli.build_parser().parse_args(["run", "--plan", "p", "--checkpoint", "c", "--bootstrap", "h:1"])
    with pytest.raises(cli.ConfigError, match="SLUICE_KAFKA_"):
        cli.resolve_config(args, env)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(KafkaSecurityError, match="sasl_username"):
        KafkaSecurity(sasl_mechanism="PLAIN", sasl_password="p")


def test_ids_from_operator_win_over_derivation() -> None:
    base = ["run", "--plan", "p", "--checkpoint", "c", "--bootstrap", "h:1"]
    env = {"SLUICE_CONSUMER_GROUP": "shop.ns.q.v1", "SLUICE_TRANSACTIONAL_ID": "shop.ns.q.v1.tx"}
    c = cli.resolve_config(cli.build_parser().parse_args(base), env)
    assert (c.consumer_group, c.transactional_id) == ("shop.ns.q.v1", "shop.ns.q.v1.tx")
    flags = [*base, "--consumer-group", "g", "--transactional-id", "t"]
    c = cli.resolve_config(cli.build_parser().parse_args(flags), env)
    assert (c.consumer_group, c.transactional_id) == ("g", "t")
    sink = TransactionalSink(bootstrap="h:1", topic="t", query_id="q", checkpoint="/ck",
                             transactional_id="shop.ns.q.v1.tx", consumer_group="shop.ns.q.v1")
    assert sink.transactional_id == "shop.ns.q.v1.tx"
    assert marker_group("q", "ck1", "shop.ns.q.v1") == "shop.ns.q.v1.eos.ck1"
    # without the operator's ids: today's derivation
    derived = TransactionalSink(bootstrap="h:1", topic="t", query_id="q", checkpoint="/ck")
    assert derived.transactional_id == "sluice-q"
    assert marker_group("q", "ck1") == "sluice-eos-q-ck1"


def test_source_options_carry_the_group_prefix() -> None:
    from sluice_runtime.steps import BuildContext

    sec = from_env({"SLUICE_KAFKA_TLS": "true"})
    ctx = BuildContext(spark=None, plan=None, bootstrap="h:1", query_id="q",  # type: ignore[arg-type]
                       security=sec, consumer_group="shop.ns.q.v1")
    assert ctx.kafka_options() == {"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "SSL"}
    assert ctx.source_options() == {**ctx.kafka_options(), "groupIdPrefix": "shop.ns.q.v1"}


# -- the Kafka connector fallback (no network: only the settings are checked) -----------------
def test_connector_coordinates_follow_pyspark() -> None:
    assert connector.coordinates("4.3.0") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
    assert connector.coordinates("4.2.0") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
    conf = connector.packages_conf("4.3.0")
    assert conf["spark.jars.packages"] == (
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0,org.apache.spark:spark-avro_2.13:4.2.0")
    assert connector.avro_coordinates("4.2.0") == "org.apache.spark:spark-avro_2.13:4.2.0"
    assert "org.scala-lang:scala-library" in conf["spark.jars.excludes"].split(",")


def test_connector_fallback_only_when_nothing_provides_it(tmp_path: Path) -> None:
    pyspark = ("4.3.0", tmp_path)
    assert connector.fallback_conf([], {}, pyspark) == connector.packages_conf("4.3.0")
    assert connector.fallback_conf(["x.jar"], {}, pyspark) == {}
    assert connector.fallback_conf([], {"spark.jars.packages": "g:a:1"}, pyspark) == {}
    assert connector.fallback_conf([], {"spark.jars": "/x.jar"}, pyspark) == {}
    assert connector.fallback_conf([], {}, pyspark, submit_args="--jars /a.jar pyspark-shell") == {}
    (tmp_path / "spark-sql-kafka-0-10_2.13-4.2.0.jar").write_bytes(b"")  # what the image does
    assert connector.fallback_conf([], {}, pyspark) == {}


def test_installed_pyspark_is_found() -> None:
    import importlib.metadata

    found = connector.installed_pyspark()
    assert found is not None and found[1].name == "jars" and found[1].is_dir()
    assert found[0] == importlib.metadata.version("pyspark")


def test_resolve_connector_flag() -> None:
    base = ["run", "--plan", "p", "--checkpoint", "c", "--bootstrap", "h:1"]
    parse = cli.build_parser().parse_args
    assert cli.resolve_config(parse([*base, "--resolve-connector"]), {}).resolve_connector
    assert cli.resolve_config(parse(base), {"SLUICE_RESOLVE_CONNECTOR": "true"}).resolve_connector
    assert not cli.resolve_config(parse(base), {}).resolve_connector
