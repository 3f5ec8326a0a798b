"""A driver's metrics from Spark 4's progress reports (``sluice_runtime.metrics``), fed the reports
recorded from real PySpark in ``tests/corpus/progress/spark-4.3.json``: a RocksDB windowed
aggregation dropping late rows, and a query going idle (idle triggers report the *next* batch id)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from sluice_runtime import progress as reports
from sluice_runtime.metrics import RuntimeMetrics

from tests.support.paths import CORPUS

RECORDED = json.loads((CORPUS / "progress" / "spark-4.3.json").read_text())
ROCKSDB: list[dict[str, Any]] = RECORDED["rocksdbWindow"]
IDLE: list[dict[str, Any]] = RECORDED["hdfsIdle"]


def unix(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def value(m: RuntimeMetrics, name: str, query: str = "q") -> float | None:
    return m.registry.get_sample_value(name, {"query": query})


def test_a_stateful_query_s_watermark_state_and_late_rows() -> None:
    m = RuntimeMetrics()
    m.observe_recent("q", ROCKSDB, True)
    last = ROCKSDB[-1]
    op = last["stateOperators"][0]
    assert value(m, "sluice_rows_dropped_by_watermark_total") == sum(
        p["stateOperators"][0]["numRowsDroppedByWatermark"] for p in ROCKSDB) == 3
    assert value(m, "sluice_state_rows") == op["numRowsTotal"]
    assert value(m, "sluice_state_memory_bytes") == op["memoryUsedBytes"]
    assert value(m, "sluice_state_disk_bytes") == op["customMetrics"]["rocksdbSstFileSize"] == 5005
    # processing time (the trigger's start) minus the event-time watermark
    delay = unix(last["timestamp"]) - unix(last["eventTime"]["watermark"])
    assert value(m, "sluice_watermark_delay_seconds") == pytest.approx(delay) == pytest.approx(3.093)
    assert value(m, "sluice_input_rows_per_second") == last["inputRowsPerSecond"]
    assert value(m, "sluice_processed_rows_per_second") == last["processedRowsPerSecond"]
    assert value(m, "sluice_batch_duration_seconds") == last["durationMs"]["triggerExecution"] / 1000
    committed = unix(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000
    assert value(m, "sluice_last_commit_timestamp_seconds") == pytest.approx(committed)
    assert value(m, "sluice_last_committed_batch_id") == last["batchId"] == 16
    assert value(m, "sluice_batches_total") == 2
    assert value(m, "sluice_input_rows_total") == 100


def test_idle_triggers_are_not_the_batch_whose_id_they_report() -> None:
    m = RuntimeMetrics()
    batches, idle = IDLE[:4], IDLE[4:]
    assert [p["batchId"] for p in idle] == [4, 4] and not any(reports.ran_a_batch(p) for p in idle)
    m.observe_recent("q", batches, True)
    m.observe_recent("q", idle, True)
    assert value(m, "sluice_last_committed_batch_id") == 3  # batch 4 has not run
    assert value(m, "sluice_batches_total") == 4
    committed = unix(batches[-1]["timestamp"]) + batches[-1]["durationMs"]["triggerExecution"] / 1000
    assert value(m, "sluice_last_commit_timestamp_seconds") == pytest.approx(committed)
    assert value(m, "sluice_batch_duration_seconds") == batches[-1]["durationMs"]["triggerExecution"] / 1000
    assert value(m, "sluice_input_rows_per_second") == 0.0  # idle: nothing comes in
    # the watermark stands still while idle: its delay grows with every idle trigger's time
    delay = unix(idle[-1]["timestamp"]) - unix(idle[-1]["eventTime"]["watermark"])
    assert value(m, "sluice_watermark_delay_seconds") == pytest.approx(delay)
    # batch 4 runs when input comes: it counts then, once
    ran = {**idle[-1], "timestamp": "2026-11-27T03:12:10.000Z", "numInputRows": 2,
           "durationMs": {**idle[-1]["durationMs"], "addBatch": 300, "triggerExecution": 400}}
    m.observe_recent("q", [ran, ran], True)
    assert value(m, "sluice_last_committed_batch_id") == 4 and value(m, "sluice_batches_total") == 5
    assert value(m, "sluice_input_rows_total") == 6


def test_late_rows_and_watermark_of_the_default_state_store() -> None:
    m = RuntimeMetrics()
    m.observe_recent("q", IDLE[:1], True)
    # batch 0: no watermark yet (Spark reports the epoch); no RocksDB: no disk size
    assert IDLE[0]["eventTime"]["watermark"] == "1970-01-01T00:00:00.000Z"
    assert value(m, "sluice_watermark_delay_seconds") is None
    assert value(m, "sluice_state_disk_bytes") is None
    assert value(m, "sluice_rows_dropped_by_watermark_total") == 0  # from the first batch: rate() sees a drop
    m.observe_recent("q", IDLE[1:4], True)
    assert value(m, "sluice_rows_dropped_by_watermark_total") == 1  # batch 2's late row
    assert value(m, "sluice_watermark_delay_seconds") is not None


def test_a_stateless_query_has_no_late_row_or_watermark_series() -> None:
    m = RuntimeMetrics()
    stateless = {k: v for k, v in ROCKSDB[0].items() if k not in ("stateOperators", "eventTime")}
    m.observe_recent("q", [stateless], True)
    text = m.render().decode()
    assert "sluice_rows_dropped_by_watermark_total{" not in text
    assert "sluice_watermark_delay_seconds{" not in text and "sluice_state_disk_bytes{" not in text
    assert value(m, "sluice_state_rows") == 0 and value(m, "sluice_batches_total") == 1


def test_a_standby_has_no_query_series() -> None:
    """A driver that hands over and waits as a standby keeps running: its queries' last values
    would read as current and add to the new active driver's."""
    m = RuntimeMetrics()
    m.set_role("active")
    m.observe_recent("q", ROCKSDB, True)
    m.observe_recent("q-dlq-orders", ROCKSDB[:1], True)
    m.set_role("standby")
    text = m.render().decode()
    assert 'query="' not in text, text
    assert 'sluice_driver_role{role="standby"} 1.0' in text
    m.observe_recent("q", ROCKSDB, True)  # the ended term's monitor reporting once more
    assert 'query="' not in m.render().decode()
    m.set_role("active")  # the next term counts its batches again
    m.observe_recent("q", ROCKSDB[-1:], True)
    assert value(m, "sluice_batches_total") == 1 and value(m, "sluice_last_committed_batch_id") == 16


def test_no_created_series() -> None:
    """``prometheus_client`` would add a ``_created`` series beside every counter child."""
    m = RuntimeMetrics()
    m.observe_recent("q", ROCKSDB, True)
    assert "_created" not in m.render().decode()


def test_report_readers() -> None:
    assert reports.unix_seconds("2026-11-27T03:11:43.000Z") == unix("2026-11-27T03:11:43.000Z")
    assert reports.unix_seconds("2026-11-27T03:11:43") == unix("2026-11-27T03:11:43Z")  # Spark writes UTC
    assert reports.unix_seconds(None) is None and reports.unix_seconds("soon") is None
    assert reports.commit_time({"timestamp": "2026-11-27T03:11:43.000Z"}) == unix("2026-11-27T03:11:43Z")
    assert reports.commit_time({}) is None
    assert reports.watermark_delay({"timestamp": "2026-11-27T03:11:43.000Z"}) is None  # no watermark
    assert reports.state_disk_bytes({"stateOperators": [{"customMetrics": {"rocksdbSstFileSize": 7}},
                                                        {"customMetrics": {"rocksdbSstFileSize": 3}}]}) == 10
    assert reports.state_disk_bytes({"stateOperators": [{"customMetrics": {}}]}) is None


def test_the_lag_at_the_brokers_is_their_latest_offset_minus_where_the_last_report_ended() -> None:
    from sluice_runtime.brokerlag import lags
    from sluice_runtime.metrics import PartitionLag, end_offsets

    progress = {"sources": [{"endOffset": '{"a": {"0": 10, "1": 4}}'}, {"endOffset": {"b": {"0": 7}}},
                            {"endOffset": None}]}
    ends = end_offsets(progress)
    assert ends == {("a", 0): 10, ("a", 1): 4, ("b", 0): 7}
    # b-0 not answered: left out; a-1 behind the report (a recreated topic): 0, never negative
    assert lags({"q": ends}, {("a", 0): 15, ("a", 1): 2}) == {
        "q": [PartitionLag("a", "0", 5), PartitionLag("a", "1", 0)]}
