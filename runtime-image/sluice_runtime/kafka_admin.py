"""Small Kafka helpers of the runtime (confluent-kafka AdminClient)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


def ensure_topics(
    bootstrap: str, topics: Iterable[str], partitions: int = 1, extra: dict[str, str] | None = None
) -> None:
    """Create the topics that do not exist yet (the operator normally did already)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    conf: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap}
    conf.update({k.removeprefix("kafka."): v for k, v in (extra or {}).items()})
    admin = AdminClient(conf)
    existing = set(admin.list_topics(timeout=30).topics)
    missing = [t for t in dict.fromkeys(topics) if t not in existing]
    if not missing:
        return
    futures = admin.create_topics([NewTopic(t, num_partitions=partitions) for t in missing])
    for topic, fut in futures.items():
        try:
            fut.result(30)
            log.info("created topic %s", topic)
        except KafkaException as exc:
            if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
