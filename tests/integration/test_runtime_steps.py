"""Every plan step type, on real PySpark, against expected rows computed here in Python.

The step builders run on static frames shaped like Kafka records (the same ``value`` bytes the
Kafka source reads); the streaming path through a real broker is covered in
``test_runtime_streaming.py``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtime import batch_output, plan_from_yaml, shared_spark, to_dt, ts

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


ORDERS_SOURCE = """\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: orders
      schema:
        - {name: order_id, type: string}
        - {name: customer, type: string}
        - {name: amount, type: double}
        - {name: status, type: string}
        - {name: ts, type: timestamp}
      eventTime: {column: ts, watermark: 1 minute}
"""

ORDERS = [
    {
        "order_id": f"o{i}",
        "customer": f"c{i % 3}",
        "amount": float(i * 7 % 50),
        "status": "cancelled" if i % 4 == 0 else "ok",
        "ts": ts(i * 1.5),
    }
    for i in range(1, 30)
]


def _types(plan: Any) -> list[str]:
    return [s.type for s in plan.steps]


def test_source_filter_project(spark: Any) -> None:
    plan = plan_from_yaml(
        ORDERS_SOURCE
        + "  sql: SELECT order_id, amount * 2 AS doubled FROM orders WHERE status <> 'cancelled'\n"
        + "  sink: {topic: out}\n"
    )
    assert {"kafkaSourceV1", "filterV1", "projectV1", "kafkaSinkV1"} <= set(_types(plan))
    got = batch_output(spark, plan, {"orders": ORDERS})
    expected = [
        {"order_id": o["order_id"], "doubled": o["amount"] * 2} for o in ORDERS if o["status"] != "cancelled"
    ]
    assert sorted(got, key=lambda r: r["order_id"]) == sorted(expected, key=lambda r: r["order_id"])


def test_aggregate(spark: Any) -> None:
    plan = plan_from_yaml(
        ORDERS_SOURCE
        + "  sql: SELECT customer, count(*) AS n, sum(amount) AS total, max(amount) AS biggest "
        + "FROM orders GROUP BY customer\n"
        + "  sink: {topic: out, outputMode: update, key: [customer]}\n"
    )
    assert "aggregateV1" in _types(plan)
    got = {r["customer"]: r for r in batch_output(spark, plan, {"orders": ORDERS})}
    expected: dict[str, dict[str, Any]] = {}
    for o in ORDERS:
        e = expected.setdefault(
            o["customer"], {"customer": o["customer"], "n": 0, "total": 0.0, "biggest": -1.0}
        )
        e["n"] += 1
        e["total"] += o["amount"]
        e["biggest"] = max(e["biggest"], o["amount"])
    assert got == expected


def _window_start(t: str, size_min: int) -> int:
    d = to_dt(t)
    minute = d.hour * 60 + d.minute
    return minute - minute % size_min


def test_tumbling_window(spark: Any) -> None:
    plan = plan_from_yaml(
        ORDERS_SOURCE
        + "  sql: SELECT window(ts, '10 minutes') AS w, customer, sum(amount) AS total FROM orders "
        + "GROUP BY window(ts, '10 minutes'), customer\n"
        + "  sink: {topic: out, outputMode: update}\n"
    )
    assert {"watermarkV1", "windowAggregateV1"} <= set(_types(plan))
    got = {
        (to_dt(r["w"]["start"]).hour * 60 + to_dt(r["w"]["start"]).minute, r["customer"]): r["total"]
        for r in batch_output(spark, plan, {"orders": ORDERS})
    }
    expected: dict[tuple[int, str], float] = defaultdict(float)
    for o in ORDERS:
        expected[(_window_start(o["ts"], 10), o["customer"])] += o["amount"]
    assert got == dict(expected)


def test_sliding_window(spark: Any) -> None:
    plan = plan_from_yaml(
        ORDERS_SOURCE
        + "  sql: SELECT window(ts, '10 minutes', '5 minutes') AS w, count(*) AS n FROM orders "
        + "GROUP BY window(ts, '10 minutes', '5 minutes')\n"
        + "  sink: {topic: out, outputMode: update}\n"
    )
    got = {
        to_dt(r["w"]["start"]).hour * 60 + to_dt(r["w"]["start"]).minute: r["n"]
        for r in batch_output(spark, plan, {"orders": ORDERS})
    }
    expected: dict[int, int] = defaultdict(int)
    for o in ORDERS:
        d = to_dt(o["ts"])
        minute = d.hour * 60 + d.minute
        for start in (minute - minute % 5, minute - minute % 5 - 5):
            expected[start] += 1
    assert got == dict(expected)


def test_session_window(spark: Any) -> None:
    events = [
        {"order_id": "a", "customer": "c1", "amount": 1.0, "status": "ok", "ts": ts(0)},
        {"order_id": "b", "customer": "c1", "amount": 2.0, "status": "ok", "ts": ts(3)},
        {"order_id": "c", "customer": "c1", "amount": 4.0, "status": "ok", "ts": ts(20)},
        {"order_id": "d", "customer": "c2", "amount": 8.0, "status": "ok", "ts": ts(1)},
    ]
    plan = plan_from_yaml(
        ORDERS_SOURCE
        + "  sql: SELECT customer, session_window(ts, '5 minutes') AS s, sum(amount) AS total FROM orders "
        + "GROUP BY customer, session_window(ts, '5 minutes')\n"
        + "  sink: {topic: out, outputMode: append}\n"
    )
    assert "sessionWindowAggregateV1" in _types(plan)
    got = sorted(
        (r["customer"], r["s"]["start"][11:16], r["s"]["end"][11:16], r["total"])
        for r in batch_output(spark, plan, {"orders": events})
    )
    assert got == [
        ("c1", "10:00", "10:08", 3.0),
        ("c1", "10:20", "10:25", 4.0),
        ("c2", "10:01", "10:06", 8.0),
    ]


PAYMENTS_SOURCE = """\
    - name: payments
      topic: payments
      schema:
        - {name: order_id, type: string}
        - {name: paid, type: double}
        - {name: pts, type: timestamp}
      eventTime: {column: pts, watermark: 30 seconds}
"""


@pytest.mark.parametrize("join", ["JOIN", "LEFT OUTER JOIN"])
def test_stream_stream_join(spark: Any, join: str) -> None:
    plan = plan_from_yaml(
        ORDERS_SOURCE
        + PAYMENTS_SOURCE
        + f"  sql: SELECT o.order_id, o.amount, p.paid FROM orders o {join} payments p "
        + "ON o.order_id = p.order_id AND p.pts BETWEEN o.ts AND o.ts + INTERVAL 10 MINUTES\n"
        + "  sink: {topic: out}\n"
    )
    assert "streamStreamJoinV1" in _types(plan)
    payments = [
        {"order_id": o["order_id"], "paid": o["amount"] + 0.5, "pts": ts(i * 1.5 + (2 if i % 2 else 30))}
        for i, o in enumerate(ORDERS, start=1)
        if i % 5 != 0
    ]
    got = sorted(
        json.dumps(r, sort_keys=True)
        for r in batch_output(spark, plan, {"orders": ORDERS, "payments": payments})
    )
    expected = []
    for o in ORDERS:
        matches = [
            p
            for p in payments
            if p["order_id"] == o["order_id"]
            and to_dt(o["ts"]) <= to_dt(p["pts"]) <= to_dt(o["ts"]) + timedelta(minutes=10)
        ]
        for p in matches:
            expected.append({"order_id": o["order_id"], "amount": o["amount"], "paid": p["paid"]})
        if not matches and join.startswith("LEFT"):
            expected.append({"order_id": o["order_id"], "amount": o["amount"], "paid": None})
    expected_s = sorted(
        json.dumps({k: v for k, v in r.items() if v is not None}, sort_keys=True) for r in expected
    )
    assert got == expected_s


def test_union(spark: Any) -> None:
    plan = plan_from_yaml(
        ORDERS_SOURCE
        + """    - name: more
      topic: more
      schema:
        - {name: order_id, type: string}
        - {name: amount, type: double}
        - {name: ts, type: timestamp}
      eventTime: {column: ts, watermark: 1 minute}
  sql: |
    SELECT order_id, amount FROM orders UNION ALL SELECT order_id, amount FROM more
  sink: {topic: out}
"""
    )
    assert "unionV1" in _types(plan)
    more = [{"order_id": f"m{i}", "amount": float(i), "ts": ts(i)} for i in range(5)]
    got = sorted(
        (r["order_id"], r["amount"]) for r in batch_output(spark, plan, {"orders": ORDERS, "more": more})
    )
    assert got == sorted(
        [(o["order_id"], o["amount"]) for o in ORDERS] + [(m["order_id"], m["amount"]) for m in more]
    )


def test_deduplicate(spark: Any) -> None:
    plan = plan_from_yaml(
        ORDERS_SOURCE + "  sql: SELECT DISTINCT customer, status FROM orders\n  sink: {topic: out}\n"
    )
    assert "deduplicateV1" in _types(plan)
    got = sorted((r["customer"], r["status"]) for r in batch_output(spark, plan, {"orders": ORDERS + ORDERS}))
    assert got == sorted({(o["customer"], o["status"]) for o in ORDERS})


def test_sink_key_encoding(spark: Any) -> None:
    from sluice_runtime.steps.sink import encode

    plan = plan_from_yaml(
        ORDERS_SOURCE
        + "  sql: SELECT order_id, customer, amount FROM orders\n"
        + "  sink: {topic: out, key: [order_id]}\n"
    )
    df = spark.createDataFrame([("o1", "c1", 2.5)], "order_id string, customer string, amount double")
    row = encode(plan.sink, df).collect()[0]
    assert row["key"] == "o1"
    assert json.loads(row["value"]) == {"order_id": "o1", "customer": "c1", "amount": 2.5}
    two = plan.sink.model_copy(update={"key": ["order_id", "customer"]})
    assert json.loads(encode(two, df).collect()[0]["key"]) == {"order_id": "o1", "customer": "c1"}


def test_malformed_records_are_tagged(spark: Any) -> None:
    from sluice_runtime import malformed

    plan = plan_from_yaml(
        ORDERS_SOURCE + "  sql: SELECT order_id, amount FROM orders\n  sink: {topic: out}\n"
    )
    good = {"order_id": "g", "customer": "c", "amount": 1.0, "status": "ok", "ts": ts(1)}
    records = [
        good,
        b"not json",
        b'{"order_id": "x", "amount": "lots"}',
        b"[1,2]",
        None,
        b'{"order_id": "ok2"}',
    ]
    got = batch_output(spark, plan, {"orders": records})
    # a missing field is not malformed (it is null); wrong types, non-objects, bad JSON and null are
    assert sorted(r["order_id"] for r in got) == ["g", "ok2"]
    src = plan.steps[0]
    from tests.support.runtime import KAFKA_DDL, kafka_rows

    raw = spark.createDataFrame(kafka_rows("orders", records), KAFKA_DDL)
    dl = malformed.dead_letter_frame(malformed.parse(raw, src.columns), src.columns).collect()
    assert [r["value"] for r in dl] == [b"not json", b'{"order_id": "x", "amount": "lots"}', b"[1,2]", None]
    headers = {h["key"]: bytes(h["value"]).decode() for h in dl[0]["headers"]}
    assert headers["sluice.source.topic"] == "orders" and headers["sluice.source.offset"] == "1"
    assert headers["sluice.source.partition"] == "0" and "declared columns" in headers["sluice.error"]
