"""Helpers of the runtime integration tests: plans from YAML, Kafka I/O, Spark sessions."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from sluice.core.compiler import compile_query
from sluice.core.manifest import parse_manifest
from sluice.core.plan.model import Plan

HEADER = """apiVersion: sluice.dev/v1alpha1
kind: StreamingQuery
metadata: {name: t, namespace: test}
"""


def plan_from_yaml(spec_yaml: str) -> Plan:
    """Compile ``spec:`` YAML (indented by two spaces under ``spec:``) into a plan."""
    return compile_query(parse_manifest(HEADER + "spec:\n" + spec_yaml).spec)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ts(minute: float, hour: int = 10) -> str:
    """ISO timestamp ``minute`` minutes after 2026-01-01 ``hour``:00 UTC."""
    t = datetime(2026, 1, 1, hour, tzinfo=UTC) + timedelta(minutes=minute)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def to_dt(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def shared_spark(jars: Iterable[Any]) -> Any:
    """One SparkSession for all runtime test modules of a pytest run.

    Jars are only taken when the JVM starts, so every module asks for the connector jars and
    nobody stops the session (the JVM ends with the test process).
    """
    from sluice_runtime.session import create_spark

    # Python workers run this interpreter (the runtime image's workers run its venv's python3)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    plan = plan_from_yaml(
        "  shufflePartitions: 2\n  sources:\n    - name: s\n      topic: t\n"
        "      schema: [{name: a, type: string}]\n  sql: SELECT a FROM s\n  sink: {topic: o}\n"
    )
    return create_spark(plan, "local[2]", {"spark.sql.shuffle.partitions": "2"}, list(jars))


# -- Spark batch frames standing in for Kafka topics (step semantics without a broker) ------
def kafka_rows(topic: str, records: Iterable[Any]) -> list[tuple[Any, ...]]:
    rows = []
    for offset, rec in enumerate(records):
        value = rec if isinstance(rec, (bytes, type(None))) else json.dumps(rec).encode()
        rows.append((None, value, topic, 0, offset, datetime(2026, 1, 1), 0))
    return rows


KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)


@contextmanager
def batch_topics(spark: Any, topics: dict[str, list[Any]]) -> Iterator[None]:
    """Make ``kafkaSourceV1`` read static frames instead of Kafka while building."""

    def fake_read(step: Any, ctx: Any) -> Any:
        del ctx
        return spark.createDataFrame(kafka_rows(step.topic, topics.get(step.topic, [])), KAFKA_DDL)

    with mock.patch("sluice_runtime.steps.source.read_kafka", fake_read):
        yield


def batch_output(spark: Any, plan: Plan, topics: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Rows reaching the sink step (as dicts), computed on static frames."""
    from sluice_runtime.pipeline import build_frames
    from sluice_runtime.steps import BuildContext

    with batch_topics(spark, topics):
        ctx = BuildContext(spark=spark, plan=plan, bootstrap="unused:9092", query_id="t")
        frames = build_frames(plan, ctx)
    sink = plan.sink
    decoded = frames[sink.id].collect()
    return [json.loads(r["value"]) for r in decoded]


# -- Kafka ---------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def produce(bootstrap: str, topic: str, records: Iterable[Any], key: Any = None) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n = 0
    for rec in records:
        value = rec if isinstance(rec, (bytes, type(None))) else json.dumps(rec).encode()
        while True:
            try:
                p.produce(topic, value=value, key=key)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
    assert p.flush(60) == 0
    return n


def consume(
    bootstrap: str,
    topic: str,
    *,
    committed_only: bool = True,
    idle: float = 3.0,
    timeout: float = 60.0,
    expect: int | None = None,
) -> list[Any]:
    """All records of a topic from the beginning: (key, value bytes, headers) tuples."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
    )
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                if time.monotonic() - last > idle and (expect is None or len(out) >= expect):
                    break
                continue
            if msg.error():
                continue
            last = time.monotonic()
            out.append((msg.key(), msg.value(), msg.headers() or []))
    finally:
        c.close()
    return out


def consume_json(bootstrap: str, topic: str, **kw: Any) -> list[dict[str, Any]]:
    return [json.loads(v) for _, v, _ in consume(bootstrap, topic, **kw)]


def final_by_key(rows: list[dict[str, Any]], key: Any) -> dict[Any, dict[str, Any]]:
    """Update-mode output: the last row emitted per key."""
    out: dict[Any, dict[str, Any]] = {}
    for r in rows:
        out[key(r)] = r
    return out


def free_port() -> int:
    """A free TCP port on loopback (for a runtime's HTTP endpoint)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
