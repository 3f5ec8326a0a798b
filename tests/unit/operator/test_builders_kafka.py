"""The QueryCluster's Kafka settings on the operator's side: the driver's ``SLUICE_KAFKA_*`` variables
(client settings only when there are some; OAUTHBEARER's token from a Secret or a file path) and the
operator's own admin client (``admin_config``: admin settings, OAUTHBEARER through ``oauth_cb``)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from sluice.crd.querycluster import KafkaSettings
from sluice.operator import builders
from sluice.operator.kafka_admin import OAuthToken, admin_config

from tests.support.operator_fixtures import cluster_spec, context

H = "ab" * 32


def env_of(ctx: Any) -> dict[str, Any]:
    container = builders.driver_deployment(ctx, H, "cm")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def jwt(sub: str = "svc", exp: int = 2_000_000_000) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'sub': sub, 'exp': exp})}.c2ln"


def test_client_settings_reach_the_driver_only_when_there_are_some() -> None:
    assert not any(k.startswith("SLUICE_KAFKA_") for k in env_of(context()))
    empty = context(cluster=cluster_spec(kafka={"bootstrapServers": "k:1",
                                                "clientSettings": {"consumer": {}}}))
    assert "SLUICE_KAFKA_CLIENT_SETTINGS" not in env_of(empty)
    settings = {"consumer": {"client.rack": "eu-1a"}, "producer": {"linger.ms": "5"}}
    ctx = context(cluster=cluster_spec(kafka={"bootstrapServers": "k:1", "clientSettings": settings}))
    assert json.loads(env_of(ctx)["SLUICE_KAFKA_CLIENT_SETTINGS"]) == settings


def test_oauthbearer_gets_its_token_from_a_secret_or_a_path() -> None:
    secret = context(cluster=cluster_spec(kafka={"bootstrapServers": "k:1", "sasl": {
        "mechanism": "OAUTHBEARER", "tokenSecret": {"name": "kafka-token", "key": "jwt"}}}))
    env = env_of(secret)
    assert env["SLUICE_KAFKA_SASL_MECHANISM"] == "OAUTHBEARER"
    assert env["SLUICE_KAFKA_SASL_OAUTH_TOKEN"] == {"secretKeyRef": {"name": "kafka-token", "key": "jwt"}}
    assert not {"SLUICE_KAFKA_SASL_USERNAME", "SLUICE_KAFKA_SASL_PASSWORD",
                "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE"} & set(env)
    path = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    file = context(cluster=cluster_spec(kafka={"bootstrapServers": "k:1", "sasl": {
        "mechanism": "OAUTHBEARER", "tokenFile": path}}))
    env = env_of(file)
    assert env["SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE"] == path and "SLUICE_KAFKA_SASL_OAUTH_TOKEN" not in env


def test_the_operators_admin_client_takes_the_admin_settings() -> None:
    kafka = KafkaSettings.model_validate({"bootstrapServers": "k:9092", "clientSettings": {
        "admin": {"request.timeout.ms": "30000", "client.dns.lookup": "use_all_dns_ips",
                  "socket.connection.setup.timeout.max.ms": "60000"},
        "producer": {"linger.ms": "5"}}})
    conf = admin_config(kafka)
    assert conf["socket.timeout.ms"] == "30000"  # replaces the operator's default
    assert conf["client.dns.lookup"] == "use_all_dns_ips"
    assert "linger.ms" not in conf and "socket.connection.setup.timeout.max.ms" not in conf  # Java only
    assert conf["bootstrap.servers"] == "k:9092"


def test_the_operators_admin_client_logs_in_with_oauthbearer(tmp_path: Path) -> None:
    secret = KafkaSettings.model_validate({"bootstrapServers": "k:1", "sasl": {
        "mechanism": "OAUTHBEARER", "tokenSecret": {"name": "t", "key": "jwt"}}})
    token = jwt("operator")
    conf = admin_config(secret, {"token": token + "\n"})
    assert conf["security.protocol"] == "SASL_PLAINTEXT" and conf["sasl.mechanism"] == "OAUTHBEARER"
    assert "sasl.username" not in conf
    assert conf["oauth_cb"]("") == (token, 2_000_000_000.0, "operator")
    (tmp_path / "token").write_text(jwt("file", exp=1_900_000_000))
    file = KafkaSettings.model_validate({"bootstrapServers": "k:1", "sasl": {
        "mechanism": "OAUTHBEARER", "tokenFile": str(tmp_path / "token")}})
    callback = admin_config(file)["oauth_cb"]
    assert callback("")[1:] == (1_900_000_000.0, "file")
    (tmp_path / "token").write_text(jwt("rotated"))  # read again at every refresh
    assert callback("")[2] == "rotated"
    assert "token=" not in repr(OAuthToken(token="secret"))


def test_the_runtime_reads_what_the_builder_sets() -> None:
    """The driver's env as the kubelet gives it, read by the runtime: the OAUTHBEARER token of the
    Secret and the client settings reach its clients."""
    from sluice_runtime import cli

    from tests.unit.operator.test_runtime_operator_contract import FIELDS, kubelet_env

    token = jwt("orders-app")
    settings = {"consumer": {"client.rack": "eu-1a"}, "producer": {"linger.ms": "5"},
                "admin": {"retry.backoff.ms": "250"}}
    sasl = {"mechanism": "OAUTHBEARER", "tokenSecret": {"name": "kafka-token", "key": "jwt"}}
    ctx = context(cluster=cluster_spec(kafka={"bootstrapServers": "k:9093", "clientSettings": settings,
                                              "sasl": sasl}))
    (container,) = builders.driver_deployment(ctx, H, "cm")["spec"]["template"]["spec"]["containers"]
    env = kubelet_env(container["env"], {("kafka-token", "jwt"): token}, FIELDS, container["resources"])
    argv = [*container.get("command", ["sluice-runtime", "run"])[1:], *container.get("args", [])]
    config = cli.resolve_config(cli.build_parser().parse_args(argv), env)
    assert config.kafka.sasl_mechanism == "OAUTHBEARER"
    assert Path(str(config.kafka.oauth_token_file)).read_text() == token
    assert config.kafka.librdkafka("admin")["retry.backoff.ms"] == "250"
    assert config.kafka.spark_options("consumer")["kafka.client.rack"] == "eu-1a"
    assert config.kafka.spark_options("producer")["kafka.linger.ms"] == "5"
