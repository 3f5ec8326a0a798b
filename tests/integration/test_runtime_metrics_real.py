"""A driver's metrics from real progress reports: a plan-built windowed aggregation on a real
broker and real PySpark (its pinned RocksDB state store), run twice on one checkpoint with
available-now; the second run reads rows older than the watermark the first one left. The reports
go through what the driver's monitor does (``ProgressTail`` into ``RuntimeMetrics``)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtime import create_topic, plan_from_yaml, produce, shared_spark, ts, unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


def _plan(topic: str, out: str) -> Any:
    return plan_from_yaml(f"""\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {topic}
      schema:
        - {{name: order_id, type: string}}
        - {{name: customer, type: string}}
        - {{name: ts, type: timestamp}}
      eventTime: {{column: ts, watermark: 1 minute}}
  sql: "SELECT window(ts, '5 minutes') AS w, customer, count(*) AS n FROM orders
    GROUP BY window(ts, '5 minutes'), customer"
  sink: {{topic: {out}, outputMode: update}}
""")


def _orders(minutes: list[float], prefix: str) -> list[dict[str, Any]]:
    return [{"order_id": f"{prefix}{i}", "customer": f"c{i % 3}", "ts": ts(m)} for i, m in enumerate(minutes)]


def _run(spark: Any, plan: Any, kafka: str, checkpoint: Path, query_id: str) -> list[Any]:
    """One available-now run: the progress reports the monitor would have read."""
    from sluice_runtime.pipeline import build_pipeline
    from sluice_runtime.progress import ProgressTail

    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=query_id,
                          available_now=True)
    pipe.main.awaitTermination(300)
    assert pipe.main.exception() is None
    return ProgressTail(pipe.main, pipe.scans).poll()  # as the monitor reads them: each record once


def _unix(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_late_rows_watermark_and_state_from_a_real_windowed_aggregation(
        spark: Any, kafka: str, tmp_path: Path) -> None:
    from sluice_runtime.metrics import RuntimeMetrics
    from sluice_runtime.progress import ran_a_batch

    src, out, query_id = unique("orders"), unique("out"), unique("q")
    create_topic(kafka, src)
    create_topic(kafka, out)
    plan = _plan(src, out)
    metrics = RuntimeMetrics()
    name = "sluice-metrics-test"

    def value(metric: str) -> float | None:
        return metrics.registry.get_sample_value(metric, {"query": name})

    produce(kafka, src, _orders([m / 2 for m in range(21)], "a"))  # 10:00 .. 10:10
    first = _run(spark, plan, kafka, tmp_path / "ck", query_id)
    metrics.observe_recent(name, first, True)
    assert value("sluice_rows_dropped_by_watermark_total") == 0
    assert value("sluice_input_rows_total") == 21

    late = _orders([1.0, 2.0, 3.5], "late")  # older than the watermark (10:09)
    produce(kafka, src, [*late, *_orders([12.0, 12.5], "b")])
    started = time.time()
    # RocksDB with changelog checkpointing (the plan pins it) writes SST files when it takes a
    # snapshot, every 10th version by default: at every commit here, so that there are some
    snapshots = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
    before = spark.conf.get(snapshots, None)
    spark.conf.set(snapshots, "1")
    try:
        second = _run(spark, plan, kafka, tmp_path / "ck", query_id)
    finally:
        if before is None:
            spark.conf.unset(snapshots)
        else:
            spark.conf.set(snapshots, before)
    metrics.observe_recent(name, second, True)

    ran = [p for p in [*first, *second] if ran_a_batch(p)]
    assert value("sluice_batches_total") == len(ran)
    assert value("sluice_input_rows_total") == 26
    assert value("sluice_rows_dropped_by_watermark_total") == len(late)
    last = ran[-1]
    assert value("sluice_last_committed_batch_id") == last["batchId"]
    committed = value("sluice_last_commit_timestamp_seconds")
    assert committed is not None and started - 5 <= committed <= time.time() + 5
    duration = last["durationMs"]["triggerExecution"] / 1000
    assert committed == pytest.approx(_unix(last["timestamp"]) + duration)
    # the watermark: the newest event time seen (10:12:30 at most) minus 1 minute, far behind now
    newest = second[-1]
    watermark = _unix(newest["eventTime"]["watermark"])
    assert _unix(ts(9)) <= watermark <= _unix(ts(11.5))
    assert value("sluice_watermark_delay_seconds") == pytest.approx(_unix(newest["timestamp"]) - watermark)
    # state: the open windows' rows, in RocksDB (the plan pins it) with its files on disk
    assert (value("sluice_state_rows") or 0) > 0
    assert (value("sluice_state_memory_bytes") or 0) > 0
    sst = sum(op["customMetrics"]["rocksdbSstFileSize"] for op in last["stateOperators"])
    assert value("sluice_state_disk_bytes") == sst > 0
    assert value("sluice_batch_duration_seconds") == duration
