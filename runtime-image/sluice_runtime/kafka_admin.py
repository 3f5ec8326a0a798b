"""Small Kafka helpers of the runtime (confluent-kafka AdminClient).

:func:`connect` is the runtime's first contact with the brokers: it fails fast, with a
:class:`KafkaSetupError` naming the address and the security protocol, when the brokers refuse the
client's TLS or SASL settings (instead of waiting out the timeout and failing with a bare
``KafkaException``), and after ``timeout`` seconds when they cannot be reached at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from sluice_runtime.kafka_security import KafkaSecurity, librdkafka_config

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0


class KafkaSetupError(RuntimeError):
    """The brokers cannot be used with the configured address and security settings."""


def _refusals() -> frozenset[int]:
    """librdkafka error codes that retrying cannot fix (TLS/SASL refused, authorisation)."""
    from confluent_kafka import KafkaError

    return frozenset({
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError._FATAL,
    })


def _refused(error: Any, refusals: frozenset[int]) -> bool:
    from confluent_kafka import KafkaError

    if error.code() in refusals:
        return True
    return bool(error.code() == KafkaError._TRANSPORT and "SSL handshake failed" in error.str())


class _DebugLog:
    """librdkafka's log lines at DEBUG: it repeats every connection failure; the errors that
    matter reach the caller through ``error_cb`` (see :func:`connect`)."""

    def log(self, level: int, fmt: str, *args: Any) -> None:
        del level
        log.debug(fmt, *args)


def describe(bootstrap: str, security: KafkaSecurity) -> str:
    mechanism = f", sasl.mechanism={security.sasl_mechanism}" if security.sasl_mechanism else ""
    return f"Kafka at {bootstrap} (security.protocol={security.protocol}{mechanism})"


def connect(
    bootstrap: str, security: KafkaSecurity | None = None, timeout: float = DEFAULT_TIMEOUT
) -> tuple[Any, set[str]]:
    """An AdminClient that reached the brokers, and the topics they have."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    security = security or KafkaSecurity()
    problem = security.token_problem(time.time())
    if problem is not None:  # librdkafka would wait 10 s for a token it refuses, and not say why
        raise KafkaSetupError(f"{describe(bootstrap, security)}: {problem}")
    errors: list[Any] = []
    conf: dict[str, Any] = {
        **librdkafka_config(bootstrap, security, "admin"),
        "error_cb": errors.append,
        "logger": _DebugLog(),
    }
    try:
        admin = AdminClient(conf)
    except KafkaException as exc:  # e.g. no OAUTHBEARER token in time
        raise KafkaSetupError(f"{describe(bootstrap, security)}: cannot create a client: {exc}") from exc
    refusals = _refusals()
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            metadata = admin.list_topics(timeout=max(0.1, min(2.0, remaining)))
            return admin, set(metadata.topics)
        except KafkaException as exc:
            admin.poll(0)  # deliver pending error callbacks
            refused = [e for e in errors if _refused(e, refusals)]
            if refused:
                raise KafkaSetupError(
                    f"{describe(bootstrap, security)} refused the connection: {refused[-1].str()} "
                    "(check the TLS/SASL settings, SLUICE_KAFKA_*, against the broker's listener)"
                ) from exc
            if time.monotonic() >= deadline:
                last = errors[-1].str() if errors else str(exc)
                raise KafkaSetupError(
                    f"{describe(bootstrap, security)} not reachable within {timeout:.0f}s: {last}"
                ) from exc


def ensure_topics(
    bootstrap: str,
    topics: Iterable[str],
    partitions: int = 1,
    security: KafkaSecurity | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> None:
    """Create the topics that do not exist yet (the operator normally did already)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin, existing = connect(bootstrap, security, timeout)
    missing = [t for t in dict.fromkeys(topics) if t not in existing]
    if not missing:
        return
    futures = admin.create_topics([NewTopic(t, num_partitions=partitions) for t in missing])
    for topic, fut in futures.items():
        try:
            fut.result(timeout)
            log.info("created topic %s", topic)
        except KafkaException as exc:
            if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
