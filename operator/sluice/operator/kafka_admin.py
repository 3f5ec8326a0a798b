"""Kafka administration: create sink topics when missing, delete them only when told to.

Every call is bounded by a timeout; callers turn failures into conditions and retries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sluice.crd.querycluster import KafkaSettings

DEFAULT_TIMEOUT = 10.0


class KafkaUnavailable(Exception):
    """The brokers could not be reached (or did not answer in time)."""


@dataclass(frozen=True)
class TopicResult:
    topic: str
    created: bool


def admin_config(kafka: KafkaSettings, secrets: dict[str, str] | None = None) -> dict[str, Any]:
    """librdkafka settings; TLS/SASL values come from Secrets the caller resolved into ``secrets``."""
    conf: dict[str, Any] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "socket.timeout.ms": int(DEFAULT_TIMEOUT * 1000),
        "reconnect.backoff.max.ms": 2000,
        "logger": logging.getLogger("sluice.kafka"),  # librdkafka logs through Python logging
    }
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
        conf["sasl.username"] = secrets.get("username", "")
        conf["sasl.password"] = secrets.get("password", "")
    if protocol:
        conf["security.protocol"] = protocol
    return conf


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

    def ensure_topic(self, topic: str, partitions: int, replication: int) -> TopicResult:
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewTopic

        if topic in self.topics():
            return TopicResult(topic, created=False)
        futures = self.client.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication)],
            request_timeout=self.timeout, operation_timeout=self.timeout,
        )
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


def sink_topic_settings(spec_partitions: int | None, spec_replication: int | None,
                        kafka: KafkaSettings) -> tuple[int, int]:
    """Partitions and replication of a new sink topic: the spec's, else the cluster's defaults."""
    return (
        spec_partitions or kafka.default_partitions,
        spec_replication or kafka.default_replication_factor,
    )
