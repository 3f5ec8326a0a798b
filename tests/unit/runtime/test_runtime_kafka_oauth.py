"""The runtime's side of ``spec.kafka.clientSettings`` and SASL/OAUTHBEARER
(``sluice_runtime.kafka_security``): the settings of each role reach its client (Spark's source and
sink options, the transactional producer's and the admin client's librdkafka settings); a Secret's
token is written to a private file that the Java client reads (``file:`` token endpoint) and
librdkafka's ``oauth_cb`` re-reads."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from sluice.core.kafkaclient import ClientSettings
from sluice_runtime import kafka_security
from sluice_runtime.kafka_security import KafkaSecurity, KafkaSecurityError, from_env
from sluice_runtime.steps.base import BuildContext

SETTINGS = {"consumer": {"fetch.max.wait.ms": "200", "max.poll.records": "500"},
            "producer": {"linger.ms": "50", "delivery.timeout.ms": "90000"},
            "admin": {"request.timeout.ms": "15000"}}


def jwt(sub: str = "svc", exp: int = 2_000_000_000) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'sub': sub, 'exp': exp, 'iat': 1})}.c2ln"


def test_each_role_gets_its_client_settings() -> None:
    sec = from_env({"SLUICE_KAFKA_CLIENT_SETTINGS": json.dumps(SETTINGS)})
    assert sec.client == ClientSettings(**SETTINGS)
    ctx = BuildContext(spark=None, plan=None, bootstrap="h:1", query_id="q", security=sec,  # type: ignore[arg-type]
                       consumer_group="shop.ns.q.v1")
    assert ctx.source_options() == {"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "PLAINTEXT",
                                    "kafka.fetch.max.wait.ms": "200", "kafka.max.poll.records": "500",
                                    "groupIdPrefix": "shop.ns.q.v1"}
    assert ctx.sink_options() == {"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "PLAINTEXT",
                                  "kafka.delivery.timeout.ms": "90000", "kafka.linger.ms": "50"}
    assert ctx.kafka_options() == {"kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "PLAINTEXT"}
    # confluent-kafka: librdkafka names, Java-only keys left out, the security settings last
    assert kafka_security.librdkafka_config("h:1", sec, "producer") == {
        "bootstrap.servers": "h:1", "linger.ms": "50", "security.protocol": "PLAINTEXT"}
    assert kafka_security.librdkafka_config("h:1", sec, "admin") == {
        "bootstrap.servers": "h:1", "socket.timeout.ms": "15000", "security.protocol": "PLAINTEXT"}
    assert kafka_security.librdkafka_config("h:1", sec) == {"bootstrap.servers": "h:1",
                                                            "security.protocol": "PLAINTEXT"}


def test_the_transactional_producer_takes_the_producer_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice_runtime import sink_exactly_once

    made: list[dict[str, Any]] = []

    class FakeProducer:
        def __init__(self, conf: dict[str, Any]) -> None:
            made.append(conf)

        def init_transactions(self, timeout: float) -> None:
            del timeout

    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Producer", FakeProducer)
    sec = KafkaSecurity(client=ClientSettings(producer={"linger.ms": "5", "compression.type": "zstd",
                                                        "delivery.timeout.ms": "120000"}))
    sink = sink_exactly_once.TransactionalSink(bootstrap="h:1", topic="t", query_id="q", checkpoint="/c",
                                               security=sec, transactional_id="shop.tx")
    sink.init()
    (conf,) = made
    assert conf["linger.ms"] == "5" and conf["compression.type"] == "zstd"  # the defaults replaced
    assert "delivery.timeout.ms" not in conf and "message.timeout.ms" not in conf  # Java only
    assert conf["transactional.id"] == "shop.tx" and conf["enable.idempotence"] is True


def test_bad_client_settings_are_a_configuration_error() -> None:
    for text in ("{", '{"producer": {"acks": "1"}}'):
        with pytest.raises(KafkaSecurityError, match="SLUICE_KAFKA_CLIENT_SETTINGS"):
            from_env({"SLUICE_KAFKA_CLIENT_SETTINGS": text})


def test_a_secrets_token_is_written_to_a_private_file() -> None:
    token = jwt()
    sec = from_env({"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
                    "SLUICE_KAFKA_SASL_OAUTH_TOKEN": token + "\n"})
    path = Path(str(sec.oauth_token_file))
    assert path.read_text() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sec.protocol == "SASL_PLAINTEXT" and token not in repr(sec)
    url = path.as_uri()
    assert sec.java_properties() == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.oauthbearer.token.endpoint.url": url,
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
    }
    assert sec.jvm_options() == (f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={url}",)
    conf = sec.librdkafka()
    assert conf["sasl.mechanism"] == "OAUTHBEARER" and "sasl.username" not in conf
    assert conf["oauth_cb"]("") == (token, 2_000_000_000.0, "svc")


def test_a_token_file_is_read_at_every_refresh(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text(jwt("first"))
    sec = from_env({"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "SLUICE_KAFKA_TLS": "true",
                    "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE": str(file)})
    assert sec.oauth_token_file == str(file) and sec.protocol == "SASL_SSL"
    callback = sec.librdkafka()["oauth_cb"]
    assert callback("")[2] == "first"
    file.write_text(jwt("second", exp=3))
    assert callback("")[1:] == (3.0, "second")
    assert sec.spark_options()["kafka.sasl.oauthbearer.token.endpoint.url"] == file.as_uri()


@pytest.mark.parametrize(("env", "message"), [
    ({"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER"},
     "SLUICE_KAFKA_SASL_MECHANISM is OAUTHBEARER but SLUICE_KAFKA_SASL_OAUTH_TOKEN or "
     "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE is not set"),
    ({"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "SLUICE_KAFKA_SASL_OAUTH_TOKEN": "x",
      "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE": "/t"}, "are both set: exactly one of them"),
    ({"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "SLUICE_KAFKA_SASL_OAUTH_TOKEN": "not-a-jwt"},
     "SLUICE_KAFKA_SASL_OAUTH_TOKEN: the token is not a JWT"),
    ({"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE": "/nonexistent/t"},
     "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE: /nonexistent/t cannot be read"),
    ({"SLUICE_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE": "/t",
      "SLUICE_KAFKA_SASL_USERNAME": "u"}, "SLUICE_KAFKA_SASL_USERNAME is set but OAUTHBEARER takes a token"),
    ({"SLUICE_KAFKA_SASL_MECHANISM": "PLAIN", "SLUICE_KAFKA_SASL_USERNAME": "u",
      "SLUICE_KAFKA_SASL_PASSWORD": "p", "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE": "/t"},
     "is set but SLUICE_KAFKA_SASL_MECHANISM is not OAUTHBEARER"),
    ({"SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE": "/t"}, "is set but SLUICE_KAFKA_SASL_MECHANISM is not"),
])
def test_inconsistent_oauth_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSecurityError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_env(env)


def test_the_records_own_check_names_the_fields() -> None:
    with pytest.raises(KafkaSecurityError, match="sasl_mechanism is OAUTHBEARER but oauth_token_file"):
        KafkaSecurity(sasl_mechanism="OAUTHBEARER")
    assert KafkaSecurity().jvm_options() == ()


def test_the_jvm_options_extend_the_drivers_and_executors(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text(jwt())
    sec = KafkaSecurity(sasl_mechanism="OAUTHBEARER", oauth_token_file=str(file))
    flag = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={file.as_uri()}"
    conf = kafka_security.with_jvm_options({"spark.executor.extraJavaOptions": "-Xss4m"}, sec)
    assert conf["spark.driver.extraJavaOptions"] == f"-Dio.netty.tryReflectionSetAccessible=true {flag}"
    assert conf["spark.executor.extraJavaOptions"] == f"-Xss4m {flag}"
    assert kafka_security.with_jvm_options({"a": "b"}, KafkaSecurity()) == {"a": "b"}
    assert os.access(file, os.R_OK)
