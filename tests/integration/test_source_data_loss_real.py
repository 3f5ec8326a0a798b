"""A source's ``onDataLoss`` on a real broker and real PySpark (issue 32): records the checkpoint
has not read yet deleted (``delete_records`` moves the log start past it while the query is
stopped) stop a ``fail`` source with ``KafkaDataLoss`` and are skipped and counted by a ``skip``
one; a transactional input topic (committed and aborted transactions, their markers) is no data
loss, read committed (the compiler's plans) and uncommitted (plans compiled before the source's
isolationLevel existed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sluice.core.plan.model import KafkaSourceV1, Plan

from tests.support.runtime import consume_json, create_topic, plan_from_yaml, produce, shared_spark, unique

pytestmark = pytest.mark.integration

SKIPPED = "sluice_source_skipped_offsets_total"


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


def _plan(src: str, out: str, on_data_loss: str, rate: str = "") -> Any:
    return plan_from_yaml(f"""\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {src}
      onDataLoss: {on_data_loss}
{rate}      schema:
        - {{name: order_id, type: string}}
  sql: "SELECT order_id FROM orders"
  sink: {{topic: {out}}}
""")


def _run(spark: Any, plan: Any, kafka: str, checkpoint: Path, query_id: str) -> tuple[Any, list[Any]]:
    """One available-now run: the pipeline and the main query's progress reports."""
    from sluice_runtime.pipeline import build_pipeline
    from sluice_runtime.progress import ProgressTail

    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=query_id,
                          available_now=True)
    for q in pipe.all_queries():
        try:
            q.awaitTermination(300)
        except Exception:  # a failed query: its exception() tells
            pass
    return pipe, ProgressTail(pipe.main).poll()


def _delete_before(kafka: str, topic: str, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka})
    for future in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
        assert future.result(30).low_watermark == offset


def _orders(prefix: str, n: int) -> list[dict[str, str]]:
    return [{"order_id": f"{prefix}{i}"} for i in range(n)]


def _lose_records(spark: Any, kafka: str, tmp_path: Path,
                  on_data_loss: str) -> tuple[Any, Any, list[Any], str]:
    """10 records read into a checkpoint; 10 more written while the query is stopped, and the
    first 15 of all deleted (offsets 10..14 never read); the query run again."""
    src, out, query_id = unique("orders"), unique("out"), unique("q")
    create_topic(kafka, src)
    create_topic(kafka, out)
    plan = _plan(src, out, on_data_loss)
    produce(kafka, src, _orders("a", 10))
    first, _ = _run(spark, plan, kafka, tmp_path / "ck", query_id)
    assert first.main.exception() is None
    produce(kafka, src, _orders("b", 10))
    _delete_before(kafka, src, 15)
    pipe, progress = _run(spark, plan, kafka, tmp_path / "ck", query_id)
    return plan, pipe, progress, out


def test_fail_stops_the_query_with_kafka_data_loss_naming_source_topic_and_field(
        spark: Any, kafka: str, tmp_path: Path) -> None:
    from sluice_runtime import reports

    plan, pipe, _, out = _lose_records(spark, kafka, tmp_path, "fail")
    exc = pipe.main.exception()
    assert exc is not None
    error = reports.driver_error(plan, plan.hash, reports.ACTIVE, exc)
    topic = plan.steps[0].topic
    assert (error.error_class, error.step) == ("KafkaDataLoss", "source-orders")
    assert error.message.startswith(f"source 'orders' (topic '{topic}'): offsets [10, 20) of partition 0 "
                                    "are no longer in Kafka")
    assert "spec.sources[].onDataLoss" in error.message
    # nothing of the failed batch was written
    assert sorted(r["order_id"] for r in consume_json(kafka, out, expect=10)) == sorted(
        o["order_id"] for o in _orders("a", 10))


def test_skip_goes_on_from_the_earliest_offset_and_counts_the_skipped_offsets(
        spark: Any, kafka: str, tmp_path: Path) -> None:
    from sluice_runtime.metrics import RuntimeMetrics
    from sluice_runtime.steps.source import skipping_sources

    plan, pipe, progress, out = _lose_records(spark, kafka, tmp_path, "skip")
    assert pipe.main.exception() is None
    written = sorted(r["order_id"] for r in consume_json(kafka, out, expect=15))
    assert written == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(5, 10)])
    # Spark's own report: the batch starts at the checkpoint's offset 10, not at the new log start
    [batch] = [p for p in progress if p["numInputRows"]]
    [source] = batch["sources"]
    topic = plan.steps[0].topic
    offsets = [json.loads(source[key]) for key in ("startOffset", "endOffset")]
    assert (offsets, source["numInputRows"]) == ([{topic: {"0": 10}}, {topic: {"0": 20}}], 5)
    metrics = RuntimeMetrics()
    metrics.watch_skipping(skipping_sources(plan))
    metrics.observe_recent("q", progress, True)
    assert metrics.registry.get_sample_value(SKIPPED, {"query": "q", "source": "orders", "topic": topic}) == 5


def _transactions(kafka: str, topic: str) -> None:
    """Three transactions of 5 records each: committed, aborted, committed (offsets 0..17 with the
    three markers), then one record outside any transaction."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    for prefix, commit in (("c", True), ("x", False), ("d", True)):
        producer.begin_transaction()
        for record in _orders(prefix, 5):
            producer.produce(topic, value=str(record).replace("'", '"').encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    produce(kafka, topic, _orders("p", 1))


def _as_compiled_before(plan: Plan) -> Plan:
    """The plan as a compiler before ``isolationLevel`` made it: its sources read uncommitted."""
    steps = [s.model_copy(update={"isolation_level": None}) if isinstance(s, KafkaSourceV1) else s
             for s in plan.steps]
    return plan.model_copy(update={"steps": steps}).with_hash()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_fail_reads_a_transactional_topic_without_taking_its_markers_for_data_loss(
        spark: Any, kafka: str, tmp_path: Path, isolation: str) -> None:
    src, out = unique("tx-orders"), unique("out")
    create_topic(kafka, src)
    create_topic(kafka, out)
    _transactions(kafka, src)
    # at most 4 offsets a batch, so that batches start and end on markers and aborted records
    plan = _plan(src, out, "fail", rate="      maxOffsetsPerTrigger: 4\n")
    # the compiler's plans read committed; a plan compiled before the field reads uncommitted
    assert [s.isolation_level for s in plan.steps if isinstance(s, KafkaSourceV1)] == ["read_committed"]
    if isolation == "read_uncommitted":
        plan = _as_compiled_before(plan)
    pipe, progress = _run(spark, plan, kafka, tmp_path / "ck", unique("q"))
    assert pipe.main.exception() is None
    aborted = [] if isolation == "read_committed" else [f"x{i}" for i in range(5)]
    expected = sorted([f"c{i}" for i in range(5)] + [f"d{i}" for i in range(5)] + aborted + ["p0"])
    assert sorted(r["order_id"] for r in consume_json(kafka, out, expect=len(expected))) == expected
    ends = [json.loads(p["sources"][0]["endOffset"])[src]["0"] for p in progress if p["numInputRows"]]
    assert len(ends) >= 4 and ends[-1] == 19  # 16 records and 3 markers
    # what the skipped-offsets counter would count here with skip: the offsets without a row, the
    # markers (and the aborted records read_committed), though nothing was lost
    from sluice_runtime.progress import offsets_without_rows, ran_a_batch

    shortfall = sum(offsets_without_rows(p).get(src, 0) for p in progress if ran_a_batch(p))
    assert shortfall == (3 + 5 if isolation == "read_committed" else 3)
