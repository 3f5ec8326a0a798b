"""Kafka administration: create sink topics when missing, delete them only when told to.

Every call is bounded by a timeout; callers turn failures into conditions and retries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from sluice.core import kafkaclient
from sluice.core.spec import Sink
from sluice.crd.querycluster import KafkaSettings

DEFAULT_TIMEOUT = 10.0


class KafkaUnavailable(Exception):
    """The brokers could not be reached (or did not answer in time)."""


@dataclass(frozen=True)
class TopicResult:
    topic: str
    created: bool


def admin_config(kafka: KafkaSettings, secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """librdkafka settings; TLS/SASL values come from Secrets the caller resolved into ``secrets``
    (``ca``, ``cert``, ``key``, ``username``, ``password``, ``token``). The cluster's admin client
    settings (``spec.kafka.clientSettings.admin``, librdkafka names) replace the operator's defaults
    (timeouts, back-off); the address and the security settings are the operator's."""
    conf: dict[str, Any] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "socket.timeout.ms": int(DEFAULT_TIMEOUT * 1000),
        "reconnect.backoff.max.ms": 2000,
        "logger": logging.getLogger("sluice.kafka"),  # librdkafka logs through Python logging
    }
    conf.update(kafka.client().librdkafka("admin"))
    secrets = secrets or {}
    protocol = None
    if kafka.tls is not None:
        protocol = "SSL"
        for key, prop in (("ca", "ssl.ca.pem"), ("cert", "ssl.certificate.pem"), ("key", "ssl.key.pem")):
            if key in secrets:
                conf[prop] = secrets[key]
    if kafka.sasl is not None:
        protocol = "SASL_SSL" if protocol else "SASL_PLAINTEXT"
        conf["sasl.mechanism"] = kafka.sasl.mechanism
        if kafka.sasl.mechanism == "OAUTHBEARER":
            conf["oauth_cb"] = OAuthToken(secrets.get("token"), kafka.sasl.token_file)
        else:
            conf["sasl.username"] = secrets.get("username", "")
            conf["sasl.password"] = secrets.get("password", "")
    if protocol:
        conf["security.protocol"] = protocol
    return conf


@dataclass(frozen=True)
class OAuthToken:
    """confluent-kafka's ``oauth_cb`` of SASL/OAUTHBEARER: the token of a Secret (``token``), or read from
    ``path`` at every refresh (the same path as in the drivers' pods, read in the operator's pod: e.g.
    its own service-account token). Returns (token, expiry in seconds since the epoch, principal)."""

    token: str | None = field(default=None, repr=False)
    path: str | None = None

    def __call__(self, config: str) -> tuple[str, float, str]:
        del config  # sasl.oauthbearer.config: unused
        if self.token is not None:
            text = self.token
        elif self.path is not None:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read()
        else:
            raise ValueError("no OAUTHBEARER token: neither tokenSecret nor tokenFile")
        text = text.strip()
        claims = kafkaclient.token_claims(text)
        return text, claims.expires, claims.subject


class TopicAdmin:
    def __init__(self, conf: dict[str, Any], timeout: float = DEFAULT_TIMEOUT) -> None:
        from confluent_kafka.admin import AdminClient

        self.timeout = timeout
        self.client = AdminClient(conf)

    def topics(self) -> set[str]:
        try:
            meta = self.client.list_topics(timeout=self.timeout)
        except Exception as exc:  # KafkaException on timeouts / transport failures
            raise KafkaUnavailable(f"cannot list topics: {exc}") from exc
        return set(meta.topics)

    def ensure_topic(self, topic: str, settings: SinkTopic) -> TopicResult:
        """Create ``topic`` with ``settings`` unless it exists (an existing topic is never altered)."""
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewTopic

        if topic in self.topics():
            return TopicResult(topic, created=False)
        new = NewTopic(topic, num_partitions=settings.partitions,
                       replication_factor=settings.replication if settings.replication is not None else -1,
                       config=dict(settings.config))
        futures = self.client.create_topics([new], request_timeout=self.timeout,
                                            operation_timeout=self.timeout)
        try:
            futures[topic].result(timeout=self.timeout + 5)
        except Exception as exc:
            err = exc.args[0] if exc.args else None
            if getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                return TopicResult(topic, created=False)
            raise KafkaUnavailable(f"cannot create topic {topic!r}: {exc}") from exc
        return TopicResult(topic, created=True)

    def delete_topic(self, topic: str) -> bool:
        from confluent_kafka import KafkaError

        if topic not in self.topics():
            return False
        futures = self.client.delete_topics([topic], request_timeout=self.timeout,
                                            operation_timeout=self.timeout)
        try:
            futures[topic].result(timeout=self.timeout + 5)
        except Exception as exc:
            err = exc.args[0] if exc.args else None
            if getattr(err, "code", lambda: None)() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return False
            raise KafkaUnavailable(f"cannot delete topic {topic!r}: {exc}") from exc
        return True


    def groups(self) -> list[str]:
        """Every consumer group the brokers know."""
        try:
            result = self.client.list_consumer_groups(request_timeout=self.timeout).result()
        except Exception as exc:
            raise KafkaUnavailable(f"cannot list consumer groups: {exc}") from exc
        return sorted(g.group_id for g in result.valid)

    def delete_groups(self, names: list[str]) -> list[str]:
        """Delete the groups (each must be empty: no member); returns those deleted now."""
        from confluent_kafka import KafkaError

        if not names:
            return []
        futures = self.client.delete_consumer_groups(names, request_timeout=self.timeout)
        deleted = []
        for name, future in futures.items():
            try:
                future.result()
                deleted.append(name)
            except Exception as exc:
                err = exc.args[0] if exc.args else None
                if getattr(err, "code", lambda: None)() == KafkaError.GROUP_ID_NOT_FOUND:
                    continue
                raise KafkaUnavailable(f"cannot delete consumer group {name!r}: {exc}") from exc
        return sorted(deleted)


@dataclass(frozen=True)
class SinkTopic:
    """How the operator creates a sink topic that does not exist yet."""

    partitions: int
    #: None: the broker's default.replication.factor (``replication_factor=-1``, Kafka 2.4+)
    replication: int | None
    #: topic configs set at creation (``cleanup.policy``); absent keys take the broker's defaults
    config: dict[str, str]

    def describe(self) -> str:
        """``6 partitions, replication 3, cleanup.policy=compact`` (for events)."""
        replication = self.replication if self.replication is not None else "the broker's default"
        extra = "".join(f", {key}={value}" for key, value in sorted(self.config.items()))
        return f"{self.partitions} partitions, replication {replication}{extra}"


def sink_topic_settings(sink: Sink, kafka: KafkaSettings) -> SinkTopic:
    """A new sink topic: partitions and replication the spec's, else the cluster's defaults (no
    replication anywhere: the broker's default); the spec's cleanup policy as its ``cleanup.policy``."""
    config: dict[str, str] = {"cleanup.policy": sink.cleanup_policy} if sink.cleanup_policy else {}
    return SinkTopic(
        partitions=sink.partitions or kafka.default_partitions,
        replication=sink.replication_factor or kafka.default_replication_factor,
        config=config,
    )
