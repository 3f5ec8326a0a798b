"""A source's onDataLoss in the runtime, without Spark: the ``failOnDataLoss`` it reads with, the
skipped-offsets counter of the skipping sources (from progress reports shaped like the ones real
PySpark gave in tests/integration/test_source_data_loss_real.py), and the KafkaDataLoss error of a
failing one (from the text Spark 4 gave there)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice.core.plan.model import KafkaSourceV1, Plan
from sluice_runtime import reports
from sluice_runtime.metrics import RuntimeMetrics
from sluice_runtime.progress import offsets_without_rows
from sluice_runtime.steps.source import fail_on_data_loss, skipping_sources

from tests.support.runtime import plan_from_yaml

T = "2026-05-01T10:00:00Z"
SKIPPED = "sluice_source_skipped_offsets_total"


def make_plan(orders: str = "fail", refunds: str | None = "skip") -> Plan:
    plan = plan_from_yaml("""\
  sources:
    - name: orders
      topic: orders-2026
      schema: [{name: id, type: string}]
    - name: refunds
      topic: refunds
      schema: [{name: id, type: string}]
  sql: "SELECT id FROM orders UNION ALL SELECT id FROM refunds"
  sink: {topic: out}
""")
    wanted = {"orders": orders, "refunds": refunds}
    steps = [s.model_copy(update={"on_data_loss": wanted[s.source]}) if isinstance(s, KafkaSourceV1) else s
             for s in plan.steps]
    return plan.model_copy(update={"steps": steps}).with_hash()


def test_fail_reads_with_fail_on_data_loss_and_skip_or_an_older_plan_without() -> None:
    sources = {s.source: s for s in make_plan("fail", None).steps if isinstance(s, KafkaSourceV1)}
    assert fail_on_data_loss(sources["orders"]) == "true"
    assert fail_on_data_loss(sources["refunds"]) == "false"  # a plan compiled before onDataLoss
    assert fail_on_data_loss(sources["refunds"].model_copy(update={"on_data_loss": "skip"})) == "false"
    assert skipping_sources(make_plan("fail", None)) == {"refunds": "refunds"}
    assert skipping_sources(make_plan("skip", "skip")) == {"orders-2026": "orders", "refunds": "refunds"}


def source(start: dict[str, int] | None, end: dict[str, int], rows: int,
           topic: str = "refunds") -> dict[str, Any]:
    return {"description": f"KafkaV2[Subscribe[{topic}]]",
            "startOffset": json.dumps({topic: start}) if start is not None else None,
            "endOffset": json.dumps({topic: end}), "latestOffset": json.dumps({topic: end}),
            "numInputRows": rows}


def report(batch: int, *sources: dict[str, Any]) -> dict[str, Any]:
    return {"id": "i", "name": "q", "batchId": batch, "timestamp": f"2026-05-01T10:00:0{batch}.000Z",
            "numInputRows": sum(s["numInputRows"] for s in sources), "durationMs": {"addBatch": 5},
            "sources": list(sources)}


def test_the_offsets_a_batch_read_past_without_a_row_per_topic() -> None:
    # what real Spark reported after delete_records moved the log start from 10 to 15: the batch
    # still starts at the checkpoint's 10, reads 5 rows of [10, 20)
    assert offsets_without_rows(report(1, source({"0": 10}, {"0": 20}, 5))) == {"refunds": 5}
    two = source({"0": 10, "1": 4}, {"0": 20, "1": 9}, 12)
    assert offsets_without_rows(report(2, two, source({"0": 0}, {"0": 3}, 3, "orders-2026"))) == {
        "refunds": 3, "orders-2026": 0}


def test_a_first_batch_or_a_new_partition_has_no_known_start_and_counts_nothing() -> None:
    assert offsets_without_rows(report(0, source(None, {"0": 20}, 5))) == {}
    assert offsets_without_rows(report(3, source({"0": 10}, {"0": 20, "1": 7}, 5))) == {}
    assert offsets_without_rows({"sources": [{"startOffset": "not json", "endOffset": "{}"}]}) == {}


def test_the_counter_counts_the_skipping_sources_once_per_batch_and_from_zero() -> None:
    m = RuntimeMetrics()
    m.watch_skipping(skipping_sources(make_plan("fail", "skip")))
    first = report(1, source({"0": 10}, {"0": 20}, 5), source({"0": 0}, {"0": 9}, 2, "orders-2026"))
    m.observe_recent("q", [first, first], True)  # a report seen twice counts once
    assert m.registry.get_sample_value(SKIPPED, {"query": "q", "source": "refunds", "topic": "refunds"}) == 5
    # orders fails on data loss: no series (its shortfall here would be transaction markers)
    assert m.registry.get_sample_value(SKIPPED, {"query": "q", "source": "orders",
                                                 "topic": "orders-2026"}) is None
    m.observe_recent("q", [report(2, source({"0": 20}, {"0": 30}, 10))], True)
    assert m.registry.get_sample_value(SKIPPED, {"query": "q", "source": "refunds", "topic": "refunds"}) == 5
    m.set_role("standby")
    gone = m.registry.get_sample_value(SKIPPED, {"query": "q", "source": "refunds", "topic": "refunds"})
    assert gone is None


# the text of the exception real Spark 4 (connector 4.2) gave a query with onDataLoss fail after
# delete_records moved the log start past its checkpoint (abridged: frames and the Python traceback)
SPARK_DATA_LOSS = (
    "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach "
    "batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most "
    "recent call last):\n  File \"pipeline.py\", line 250, in write\n"
    "py4j.protocol.Py4JJavaError: An error occurred while calling o750.save.\n"
    ": org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have been lost because "
    "they are not available in Kafka any more;\neither the data was aged out by Kafka or the topic may "
    "have been deleted before all the data in the\ntopic was processed.\nIf you don't want your "
    "streaming query to fail on such cases, set the source option failOnDataLoss to false.\nReason: "
    "Could not read records in offset [10, 20) for topic partition orders-2026-0\nwith consumer group "
    "spark-kafka-source-0cd63d9b--1636452587-executor.\n"
    "Caused by: org.apache.kafka.clients.consumer.OffsetOutOfRangeException: Fetch position "
    "FetchPosition{offset=10} is out of range for partition orders-2026-0\n"
)


class Captured(Exception):
    def __init__(self, desc: str) -> None:
        super().__init__(desc)
        self._desc = desc


def test_spark_s_data_loss_error_is_kafka_data_loss_naming_source_topic_and_field() -> None:
    plan = make_plan("fail", "skip")
    error = reports.driver_error(plan, "h1", reports.ACTIVE, Captured(SPARK_DATA_LOSS), time=T)
    assert (error.error_class, error.step) == ("KafkaDataLoss", "source-orders")
    assert error.message.startswith("source 'orders' (topic 'orders-2026'): offsets [10, 20) of "
                                    "partition 0 are no longer in Kafka")
    assert "spec.sources[].onDataLoss" in error.message and "'skip'" in error.message


@pytest.mark.parametrize("text", [
    "Some data may have been lost because they are not available in Kafka any more; "
    "Partition refunds-3's offset was changed from 7 to 2, some data may have been missed",
    "Some data may have been lost because they are not available in Kafka any more",
])
def test_a_data_loss_found_while_planning_names_what_it_can(text: str) -> None:
    plan = make_plan("fail", "fail")
    lost = reports.data_loss(plan, text)
    assert lost is not None
    message, step = lost
    if "refunds-3" in text:
        assert (step, message.split(":")[0]) == ("source-refunds", "source 'refunds' (topic 'refunds')")
        assert "records of partition 3 are no longer in Kafka" in message
    else:  # two sources fail on data loss and the text names none
        assert (step, message.split(":")[0]) == (None, "a source")


def test_other_errors_are_not_data_loss() -> None:
    assert reports.data_loss(make_plan(), "[CAST_INVALID_INPUT] The value 'x'") is None
