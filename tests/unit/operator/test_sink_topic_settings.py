"""How the operator creates a sink topic (issue 32): partitions and replication from the query,
else the QueryCluster, else the broker's default replication; the query's cleanup policy."""

from __future__ import annotations

from sluice.core.spec import Sink
from sluice.crd.querycluster import KafkaSettings
from sluice.operator.kafka_admin import SinkTopic, sink_topic_settings

PLAIN = KafkaSettings.model_validate({"bootstrapServers": "k:9092"})


def test_without_a_replication_factor_anywhere_the_broker_s_default_applies() -> None:
    assert PLAIN.default_replication_factor is None
    settings = sink_topic_settings(Sink(topic="t"), PLAIN)
    assert settings == SinkTopic(partitions=1, replication=None, config={})
    assert settings.describe() == "1 partitions, replication the broker's default"


def test_the_query_s_settings_win_over_the_cluster_s() -> None:
    cluster = KafkaSettings.model_validate({"bootstrapServers": "k:9092", "defaultReplicationFactor": 3})
    assert sink_topic_settings(Sink(topic="t"), cluster).replication == 3
    own = sink_topic_settings(Sink(topic="t", replication_factor=2, partitions=4), cluster)
    assert (own.partitions, own.replication) == (4, 2)


def test_a_compacted_sink_topic_is_created_with_its_cleanup_policy() -> None:
    sink = Sink.model_validate({"topic": "t", "outputMode": "update", "key": ["k"],
                                "cleanupPolicy": "compact"})
    settings = sink_topic_settings(sink, PLAIN)
    assert settings.config == {"cleanup.policy": "compact"}
    assert settings.describe() == "1 partitions, replication the broker's default, cleanup.policy=compact"
    assert sink_topic_settings(Sink(topic="t", cleanup_policy="delete"), PLAIN).config == {
        "cleanup.policy": "delete"}
