"""Sink topics the operator creates, as the real broker describes them (issue 32): without a
replication factor in the query or the QueryCluster the broker's default.replication.factor
applies (``replication_factor=-1``); a query's cleanupPolicy is the topic's cleanup.policy; an
existing topic is never altered."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.core.spec import Sink
from sluice.crd.querycluster import KafkaSettings
from sluice.operator.kafka_admin import TopicAdmin, admin_config, sink_topic_settings

from tests.support.runtime import create_topic, unique

pytestmark = pytest.mark.integration


def _describe(kafka: str, topic: str) -> tuple[int, int, str]:
    """(partitions, replicas of partition 0, cleanup.policy) of ``topic`` as the broker says."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": kafka})
    meta = admin.list_topics(topic, timeout=30).topics[topic]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    return len(meta.partitions), len(meta.partitions[0].replicas), str(configs["cleanup.policy"].value)


def _broker_default_replication(kafka: str) -> int:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": kafka})
    broker = next(iter(admin.list_topics(timeout=30).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    return int(admin.describe_configs([resource])[resource].result(30)["default.replication.factor"].value)


@pytest.fixture
def admin(kafka: str) -> Any:
    return TopicAdmin(admin_config(KafkaSettings.model_validate({"bootstrapServers": kafka})))


def test_a_topic_without_a_replication_factor_gets_the_broker_s_default(kafka: str, admin: Any) -> None:
    cluster = KafkaSettings.model_validate({"bootstrapServers": kafka, "defaultPartitions": 3})
    topic = unique("sink")
    settings = sink_topic_settings(Sink(topic=topic), cluster)
    assert settings.replication is None
    assert admin.ensure_topic(topic, settings).created
    assert _describe(kafka, topic) == (3, _broker_default_replication(kafka), "delete")


def test_a_compacted_sink_topic_is_created_compacted_and_an_existing_one_is_left_alone(
        kafka: str, admin: Any) -> None:
    cluster = KafkaSettings.model_validate({"bootstrapServers": kafka, "defaultReplicationFactor": 1})
    topic = unique("table")
    sink = Sink.model_validate({"topic": topic, "outputMode": "update", "key": ["k"],
                                "cleanupPolicy": "compact", "partitions": 2})
    assert admin.ensure_topic(topic, sink_topic_settings(sink, cluster)).created
    assert _describe(kafka, topic) == (2, 1, "compact")
    existing = unique("existing")
    create_topic(kafka, existing)
    result = admin.ensure_topic(existing, sink_topic_settings(sink.model_copy(update={"topic": existing}),
                                                              cluster))
    assert not result.created
    assert _describe(kafka, existing) == (1, 1, "delete")
