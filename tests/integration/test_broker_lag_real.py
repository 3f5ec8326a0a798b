"""The lag measured at a real broker (``sluice_runtime.brokerlag``): between progress reports the
driver asks the brokers for the latest stable offsets of the partitions its queries' last reports
ended at, so the lag grows while nothing reports (a hung batch or JVM, a query that had caught up).
Records of an open transaction are not counted until it commits (the sources read committed)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sluice_runtime.brokerlag import BrokerLag
from sluice_runtime.metrics import RuntimeMetrics

from tests.support.runtime import create_topic, produce, unique

pytestmark = pytest.mark.integration

LAG = "sluice_kafka_lag_records"


def report(topic: str, ends: dict[int, int], batch: int = 3) -> dict[str, Any]:
    """A progress report of a batch that ended at ``ends`` and saw nothing newer (caught up)."""
    offsets = json.dumps({topic: {str(p): o for p, o in ends.items()}})
    return {"batchId": batch, "numInputRows": sum(ends.values()), "timestamp": "2026-11-27T10:00:00.000Z",
            "durationMs": {"triggerExecution": 100},
            "sources": [{"description": f"KafkaV2[Subscribe[{topic}]]", "startOffset": None,
                         "endOffset": offsets, "latestOffset": offsets, "numInputRows": sum(ends.values())}]}


def lag_of(metrics: RuntimeMetrics, topic: str, partition: int) -> float | None:
    return metrics.registry.get_sample_value(LAG, {"query": "q", "topic": topic, "partition": str(partition)})


def test_the_lag_grows_at_the_broker_while_no_batch_reports(kafka: str) -> None:
    topic = unique("lag")
    create_topic(kafka, topic, partitions=2)
    produce(kafka, topic, [{"i": i} for i in range(5)])
    metrics = RuntimeMetrics()
    metrics.set_role("active")
    # the query read everything there was: its last report says so, with a lag of 0
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka, "group.id": unique("g")})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
    consumer.close()
    metrics.observe_progress("q", report(topic, ends), True)
    assert [lag_of(metrics, topic, p) for p in (0, 1)] == [0, 0]

    produce(kafka, topic, [{"i": i} for i in range(7)])  # records arrive; no batch reports them
    probe = BrokerLag(metrics, kafka, None)
    probe.measure()
    assert sum(lag_of(metrics, topic, p) or 0 for p in (0, 1)) == 7

    # an open transaction is not readable yet (read_committed): its records are no lag until committed
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(4):
        producer.produce(topic, value=b"{}", partition=0)
    producer.flush(30)
    probe.measure()
    assert sum(lag_of(metrics, topic, p) or 0 for p in (0, 1)) == 7
    producer.commit_transaction(30)
    deadline = time.monotonic() + 15  # the coordinator writes the markers after the commit returns
    while sum(lag_of(metrics, topic, p) or 0 for p in (0, 1)) == 7 and time.monotonic() < deadline:
        time.sleep(0.5)
        probe.measure()
    assert sum(lag_of(metrics, topic, p) or 0 for p in (0, 1)) == 7 + 4 + 1  # and the commit marker

    # a driver back to standby has no series, and the probe adds none
    metrics.set_role("standby")
    probe.measure()
    assert lag_of(metrics, topic, 0) is None
