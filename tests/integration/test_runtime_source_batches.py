"""A source's batch sizing on a real broker and real PySpark (issue 31): maxOffsetsPerTrigger splits a
backlog into several batches under Trigger.AvailableNow (counted in the checkpoint's commits/ and in the
query's progress), and minPartitions raises the number of tasks a stateless batch reads a one-partition
topic with (counted in the Spark stages of the query's batches)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.core.plan.model import KafkaSourceV1, Plan

from tests.support.runtime import consume_json, create_topic, plan_from_yaml, produce, shared_spark, unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


def _plan(topic: str, sink: str, extra: str = "") -> Plan:
    """A stateless plan over ``topic``; ``extra``: one more field of the source (``minPartitions: 4``).
    Malformed records are skipped: a micro-batch's tasks are then those reading the source (with
    dead letters, the batch read once is persisted and written in two branches)."""
    extra = f"      {extra}\n" if extra else ""
    return plan_from_yaml(f"""\
  sources:
    - name: orders
      topic: {topic}
      malformed: {{policy: skip}}
{extra}      schema: [{{name: order_id, type: string}}, {{name: amount, type: double}}]
  sql: "SELECT order_id, amount FROM orders WHERE amount >= 0"
  sink: {{topic: {sink}}}
""")


def _run(spark: Any, plan: Plan, kafka: str, checkpoint: Path) -> tuple[Any, list[int]]:
    """Run the plan with AvailableNow until the backlog is read; the main query and the ids of the Spark
    jobs its batches ran."""
    from sluice_runtime.pipeline import build_pipeline

    tracker = spark.sparkContext.statusTracker()
    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=unique("q"),
                          available_now=True)
    for q in pipe.all_queries():
        q.awaitTermination(300)
    if pipe.eos_sink is not None:  # the sink's default delivery is exactly-once
        pipe.eos_sink.close()
    return pipe.main, sorted(tracker.getJobIdsForGroup(str(pipe.main.runId)))


def _orders(n: int) -> list[dict[str, Any]]:
    return [{"order_id": f"o{i}", "amount": float(i)} for i in range(n)]


def _commits(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def test_max_offsets_per_trigger_splits_a_backlog_into_batches(spark: Any, kafka: str,
                                                               tmp_path: Path) -> None:
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src, partitions=2)
    produce(kafka, src, _orders(95))
    plan = _plan(src, out, "maxOffsetsPerTrigger: 20")
    assert next(s for s in plan.steps if isinstance(s, KafkaSourceV1)).max_offsets_per_trigger == 20

    query, _ = _run(spark, plan, kafka, tmp_path / "ckpt")

    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(rows) == 95
    assert max(rows) <= 20 and len(rows) >= 5, rows  # 95 records, at most 20 a batch
    assert len(_commits(tmp_path / "ckpt")) >= 5
    written = sorted(r["order_id"] for r in consume_json(kafka, out, expect=95))
    assert written == sorted(f"o{i}" for i in range(95))


def test_the_default_reads_a_small_backlog_in_one_batch(spark: Any, kafka: str, tmp_path: Path) -> None:
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src)
    produce(kafka, src, _orders(95))
    query, _ = _run(spark, _plan(src, out), kafka, tmp_path / "ckpt")  # 1,000,000 pinned by the compiler
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [95]


def _tasks(spark: Any, jobs: list[int]) -> int:
    tracker = spark.sparkContext.statusTracker()
    stages = [s for j in jobs if (info := tracker.getJobInfo(j)) is not None for s in info.stageIds]
    return max(info.numTasks for s in stages if (info := tracker.getStageInfo(s)) is not None)


def test_min_partitions_raises_the_tasks_of_a_stateless_batch(spark: Any, kafka: str, tmp_path: Path) -> None:
    src = unique("orders")
    create_topic(kafka, src)  # one partition: one task per batch unless minPartitions says more
    produce(kafka, src, _orders(80))

    plain_out, split_out = unique("out"), unique("out")
    _, plain_jobs = _run(spark, _plan(src, plain_out), kafka, tmp_path / "plain")
    _, split_jobs = _run(spark, _plan(src, split_out, "minPartitions: 4"), kafka, tmp_path / "split")

    assert plain_jobs and split_jobs
    assert _tasks(spark, plain_jobs) == 1
    assert _tasks(spark, split_jobs) == 4
    assert len(consume_json(kafka, split_out, expect=80)) == 80
