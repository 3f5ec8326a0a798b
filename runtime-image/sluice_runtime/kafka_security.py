"""Kafka security of the runtime: one neutral description, two client dialects.

The operator describes the cluster's security with ``SLUICE_KAFKA_*`` variables (PEM texts and
credentials come from Secrets)::

    SLUICE_KAFKA_TLS=true            TLS towards the brokers
    SLUICE_KAFKA_TLS_CA              CA certificate(s), PEM text (absent: the system trust store)
    SLUICE_KAFKA_TLS_CERT            client certificate (chain), PEM text    } mutual TLS,
    SLUICE_KAFKA_TLS_KEY             client private key, PKCS#8 PEM text     } both or neither
    SLUICE_KAFKA_SASL_MECHANISM      PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER
    SLUICE_KAFKA_SASL_USERNAME       } PLAIN and SCRAM: both
    SLUICE_KAFKA_SASL_PASSWORD       }
    SLUICE_KAFKA_SASL_OAUTH_TOKEN       } OAUTHBEARER: exactly one; a token (JWT) is written to a
    SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE  } private file (0600), a file is re-read at every refresh
    SLUICE_KAFKA_CLIENT_SETTINGS     allow-listed client settings, JSON {consumer, producer, admin}
                                     (``sluice.core.kafkaclient``)

:func:`from_env` turns them into a :class:`KafkaSecurity` (rejecting inconsistent settings with an
error naming the variable); the security protocol is derived (``PLAINTEXT``, ``SSL``,
``SASL_PLAINTEXT``, ``SASL_SSL``). :meth:`KafkaSecurity.librdkafka` gives the confluent-kafka
settings (producers, consumers, admin), :meth:`KafkaSecurity.spark_options` the ``kafka.``-prefixed
Java client properties of Spark's Kafka source and sink, each with the client settings of its role
(the allow-list of :mod:`sluice.core.kafkaclient`, librdkafka names for confluent-kafka). No other
``SLUICE_KAFKA_*`` variable is accepted (an unknown key would make librdkafka refuse to start).

OAUTHBEARER reads the token from a file on both sides: the Java client through Kafka's
``OAuthBearerLoginCallbackHandler`` with a ``file:`` token endpoint (the file's URL must be allowed
with the ``org.apache.kafka.sasl.oauthbearer.allowed.urls`` system property from Kafka 4.0 on:
:meth:`KafkaSecurity.jvm_options`), librdkafka through an ``oauth_cb`` (:class:`FileToken`) that
returns the token with the JWT's ``exp`` and ``sub``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from sluice.core.kafkaclient import EMPTY, Client, ClientSettings, token_claims

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
MECHANISMS: Final[tuple[Mechanism, ...]] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTHBEARER: Final = "OAUTHBEARER"

ENV_TLS: Final = "SLUICE_KAFKA_TLS"
ENV_TLS_CA: Final = "SLUICE_KAFKA_TLS_CA"
ENV_TLS_CERT: Final = "SLUICE_KAFKA_TLS_CERT"
ENV_TLS_KEY: Final = "SLUICE_KAFKA_TLS_KEY"
ENV_SASL_MECHANISM: Final = "SLUICE_KAFKA_SASL_MECHANISM"
ENV_SASL_USERNAME: Final = "SLUICE_KAFKA_SASL_USERNAME"
ENV_SASL_PASSWORD: Final = "SLUICE_KAFKA_SASL_PASSWORD"
ENV_SASL_OAUTH_TOKEN: Final = "SLUICE_KAFKA_SASL_OAUTH_TOKEN"
ENV_SASL_OAUTH_TOKEN_FILE: Final = "SLUICE_KAFKA_SASL_OAUTH_TOKEN_FILE"
ENV_CLIENT_SETTINGS: Final = "SLUICE_KAFKA_CLIENT_SETTINGS"
ENV_VARS: Final = (ENV_TLS, ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY,
                   ENV_SASL_MECHANISM, ENV_SASL_USERNAME, ENV_SASL_PASSWORD,
                   ENV_SASL_OAUTH_TOKEN, ENV_SASL_OAUTH_TOKEN_FILE, ENV_CLIENT_SETTINGS)
#: exported by ``.platform/env`` of the development platform; not a client setting
IGNORED_ENV: Final = frozenset({"SLUICE_KAFKA_BOOTSTRAP"})

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

_JAAS_MODULES: Final[dict[str, str]] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
OAUTH_LOGIN_MODULE: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_LOGIN_HANDLER: Final = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
#: the system property of the URLs a Kafka (4.0+) Java client may read a token from
OAUTH_ALLOWED_URLS: Final = "org.apache.kafka.sasl.oauthbearer.allowed.urls"


class KafkaSecurityError(ValueError):
    """Inconsistent or invalid Kafka security settings."""


#: how each setting is called in error messages (field names; :func:`from_env` uses variables)
_FIELD_NAMES: Final[dict[str, str]] = {
    "tls": "tls", "ca": "ca_pem", "cert": "cert_pem", "key": "key_pem",
    "mechanism": "sasl_mechanism", "username": "sasl_username", "password": "sasl_password",
    "token": "oauth_token_file",
}
_ENV_NAMES: Final[dict[str, str]] = {
    "tls": ENV_TLS, "ca": ENV_TLS_CA, "cert": ENV_TLS_CERT, "key": ENV_TLS_KEY,
    "mechanism": ENV_SASL_MECHANISM, "username": ENV_SASL_USERNAME, "password": ENV_SASL_PASSWORD,
    "token": f"{ENV_SASL_OAUTH_TOKEN} or {ENV_SASL_OAUTH_TOKEN_FILE}",
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
    #: OAUTHBEARER: the file holding the token (a JWT), read at every login refresh
    oauth_token_file: str | None = None
    #: allow-listed client settings per role (Java names; librdkafka names derived)
    client: ClientSettings = EMPTY

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

    @property
    def token_url(self) -> str | None:
        """The ``file:`` URL of the OAUTHBEARER token file (what the Java client reads)."""
        return Path(self.oauth_token_file).absolute().as_uri() if self.oauth_token_file else None

    def librdkafka(self, client: Client | None = None) -> dict[str, Any]:
        """confluent-kafka (librdkafka) settings; only keys librdkafka knows. ``client``: with the client
        settings of that role (their librdkafka names; Java-only ones left out)."""
        conf: dict[str, Any] = dict(self.client.librdkafka(client)) if client else {}
        conf["security.protocol"] = self.protocol
        if self.ca_pem is not None:
            conf["ssl.ca.pem"] = self.ca_pem
        if self.cert_pem is not None and self.key_pem is not None:
            conf["ssl.certificate.pem"] = self.cert_pem
            conf["ssl.key.pem"] = self.key_pem
        if self.sasl_mechanism == OAUTHBEARER:
            conf["sasl.mechanism"] = OAUTHBEARER
            conf["oauth_cb"] = FileToken(str(self.oauth_token_file))
        elif self.sasl_mechanism is not None:
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = str(self.sasl_username)
            conf["sasl.password"] = str(self.sasl_password)
        return conf

    def java_properties(self, client: Client | None = None) -> dict[str, str]:
        """Kafka Java client properties (PEM stores, JAAS login), without Spark's prefix; ``client``:
        with the client settings of that role."""
        props: dict[str, str] = self.client.java(client) if client else {}
        props["security.protocol"] = self.protocol
        if self.ca_pem is not None:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.certificates"] = self.ca_pem
        if self.cert_pem is not None and self.key_pem is not None:
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.certificate.chain"] = self.cert_pem
            props["ssl.keystore.key"] = self.key_pem
        if self.sasl_mechanism == OAUTHBEARER:
            props["sasl.mechanism"] = OAUTHBEARER
            props["sasl.login.callback.handler.class"] = OAUTH_LOGIN_HANDLER
            props["sasl.oauthbearer.token.endpoint.url"] = str(self.token_url)
            props["sasl.jaas.config"] = f"{OAUTH_LOGIN_MODULE} required;"
        elif self.sasl_mechanism is not None:
            props["sasl.mechanism"] = self.sasl_mechanism
            props["sasl.jaas.config"] = jaas_config(
                self.sasl_mechanism, str(self.sasl_username), str(self.sasl_password)
            )
        return props

    def spark_options(self, client: Literal["consumer", "producer"] | None = None) -> dict[str, str]:
        """Options of Spark's Kafka source (``consumer``) or sink (``producer``): ``kafka.``-prefixed
        Java client properties; None: the security options alone."""
        return {f"kafka.{key}": value for key, value in self.java_properties(client).items()}

    def token_problem(self, now: float) -> str | None:
        """Why the OAUTHBEARER token cannot log in at ``now`` (unreadable, no JWT, expired); None: it
        can, or no token is used. Both clients refuse such a token without a word of why."""
        if self.sasl_mechanism != OAUTHBEARER or self.oauth_token_file is None:
            return None
        try:
            _, expires, _ = FileToken(self.oauth_token_file)("")
        except (OSError, ValueError) as exc:
            return f"the OAUTHBEARER token in {self.oauth_token_file} cannot be used: {exc}"
        if expires <= now:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
            return f"the OAUTHBEARER token in {self.oauth_token_file} expired at {when}"
        return None

    def jvm_options(self) -> tuple[str, ...]:
        """Java system properties the Kafka clients of a JVM need: the OAUTHBEARER token file's URL
        allowed (Kafka 4.0+ refuses every URL it is not told to allow; 3.9 allows all by default)."""
        url = self.token_url
        if url is None or self.sasl_mechanism != OAUTHBEARER:
            return ()
        return (f"-D{OAUTH_ALLOWED_URLS}={url}",)


def librdkafka_config(bootstrap: str, security: KafkaSecurity | None = None,
                      client: Client | None = None) -> dict[str, Any]:
    """``bootstrap.servers`` plus the security settings (and ``client``'s settings), for a
    confluent-kafka client."""
    return {"bootstrap.servers": bootstrap, **(security or PLAINTEXT).librdkafka(client)}


def spark_kafka_options(bootstrap: str, security: KafkaSecurity | None = None,
                        client: Literal["consumer", "producer"] | None = None) -> dict[str, str]:
    """``kafka.bootstrap.servers`` plus the security options (and ``client``'s settings), for Spark's
    Kafka source/sink."""
    return {"kafka.bootstrap.servers": bootstrap, **(security or PLAINTEXT).spark_options(client)}


def with_jvm_options(conf: Mapping[str, str], security: KafkaSecurity) -> dict[str, str]:
    """Spark settings ``conf`` with :meth:`KafkaSecurity.jvm_options` added to the driver's and the
    executors' ``extraJavaOptions`` (after the runtime's defaults or the settings' own)."""
    from sluice_runtime.session import DEFAULTS

    out = dict(conf)
    extra = security.jvm_options()
    if not extra:
        return out
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        base = out.get(key, DEFAULTS.get(key, ""))
        out[key] = " ".join(part for part in (base, *extra) if part)
    return out


@dataclass(frozen=True)
class FileToken:
    """confluent-kafka's ``oauth_cb``: the token in ``path`` (read at every refresh), its expiry (the
    JWT's ``exp``, seconds since the epoch) and principal (``sub``)."""

    path: str

    def __call__(self, config: str) -> tuple[str, float, str]:
        del config  # sasl.oauthbearer.config: unused
        token = Path(self.path).read_text(encoding="utf-8").strip()
        claims = token_claims(token)
        return token, claims.expires, claims.subject


def write_token(token: str) -> str:
    """A private copy of a Secret's token for the Java client (a file only this user reads: 0600 in
    a 0700 directory, removed when the process exits); returns its path."""
    folder = tempfile.mkdtemp(prefix="sluice-kafka-oauth-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token.strip())
    return path


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
    token, token_file = env.get(ENV_SASL_OAUTH_TOKEN), env.get(ENV_SASL_OAUTH_TOKEN_FILE)
    if token is not None and token_file is not None:
        raise KafkaSecurityError(f"{ENV_SASL_OAUTH_TOKEN} and {ENV_SASL_OAUTH_TOKEN_FILE} are both set: "
                                 "exactly one of them")
    if token is not None:
        try:
            token_claims(token)
        except ValueError as exc:
            raise KafkaSecurityError(f"{ENV_SASL_OAUTH_TOKEN}: {exc}") from exc
    values = _Values(
        tls=tls_text in _TRUE,
        ca=env.get(ENV_TLS_CA),
        cert=env.get(ENV_TLS_CERT),
        key=env.get(ENV_TLS_KEY),
        mechanism=mechanism,
        username=env.get(ENV_SASL_USERNAME),
        password=env.get(ENV_SASL_PASSWORD),
        token=token_file if token is None else "(the token)",
    )
    _check_values(values, _ENV_NAMES)
    if token_file is not None and not os.access(token_file, os.R_OK):
        raise KafkaSecurityError(f"{ENV_SASL_OAUTH_TOKEN_FILE}: {token_file} cannot be read by this process")
    client = EMPTY
    if env.get(ENV_CLIENT_SETTINGS):
        try:
            client = ClientSettings.from_json(env[ENV_CLIENT_SETTINGS])
        except ValueError as exc:
            raise KafkaSecurityError(f"{ENV_CLIENT_SETTINGS}: {exc}") from exc
    return KafkaSecurity(
        tls=values.tls,
        ca_pem=values.ca,
        cert_pem=values.cert,
        key_pem=values.key,
        sasl_mechanism=_as_mechanism(values.mechanism),
        sasl_username=values.username,
        sasl_password=values.password,
        oauth_token_file=write_token(token) if token is not None else token_file,
        client=client,
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
    token: str | None = None


def _as_mechanism(value: str | None) -> Mechanism | None:
    for mechanism in MECHANISMS:
        if value == mechanism:
            return mechanism
    return None


def _check(sec: KafkaSecurity, names: Mapping[str, str]) -> None:
    _check_values(
        _Values(sec.tls, sec.ca_pem, sec.cert_pem, sec.key_pem, sec.sasl_mechanism,
                sec.sasl_username, sec.sasl_password, sec.oauth_token_file),
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
    if v.mechanism is None and v.username is None and v.password is None and v.token is None:
        return
    if v.mechanism is None:
        present = next(names[p] for p, value in (("username", v.username), ("password", v.password),
                                                 ("token", v.token)) if value is not None)
        raise KafkaSecurityError(
            f"{present} is set but {names['mechanism']} is not (one of {', '.join(MECHANISMS)})"
        )
    if v.mechanism not in MECHANISMS:
        raise KafkaSecurityError(
            f"{names['mechanism']}: unknown SASL mechanism {v.mechanism!r} (one of {', '.join(MECHANISMS)})"
        )
    if v.mechanism == OAUTHBEARER:
        for part, value in (("username", v.username), ("password", v.password)):
            if value is not None:
                raise KafkaSecurityError(
                    f"{names[part]} is set but {OAUTHBEARER} takes a token, not a user name and password")
        if not v.token:
            raise KafkaSecurityError(f"{names['mechanism']} is {OAUTHBEARER} but {names['token']} is not set")
        return
    if v.token is not None:
        raise KafkaSecurityError(f"{names['token']} is set but {names['mechanism']} is not {OAUTHBEARER}")
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
