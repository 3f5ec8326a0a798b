"""Kafka security of the runtime: one neutral description, two client dialects.

The operator describes the cluster's security with ``SLUICE_KAFKA_*`` variables (PEM texts and
credentials come from Secrets)::

    SLUICE_KAFKA_TLS=true            TLS towards the brokers
    SLUICE_KAFKA_TLS_CA              CA certificate(s), PEM text (absent: the system trust store)
    SLUICE_KAFKA_TLS_CERT            client certificate (chain), PEM text    } mutual TLS,
    SLUICE_KAFKA_TLS_KEY             client private key, PKCS#8 PEM text     } both or neither
    SLUICE_KAFKA_SASL_MECHANISM      PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    SLUICE_KAFKA_SASL_USERNAME       } all three, or none
    SLUICE_KAFKA_SASL_PASSWORD       }

:func:`from_env` turns them into a :class:`KafkaSecurity` (rejecting inconsistent settings with an
error naming the variable); the security protocol is derived (``PLAINTEXT``, ``SSL``,
``SASL_PLAINTEXT``, ``SASL_SSL``). :meth:`KafkaSecurity.librdkafka` gives the confluent-kafka
settings (producers, consumers, admin), :meth:`KafkaSecurity.spark_options` the ``kafka.``-prefixed
Java client properties of Spark's Kafka source and sink. No other ``SLUICE_KAFKA_*`` variable is
accepted (there is no pass-through: an unknown key would make librdkafka refuse to start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
MECHANISMS: Final[tuple[Mechanism, ...]] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

ENV_TLS: Final = "SLUICE_KAFKA_TLS"
ENV_TLS_CA: Final = "SLUICE_KAFKA_TLS_CA"
ENV_TLS_CERT: Final = "SLUICE_KAFKA_TLS_CERT"
ENV_TLS_KEY: Final = "SLUICE_KAFKA_TLS_KEY"
ENV_SASL_MECHANISM: Final = "SLUICE_KAFKA_SASL_MECHANISM"
ENV_SASL_USERNAME: Final = "SLUICE_KAFKA_SASL_USERNAME"
ENV_SASL_PASSWORD: Final = "SLUICE_KAFKA_SASL_PASSWORD"
ENV_VARS: Final = (ENV_TLS, ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY,
                   ENV_SASL_MECHANISM, ENV_SASL_USERNAME, ENV_SASL_PASSWORD)
#: exported by ``.platform/env`` of the development platform; not a client setting
IGNORED_ENV: Final = frozenset({"SLUICE_KAFKA_BOOTSTRAP"})

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

_JAAS_MODULES: Final[dict[str, str]] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaSecurityError(ValueError):
    """Inconsistent or invalid Kafka security settings."""


#: how each setting is called in error messages (field names; :func:`from_env` uses variables)
_FIELD_NAMES: Final[dict[str, str]] = {
    "tls": "tls", "ca": "ca_pem", "cert": "cert_pem", "key": "key_pem",
    "mechanism": "sasl_mechanism", "username": "sasl_username", "password": "sasl_password",
}
_ENV_NAMES: Final[dict[str, str]] = {
    "tls": ENV_TLS, "ca": ENV_TLS_CA, "cert": ENV_TLS_CERT, "key": ENV_TLS_KEY,
    "mechanism": ENV_SASL_MECHANISM, "username": ENV_SASL_USERNAME, "password": ENV_SASL_PASSWORD,
}


@dataclass(frozen=True)
class KafkaSecurity:
    """How the runtime's Kafka clients authenticate and encrypt (default: PLAINTEXT)."""

    tls: bool = False
    ca_pem: str | None = field(default=None, repr=False)
    cert_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    sasl_mechanism: Mechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check(self, _FIELD_NAMES)

    @property
    def sasl(self) -> bool:
        return self.sasl_mechanism is not None

    @property
    def protocol(self) -> SecurityProtocol:
        if self.sasl:
            return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
        return "SSL" if self.tls else "PLAINTEXT"

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings; only keys librdkafka knows."""
        conf: dict[str, str] = {"security.protocol": self.protocol}
        if self.ca_pem is not None:
            conf["ssl.ca.pem"] = self.ca_pem
        if self.cert_pem is not None and self.key_pem is not None:
            conf["ssl.certificate.pem"] = self.cert_pem
            conf["ssl.key.pem"] = self.key_pem
        if self.sasl_mechanism is not None:
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = str(self.sasl_username)
            conf["sasl.password"] = str(self.sasl_password)
        return conf

    def java_properties(self) -> dict[str, str]:
        """Kafka Java client properties (PEM stores, JAAS login), without Spark's prefix."""
        props: dict[str, str] = {"security.protocol": self.protocol}
        if self.ca_pem is not None:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.certificates"] = self.ca_pem
        if self.cert_pem is not None and self.key_pem is not None:
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.certificate.chain"] = self.cert_pem
            props["ssl.keystore.key"] = self.key_pem
        if self.sasl_mechanism is not None:
            props["sasl.mechanism"] = self.sasl_mechanism
            props["sasl.jaas.config"] = jaas_config(
                self.sasl_mechanism, str(self.sasl_username), str(self.sasl_password)
            )
        return props

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink (``kafka.``-prefixed Java client properties)."""
        return {f"kafka.{key}": value for key, value in self.java_properties().items()}


def librdkafka_config(bootstrap: str, security: KafkaSecurity | None = None) -> dict[str, str]:
    """``bootstrap.servers`` plus the security settings, for any confluent-kafka client."""
    return {"bootstrap.servers": bootstrap, **(security or PLAINTEXT).librdkafka()}


def spark_kafka_options(bootstrap: str, security: KafkaSecurity | None = None) -> dict[str, str]:
    """``kafka.bootstrap.servers`` plus the security options, for Spark's Kafka source/sink."""
    return {"kafka.bootstrap.servers": bootstrap, **(security or PLAINTEXT).spark_options()}


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The ``sasl.jaas.config`` line of the Java client (values quoted and escaped)."""
    module = _JAAS_MODULES[mechanism]
    return f'{module} required username="{_jaas_quote(username)}" password="{_jaas_quote(password)}";'


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def from_env(env: Mapping[str, str]) -> KafkaSecurity:
    """Read the ``SLUICE_KAFKA_*`` variables; raise :class:`KafkaSecurityError` naming the variable."""
    unknown = sorted(
        k for k in env if k.startswith("SLUICE_KAFKA_") and k not in ENV_VARS and k not in IGNORED_ENV
    )
    if unknown:
        raise KafkaSecurityError(
            f"unknown Kafka setting {', '.join(unknown)}: the runtime reads only {', '.join(ENV_VARS)} "
            "(the security protocol is derived from them; no other client setting is passed on)"
        )
    tls_text = env.get(ENV_TLS, "").strip().lower()
    if tls_text and tls_text not in _TRUE | _FALSE:
        raise KafkaSecurityError(f"{ENV_TLS} must be true or false, got {env[ENV_TLS]!r}")
    mechanism_text = env.get(ENV_SASL_MECHANISM)
    mechanism = mechanism_text.strip().upper() if mechanism_text is not None else None
    values = _Values(
        tls=tls_text in _TRUE,
        ca=env.get(ENV_TLS_CA),
        cert=env.get(ENV_TLS_CERT),
        key=env.get(ENV_TLS_KEY),
        mechanism=mechanism,
        username=env.get(ENV_SASL_USERNAME),
        password=env.get(ENV_SASL_PASSWORD),
    )
    _check_values(values, _ENV_NAMES)
    return KafkaSecurity(
        tls=values.tls,
        ca_pem=values.ca,
        cert_pem=values.cert,
        key_pem=values.key,
        sasl_mechanism=_as_mechanism(values.mechanism),
        sasl_username=values.username,
        sasl_password=values.password,
    )


# -- validation ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Values:
    tls: bool
    ca: str | None
    cert: str | None
    key: str | None
    mechanism: str | None
    username: str | None
    password: str | None


def _as_mechanism(value: str | None) -> Mechanism | None:
    for mechanism in MECHANISMS:
        if value == mechanism:
            return mechanism
    return None


def _check(sec: KafkaSecurity, names: Mapping[str, str]) -> None:
    _check_values(
        _Values(sec.tls, sec.ca_pem, sec.cert_pem, sec.key_pem, sec.sasl_mechanism,
                sec.sasl_username, sec.sasl_password),
        names,
    )


def _check_values(v: _Values, names: Mapping[str, str]) -> None:
    for part, value in (("ca", v.ca), ("cert", v.cert), ("key", v.key)):
        if value is not None and not v.tls:
            raise KafkaSecurityError(f"{names[part]} is set but {names['tls']} is not true")
    if (v.cert is None) != (v.key is None):
        have, lacking = ("cert", "key") if v.key is None else ("key", "cert")
        raise KafkaSecurityError(
            f"{names[have]} is set without {names[lacking]}: client certificate and key go together"
        )
    if v.ca is not None:
        _check_pem(v.ca, "CERTIFICATE", names["ca"])
    if v.cert is not None:
        _check_pem(v.cert, "CERTIFICATE", names["cert"])
    if v.key is not None:
        _check_key(v.key, names["key"])
    if v.mechanism is None and v.username is None and v.password is None:
        return
    if v.mechanism is None:
        present = names["username"] if v.username is not None else names["password"]
        raise KafkaSecurityError(
            f"{present} is set but {names['mechanism']} is not (one of {', '.join(MECHANISMS)})"
        )
    if v.mechanism not in MECHANISMS:
        raise KafkaSecurityError(
            f"{names['mechanism']}: unknown SASL mechanism {v.mechanism!r} (one of {', '.join(MECHANISMS)})"
        )
    for part, value in (("username", v.username), ("password", v.password)):
        if value is None:
            raise KafkaSecurityError(f"{names['mechanism']} is set but {names[part]} is not")
        if not value:
            raise KafkaSecurityError(f"{names[part]} is empty")
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise KafkaSecurityError(
                f"{names[part]} contains a line break or another control character "
                "(was the Secret written with `echo` instead of `echo -n`?)"
            )


def _check_pem(text: str, label: str, name: str) -> None:
    if f"-----BEGIN {label}-----" not in text:
        raise KafkaSecurityError(
            f"{name} is not a PEM {label.lower()} (no '-----BEGIN {label}-----' line): "
            "it must hold the PEM text itself, not a file path"
        )


def _check_key(text: str, name: str) -> None:
    if "-----BEGIN PRIVATE KEY-----" in text:
        return
    if "-----BEGIN ENCRYPTED PRIVATE KEY-----" in text:
        raise KafkaSecurityError(
            f"{name}: encrypted private keys are not supported; use an unencrypted PKCS#8 key"
        )
    if "PRIVATE KEY-----" in text:  # PKCS#1 "RSA PRIVATE KEY", SEC1 "EC PRIVATE KEY", ...
        raise KafkaSecurityError(
            f"{name}: the key must be PKCS#8 ('-----BEGIN PRIVATE KEY-----'), which Spark's Java Kafka "
            "client requires; convert it with `openssl pkcs8 -topk8 -nocrypt -in key.pem`"
        )
    raise KafkaSecurityError(
        f"{name} is not a PEM private key (no '-----BEGIN PRIVATE KEY-----' line): "
        "it must hold the PEM text itself, not a file path"
    )


#: no TLS, no SASL
PLAINTEXT: Final = KafkaSecurity()
