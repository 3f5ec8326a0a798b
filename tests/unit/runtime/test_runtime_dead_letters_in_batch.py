"""Dead letters written with their batch, without Spark: which plans read a batch once
(``sluice_runtime.main_output.one_read_source``), the scans of each source
(``sluice_runtime.main_output.source_scans``), each source's rows counted once in the reports
(``sluice_runtime.progress.counted_once``, on the report shape real PySpark gave in
tests/integration/test_dead_letters_with_batch.py), and a routed row as the producer takes it
(``sluice_runtime.sink_exactly_once.out_record``)."""

from __future__ import annotations

import json
from typing import Any

from sluice_runtime.main_output import STATELESS_STEPS, one_read_source, source_scans
from sluice_runtime.progress import counted_once, offsets_without_rows
from sluice_runtime.sink_exactly_once import OutRecord, out_record
from sluice_runtime.steps.base import DeadLetterRoute

from tests.support.runtime import plan_from_yaml

PLAN = plan_from_yaml("""\
  sources:
    - name: orders
      topic: orders
      schema: [{name: id, type: string}]
    - name: refunds
      topic: refunds
      schema: [{name: id, type: string}]
  sql: "SELECT id FROM orders UNION ALL SELECT id FROM refunds"
  sink: {topic: out}
""")


def route(source: str) -> DeadLetterRoute:
    step = next(s for s in PLAN.steps if getattr(s, "source", None) == source)
    return DeadLetterRoute(source_id=step.id, frame=None, topic="out.dlq")


def source(topic: str, start: int, end: int, rows: int, rate: float) -> dict[str, Any]:
    return {"description": f"KafkaV2[Subscribe[{topic}]]", "startOffset": json.dumps({topic: {"0": start}}),
            "endOffset": json.dumps({topic: {"0": end}}), "numInputRows": rows,
            "inputRowsPerSecond": rate, "processedRowsPerSecond": rate * 2}


def report(*sources: dict[str, Any]) -> dict[str, Any]:
    rows = sum(s["numInputRows"] for s in sources)
    return {"batchId": 3, "numInputRows": rows, "inputRowsPerSecond": float(rows),
            "processedRowsPerSecond": float(rows * 2), "sources": list(sources)}


def test_a_source_with_dead_letters_is_scanned_twice_the_others_once() -> None:
    assert source_scans(PLAN, [route("orders")]) == {"orders": 2, "refunds": 1}
    assert source_scans(PLAN, []) == {"orders": 1, "refunds": 1}


def test_rows_of_a_source_scanned_twice_count_once_and_the_totals_follow() -> None:
    # orders: 8 records in the batch, Spark reports 16 (both scans); refunds: 3, scanned once
    raw = report(source("orders", 10, 18, 16, 16.0), source("refunds", 0, 3, 3, 3.0))
    fixed = counted_once(raw, source_scans(PLAN, [route("orders")]))
    assert [s["numInputRows"] for s in fixed["sources"]] == [8, 3]
    assert [s["inputRowsPerSecond"] for s in fixed["sources"]] == [8.0, 3.0]
    assert [s["processedRowsPerSecond"] for s in fixed["sources"]] == [16.0, 6.0]
    totals = (fixed["numInputRows"], fixed["inputRowsPerSecond"], fixed["processedRowsPerSecond"])
    assert totals == (11, 11.0, 22.0)
    assert raw["numInputRows"] == 19 and raw["sources"][0]["numInputRows"] == 16  # the report read is kept
    assert offsets_without_rows(fixed) == {"orders": 0, "refunds": 0}


def test_offsets_skipped_under_a_doubled_count_are_still_counted() -> None:
    # 8 offsets, 2 of them gone (onDataLoss: skip): 6 records, reported as 12
    skipped = report(source("orders", 10, 18, 12, 12.0))
    assert offsets_without_rows(skipped) == {"orders": 0}  # what the doubled count hides
    assert offsets_without_rows(counted_once(skipped, {"orders": 2})) == {"orders": 2}


def test_without_a_source_scanned_twice_the_report_is_left_as_it_is() -> None:
    raw = report(source("orders", 10, 18, 8, 8.0))
    assert counted_once(raw, {"orders": 1}) is raw
    assert counted_once(raw, {}) is raw
    idle = {"batchId": 4, "numInputRows": 0, "sources": [{"startOffset": None, "endOffset": None}]}
    assert counted_once(idle, {"orders": 2})["numInputRows"] == 0


def test_a_routed_row_names_its_topic_and_headers_as_bytes() -> None:
    headers = [("sluice.error", bytearray(b"bad")), ("sluice.source.offset", bytearray(b"7"))]
    assert out_record((bytearray(b"k"), bytearray(b"v"), "out.dlq", headers), routed=True) == OutRecord(
        b"k", b"v", "out.dlq", [("sluice.error", b"bad"), ("sluice.source.offset", b"7")])
    assert out_record((None, bytearray(b"v"), "out", None), routed=True) == OutRecord(None, b"v", "out", None)
    assert out_record(("k", "v"), routed=False) == OutRecord("k", "v", None, None)


def single(sql: str, policy: str = "deadLetter") -> Any:
    return plan_from_yaml(f"""\
  sources:
    - name: orders
      topic: orders
      schema: [{{name: id, type: string}}, {{name: n, type: long}}, {{name: ts, type: timestamp}}]
      eventTime: {{column: ts, watermark: 1 minute}}
      malformed: {{policy: {policy}}}
  sql: "{sql}"
  sink: {{topic: out, outputMode: update}}
""")


def test_a_stateless_plan_of_one_source_with_dead_letters_is_read_once() -> None:
    plan = single("SELECT id, n * 2 AS m FROM orders WHERE n > 3")
    assert one_read_source(plan) is plan.steps[0]
    assert {s.type for s in plan.steps} <= STATELESS_STEPS


def test_state_several_sources_or_no_dead_letters_keep_the_streaming_plan() -> None:
    assert one_read_source(single("SELECT id, count(*) AS c FROM orders GROUP BY id")) is None
    windowed = ("SELECT window(ts, '1 minute').start AS w, count(*) AS c FROM orders "
                "GROUP BY window(ts, '1 minute')")
    assert one_read_source(single(windowed)) is None
    assert one_read_source(single("SELECT DISTINCT id FROM orders")) is None
    assert one_read_source(single("SELECT id FROM orders", policy="skip")) is None
    assert one_read_source(PLAN) is None  # two sources
