"""The Kafka connection of a QueryCluster (its own module: the engine snapshot uses it too)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from sluice.core import kafkaclient
from sluice.crd.base import CrdModel, SecretKeyRef, refusal, value_at

__all__ = ["KafkaClientSettings", "KafkaSasl", "KafkaSettings", "KafkaTls"]


class KafkaTls(CrdModel):
    """TLS towards the brokers; certificates come from Secrets, never inline."""

    ca_secret: SecretKeyRef | None = Field(default=None, description="CA certificate (PEM).")
    cert_secret: SecretKeyRef | None = Field(default=None, description="Client certificate (PEM).")
    key_secret: SecretKeyRef | None = Field(default=None, description="Client private key (PEM).")


#: what each mechanism needs (camelCase field names, as in error messages)
_CREDENTIALS = ("usernameSecret", "passwordSecret")
_TOKEN_SOURCES = ("tokenSecret", "tokenFile")


class KafkaSasl(CrdModel):
    """SASL towards the brokers: a user name and password (PLAIN, SCRAM) or a JWT (OAUTHBEARER)."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] = Field(
        description="SASL mechanism.")
    username_secret: SecretKeyRef | None = Field(
        default=None, description="Secret key holding the user name (PLAIN, SCRAM).")
    password_secret: SecretKeyRef | None = Field(
        default=None, description="Secret key holding the password (PLAIN, SCRAM).")
    token_secret: SecretKeyRef | None = Field(
        default=None, description="OAUTHBEARER: Secret key holding the token (a JWT), read when a driver "
        "starts (a new token reaches the drivers when they restart). Exactly one of tokenSecret and "
        "tokenFile.")
    token_file: str | None = Field(
        default=None, min_length=2, max_length=4096, pattern=r"^/",
        description="OAUTHBEARER: absolute path of a file holding the token (a JWT), re-read whenever a "
        "client refreshes its login; it must exist in the driver pods and the operator's pod, e.g. the "
        "service-account token /var/run/secrets/kubernetes.io/serviceaccount/token (the pod template "
        "adds no volume). Exactly one of tokenSecret and tokenFile.")

    @model_validator(mode="before")
    @classmethod
    def _credentials(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        found = sasl_problems(data)
        if found:
            raise refusal("KafkaSasl", "kafka_sasl", [((name,), message, _get(data, name))
                                                      for name, message in found])
        return data


def _get(data: dict[str, Any], name: str) -> Any:
    """A field as written: by its camelCase name, or by its Python name."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    return data.get(name, data.get(snake))


def sasl_problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) of every missing or misplaced credential for the mechanism written."""
    mechanism = data.get("mechanism")
    if not isinstance(mechanism, str):
        return []  # the type check names it
    present = {n for n in (*_CREDENTIALS, *_TOKEN_SOURCES) if _get(data, n) is not None}
    out: list[tuple[str, str]] = []
    if mechanism == "OAUTHBEARER":
        out += [(n, "not used with mechanism OAUTHBEARER (it takes tokenSecret or tokenFile)")
                for n in _CREDENTIALS if n in present]
        tokens = [n for n in _TOKEN_SOURCES if n in present]
        if not tokens:
            out.append(("tokenSecret", "required with mechanism OAUTHBEARER (or tokenFile)"))
        elif len(tokens) == 2:
            out.append(("tokenFile", "set together with tokenSecret: exactly one of them"))
        return out
    out += [(n, f"required with mechanism {mechanism}") for n in _CREDENTIALS if n not in present]
    out += [(n, "only with mechanism OAUTHBEARER") for n in _TOKEN_SOURCES if n in present]
    return out


class KafkaClientSettings(CrdModel):
    """Kafka Java client properties passed to the queries' clients (an allow-list: client.rack, fetch,
    batching, compression, timeouts, back-offs, buffers; see docs/operator.md). What the operator sets
    itself (addresses, security, ids, delivery and isolation guarantees, offsets) is refused."""

    consumer: dict[str, str] | None = Field(
        default=None, description="Settings of the consumers of Spark's Kafka source.")
    producer: dict[str, str] | None = Field(
        default=None, description="Settings of the producers of Spark's Kafka sink and of an exactly-once "
        "sink's transactional producer (where librdkafka has the setting).")
    admin: dict[str, str] | None = Field(
        default=None, description="Settings of the admin clients of the runtime and the operator.")

    @model_validator(mode="before")
    @classmethod
    def _allowed(cls, data: Any) -> Any:
        found = kafkaclient.problems(data)
        if found:
            raise refusal("KafkaClientSettings", "kafka_client_setting",
                          [(p.loc, p.message, value_at(data, p.loc)) for p in found])
        return data

    def settings(self) -> kafkaclient.ClientSettings:
        """The typed record the builders and the operator's admin client read."""
        return kafkaclient.ClientSettings(consumer=dict(self.consumer or {}),
                                          producer=dict(self.producer or {}), admin=dict(self.admin or {}))

    def is_empty(self) -> bool:
        return self.settings().is_empty()


class KafkaSettings(CrdModel):
    bootstrap_servers: str = Field(
        min_length=1, description="Comma-separated host:port list of Kafka brokers."
    )
    tls: KafkaTls | None = Field(default=None, description="TLS settings (Secret references).")
    sasl: KafkaSasl | None = Field(default=None, description="SASL settings (Secret references).")
    client_settings: KafkaClientSettings | None = Field(
        default=None, description="Allow-listed Kafka client properties per client (consumer, producer, "
        "admin; Java names, string values). A change is rolled out to the queries like an engine upgrade.")
    default_partitions: int = Field(
        default=1, ge=1, description="Partitions of sink topics the operator creates."
    )
    default_replication_factor: int | None = Field(
        default=None, ge=1,
        description="Replication factor of sink topics the operator creates (a query's "
        "sink.replicationFactor overrides it); absent: the broker's default.replication.factor (Kafka "
        "2.4 or newer), so a topic is created as replicated as the brokers are set up to make it.",
    )

    def pinned_client_settings(self) -> KafkaClientSettings | None:
        """The client settings without their empty maps (None when nothing is left: empty settings are
        none, and leave the engine's digest as it was)."""
        if self.client_settings is None:
            return None
        kept = {k: v for k, v in self.client_settings.model_dump().items() if v}
        return KafkaClientSettings.model_validate(kept) if kept else None

    def client(self) -> kafkaclient.ClientSettings:
        """The typed client settings (empty when none)."""
        return self.client_settings.settings() if self.client_settings else kafkaclient.EMPTY
