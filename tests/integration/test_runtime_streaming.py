"""The runtime's streaming path on a real broker and real PySpark (one SparkSession per module):
plan-built pipelines with available-now, malformed-record policies, the exactly-once sink's
replay skipping and zombie fencing, every historical plan, and the starts of replaced versions
(hand-off; a backfill's start and output topic)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sluice.core.plan.model import Plan

from tests.support.runtime import (
    consume,
    consume_json,
    create_topic,
    plan_from_yaml,
    produce,
    shared_spark,
    ts,
    unique,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HISTORICAL = sorted((REPO / "tests" / "corpus" / "historical_plans").glob("*.json"))


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


def _spec(topic: str, sql: str, sink_topic: str, *, sink_extra: str = "", malformed: str = "") -> str:
    return f"""\
  shufflePartitions: 2
  sources:
    - name: orders
      topic: {topic}
      schema:
        - {{name: order_id, type: string}}
        - {{name: customer, type: string}}
        - {{name: amount, type: double}}
        - {{name: ts, type: timestamp}}
      eventTime: {{column: ts, watermark: 1 minute}}
{malformed}
  sql: "{sql}"
  sink: {{topic: {sink_topic}{sink_extra}}}
"""


def _orders(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"order_id": f"o{i}", "customer": f"c{i % 4}", "amount": float(i % 17), "ts": ts(i / 10)}
        for i in range(start, start + n)
    ]


def run_available_now(spark: Any, plan: Plan, kafka: str, checkpoint: Path, query_id: str, **kw: Any) -> Any:
    from sluice_runtime.pipeline import build_pipeline

    pipe = build_pipeline(
        spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=query_id, available_now=True, **kw
    )
    for q in pipe.all_queries():
        q.awaitTermination(300)
    if pipe.eos_sink is not None:
        pipe.eos_sink.close()
    return pipe


@pytest.mark.parametrize(("delivery", "writers"), [("atLeastOnce", "driver"), ("exactlyOnce", "driver"),
                                                   ("exactlyOnce", "tasks")])
def test_stateless_and_stateful_plans(spark: Any, kafka: str, tmp_path: Path, delivery: str,
                                      writers: str) -> None:
    src, out, agg_out = unique("orders"), unique("out"), unique("agg")
    create_topic(kafka, src, partitions=2)
    orders = _orders(200)
    produce(kafka, src, orders)
    extra = f", delivery: {delivery}"
    plan = plan_from_yaml(
        _spec(
            src,
            "SELECT order_id, amount * 2 AS doubled FROM orders WHERE amount > 3",
            out,
            sink_extra=extra + ", key: [order_id]",
        )
    )
    pipe = run_available_now(spark, plan, kafka, tmp_path / "a", unique("q"), eos_writers=writers)
    assert pipe.main.exception() is None
    if delivery == "exactlyOnce":  # the tasks wrote each of the source's 2 partitions
        sink = pipe.eos_sink
        assert type(sink).__name__ == {"driver": "TransactionalSink", "tasks": "TaskSink"}[writers]
        if writers == "tasks":
            assert [r.partition for r in sink.last_partitions] == [0, 1]
    records = consume(kafka, out, expect=1)
    got = sorted((k.decode(), json.loads(v)["doubled"]) for k, v, _ in records)
    assert got == sorted((o["order_id"], o["amount"] * 2) for o in orders if o["amount"] > 3)

    agg = plan_from_yaml(
        _spec(
            src,
            "SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer",
            agg_out,
            sink_extra=extra + ", outputMode: update",
        )
    )
    run_available_now(spark, agg, kafka, tmp_path / "b", unique("q"), eos_writers=writers)
    final = {r["customer"]: (r["n"], r["total"]) for r in consume_json(kafka, agg_out, expect=4)}
    expected: dict[str, tuple[int, float]] = {}
    for o in orders:
        n, t = expected.get(o["customer"], (0, 0.0))
        expected[o["customer"]] = (n + 1, t + o["amount"])
    assert final == expected
    assert (tmp_path / "b" / "state").is_dir()


BAD = [b"not json", b'{"order_id": "x", "amount": "lots"}', b"[1]"]


def _malformed_plan(src: str, out: str, policy: str, dlq: str | None = None) -> Plan:
    block = f"      malformed: {{policy: {policy}" + (f", topic: {dlq}" if dlq else "") + "}"
    text = _spec(src, "SELECT order_id, amount FROM orders", out)
    text = text.replace(
        "      eventTime: {column: ts, watermark: 1 minute}\n",
        "      eventTime: {column: ts, watermark: 1 minute}\n" + block + "\n",
    )
    return plan_from_yaml(text)


def test_malformed_dead_letter(spark: Any, kafka: str, tmp_path: Path) -> None:
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src)
    good = _orders(5)
    produce(kafka, src, [good[0], good[1], BAD[0], good[2], BAD[1], BAD[2], good[3], good[4]])
    plan = _malformed_plan(src, out, "deadLetter")
    pipe = run_available_now(spark, plan, kafka, tmp_path / "ck", unique("q"))
    assert sorted(r["order_id"] for r in consume_json(kafka, out, expect=5)) == [o["order_id"] for o in good]
    dead = consume(kafka, f"{out}.dlq", expect=3)
    assert [v for _, v, _ in dead] == BAD
    headers = [{k: v.decode() for k, v in h} for _, _, h in dead]
    assert [h["sluice.source.offset"] for h in headers] == ["2", "4", "5"]
    assert all(h["sluice.source.topic"] == src and h["sluice.source.partition"] == "0" for h in headers)
    assert all("declared columns" in h["sluice.error"] for h in headers)
    from sluice_runtime.malformed import observed_counts

    counts = [observed_counts(p) for p in pipe.main.recentProgress]
    assert sum(c.get(plan.steps[0].id, 0) for c in counts) == 3


def test_malformed_skip(spark: Any, kafka: str, tmp_path: Path) -> None:
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src)
    good = _orders(3)
    produce(kafka, src, [BAD[0], *good, BAD[1]])
    plan = _malformed_plan(src, out, "skip")
    pipe = run_available_now(spark, plan, kafka, tmp_path / "ck", unique("q"))
    assert pipe.main.exception() is None and not pipe.dead_letter
    assert sorted(r["order_id"] for r in consume_json(kafka, out, expect=3)) == ["o0", "o1", "o2"]
    from sluice_runtime.metrics import RuntimeMetrics
    from sluice_runtime.progress import ProgressTail

    recent = pipe.main.recentProgress
    tail = ProgressTail(pipe.main)
    fetched = tail.poll()  # what the driver's monitor reads: the same reports, once each

    def keys(reports: list[Any]) -> list[tuple[Any, Any]]:
        return [(p["batchId"], p["timestamp"]) for p in reports]

    assert keys(fetched) == keys(recent)
    assert recent and tail.poll() == []
    m = RuntimeMetrics()
    m.observe_recent("q", fetched, False)
    assert (
        f'sluice_malformed_records_total{{query="q",source="{plan.steps[0].id}"}} 2.0' in m.render().decode()
    )


def test_checkpoint_files_go_through_the_file_system_api(spark: Any, tmp_path: Path) -> None:
    """The checkpoint file manager Spark builds for a query's checkpoint is the runtime's (Hadoop's
    FileSystem API), not Spark's FileContext one, whose local file system starts a ``readlink`` or
    ``chmod`` process for every file it renames or creates (``bench/bench_steady.py``)."""
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        jvm.org.apache.hadoop.fs.Path(str(tmp_path / "ck")), conf
    )
    assert manager.getClass().getSimpleName() == "FileSystemBasedCheckpointFileManager"
    assert manager.isLocal()


def test_malformed_fail(spark: Any, kafka: str, tmp_path: Path) -> None:
    src, out = unique("orders"), unique("out")
    create_topic(kafka, src)
    produce(kafka, src, [*_orders(2), BAD[0]])
    plan = _malformed_plan(src, out, "fail")
    from sluice_runtime.pipeline import build_pipeline

    pipe = build_pipeline(
        spark,
        plan,
        checkpoint=str(tmp_path / "ck"),
        bootstrap=kafka,
        query_id=unique("q"),
        available_now=True,
    )
    with pytest.raises(Exception) as err:
        pipe.main.awaitTermination(300)
    assert f"malformed record in topic {src} partition 0 offset 2" in str(err.value)


def test_exactly_once_replay_is_skipped_and_zombie_is_fenced(spark: Any, kafka: str, tmp_path: Path) -> None:
    from sluice_runtime.sink_exactly_once import FencedError, TransactionalSink

    out, qid = unique("eos"), unique("q")
    create_topic(kafka, out)
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "metadata").write_text(json.dumps({"id": "11111111-2222-3333-4444-555555555555"}) + "\n")

    def sink() -> TransactionalSink:
        return TransactionalSink(bootstrap=kafka, topic=out, query_id=qid, checkpoint=str(ck))

    old = sink()
    old.init()
    assert old.write_rows([(b"k", b"batch0")], 0)
    # a restarted driver replays batch 0 (crash after the transaction, before commits/0): skipped
    new = sink()
    new.init()  # fences `old`
    assert not new.write_rows([(b"k", b"batch0-again")], 0)
    assert new.skipped == [0]
    # the zombie tries to write batch 1: refused, and nothing it sent becomes visible
    with pytest.raises(FencedError):
        old.write_rows([(b"k", b"zombie")], 1)
    assert new.write_rows([(b"k", b"batch1")], 1)
    with pytest.raises(FencedError):
        old.write_rows([(b"k", b"zombie-again")], 2)
    values = [v for _, v, _ in consume(kafka, out, expect=2)]
    assert values == [b"batch0", b"batch1"]
    # a fresh checkpoint (new Spark query id) starts a new batch sequence
    ck2 = tmp_path / "ck2"
    ck2.mkdir()
    (ck2 / "metadata").write_text(json.dumps({"id": "99999999-2222-3333-4444-555555555555"}) + "\n")
    fresh = TransactionalSink(bootstrap=kafka, topic=out, query_id=qid, checkpoint=str(ck2))
    assert fresh.write_rows([(b"k", b"new-ckpt-batch0")], 0)
    for s in (old, new, fresh):
        s.close()


def _retarget(plan: Plan, suffix: str) -> Plan:
    """The plan with its topics renamed (fresh topics per run); nothing else changes."""
    steps = []
    for step in plan.steps:
        if step.type == "kafkaSourceV1":
            update: dict[str, Any] = {"topic": f"{step.topic}-{suffix}"}
            if step.malformed.topic:
                update["malformed"] = step.malformed.model_copy(
                    update={"topic": f"{step.malformed.topic}-{suffix}"}
                )
            step = step.model_copy(update=update)
        elif step.type == "kafkaSinkV1":
            step = step.model_copy(update={"topic": f"{step.topic}-{suffix}"})
        steps.append(step)
    return plan.model_copy(update={"steps": steps})


@pytest.fixture(scope="module")
def historical_runs(
    spark: Any, kafka: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str | None]:
    """Run every historical plan at once (available-now, a few records each): name -> error."""
    from sluice_runtime.pipeline import build_pipeline

    root = tmp_path_factory.mktemp("historical")
    results: dict[str, str | None] = {}
    running = {}
    for path in HISTORICAL:
        try:
            plan = _retarget(Plan.from_json(path.read_text()), unique("h"))
            for step in plan.steps:
                if step.type == "kafkaSourceV1":
                    create_topic(kafka, step.topic)
                    produce(kafka, step.topic, [_record_for(step.columns, i) for i in range(3)])
            running[path.stem] = build_pipeline(
                spark,
                plan,
                checkpoint=str(root / path.stem),
                bootstrap=kafka,
                query_id=unique("q"),
                available_now=True,
            )
        except Exception as exc:
            results[path.stem] = f"does not build: {exc}"
    deadline = time.monotonic() + 600
    for name, pipe in running.items():
        error = None
        for q in pipe.all_queries():
            try:
                if not q.awaitTermination(max(1.0, deadline - time.monotonic())):
                    error = "did not finish"
                    q.stop()
            except Exception as exc:  # awaitTermination raises the query's exception
                error = str(exc)[:3000]
        results[name] = error
    return results


@pytest.mark.parametrize("path", HISTORICAL, ids=[p.stem for p in HISTORICAL])
def test_historical_plan_builds_and_runs(historical_runs: dict[str, str | None], path: Path) -> None:
    """Every committed historical plan still builds and runs (available-now over a few records)."""
    assert historical_runs[path.stem] is None, historical_runs[path.stem]


def _record_for(columns: list[Any], i: int) -> dict[str, Any]:
    samples = {
        "string": f"s{i}",
        "int": i,
        "bigint": i,
        "double": i + 0.5,
        "boolean": True,
        "timestamp": ts(i),
        "date": "2026-01-01",
    }
    rec: dict[str, Any] = {}
    for c in columns:
        t = c.type.lower()
        if t in samples:
            rec[c.name] = samples[t]
        elif t.startswith("decimal"):
            rec[c.name] = i
        elif t.startswith("array"):
            rec[c.name] = [f"x{i}", "y"]
        elif t.startswith("map"):
            rec[c.name] = {"channel": "web", "k": f"v{i}"}
        elif t.startswith("struct"):
            rec[c.name] = {}
    return rec


def test_a_replaced_version_starts_where_the_previous_one_s_output_ends(spark: Any, kafka: str,
                                                                         tmp_path: Path) -> None:
    """Replace with hand-off at run level: version 1 runs on its checkpoint (exactly-once), its
    successor (another projection) starts on a new checkpoint at version 1's last committed
    offsets: every order in the shared output topic exactly once, and a paused version-1 producer
    is fenced by the successor."""
    from sluice.core.replace import PreviousVersion
    from sluice_runtime.kafka_security import KafkaSecurity
    from sluice_runtime.pipeline import prepare_pipeline, start_pipeline, with_start_offsets
    from sluice_runtime.replace import hand_off_start
    from sluice_runtime.sink_exactly_once import FencedError, TransactionalSink

    src, out, group = unique("orders"), unique("out"), unique("g")
    create_topic(kafka, src, partitions=2)
    create_topic(kafka, out)
    first, second = _orders(120), _orders(80, start=120)
    produce(kafka, src, first)
    eos = ", delivery: exactlyOnce, key: [order_id]"
    v1 = plan_from_yaml(_spec(src, "SELECT order_id, amount FROM orders", out, sink_extra=eos))
    v2 = plan_from_yaml(_spec(src, "SELECT order_id, amount * 2 AS doubled FROM orders", out, sink_extra=eos))

    def run(plan: Plan, prepared: Any, checkpoint: Path, tx: str) -> None:
        pipe = start_pipeline(prepared, checkpoint=str(checkpoint), available_now=True, transactional_id=tx)
        for q in pipe.all_queries():
            q.awaitTermination(300)
        assert pipe.main.exception() is None
        assert pipe.eos_sink is not None
        pipe.eos_sink.close()

    base_v1, base_v2 = tmp_path / "v1", tmp_path / "v2"
    prepared = prepare_pipeline(spark, v1, bootstrap=kafka, query_id=unique("q"),
                                consumer_group=f"{group}.v1")
    run(v1, prepared, base_v1 / "epochs" / "3", f"{group}.v1.tx")
    assert len(consume(kafka, out, expect=len(first))) == len(first)
    # a driver of version 1 that went quiet (paused) with its producer open
    zombie = TransactionalSink(bootstrap=kafka, topic=out, query_id="zombie",
                               checkpoint=str(base_v1 / "epochs" / "3"), transactional_id=f"{group}.v1.tx",
                               consumer_group=f"{group}.v1")
    zombie.init()
    produce(kafka, src, second)

    previous = PreviousVersion(version=1, plan_hash=v1.hash or "", checkpoint=str(base_v1),
                               consumer_group=f"{group}.v1", transactional_id=f"{group}.v1.tx",
                               sink_topic=out, exactly_once=True)
    start = hand_off_start(previous, v2, kafka, KafkaSecurity())
    assert start.checkpoint == base_v1 / "epochs" / "3" and start.missing == []
    assert sum(json.loads(start.offsets[src])[src].values()) == len(first)
    prepared = prepare_pipeline(spark, v2, bootstrap=kafka, query_id=unique("q"),
                                consumer_group=f"{group}.v2")
    run(v2, with_start_offsets(prepared, start.offsets), base_v2 / "epochs" / "4", f"{group}.v2.tx")

    with pytest.raises(FencedError):
        zombie.write_rows([(b"o0", b'{"zombie": true}')], 99)
    records = [json.loads(v) | {"key": k.decode()} for k, v, _ in consume(kafka, out, expect=len(first) + 80)]
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)) == len(first) + len(second)  # none lost, none twice
    assert {r["key"] for r in records if "amount" in r} == {o["order_id"] for o in first}
    assert {r["key"] for r in records if "doubled" in r} == {o["order_id"] for o in second}
    zombie.close()


def _topic_exists(kafka: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic in AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10).topics


def test_a_backfill_reads_its_sources_from_the_earliest_offsets_into_its_own_topic(spark: Any, kafka: str,
                                                                                   tmp_path: Path) -> None:
    """A backfill's version on a fresh checkpoint (``SLUICE_START_FROM=earliest``,
    ``SLUICE_OUTPUT_TOPIC``): a plan that says ``startingOffsets: latest`` reads every record already
    in its source; results, exactly-once transactions and marker go to the output topic, malformed
    records to ``<output topic>.dlq``; the plan's own sink topic is never even created."""
    from sluice_runtime.pipeline import with_output_topic
    from sluice_runtime.sink_exactly_once import TransactionalSink

    src, sink, output, group = unique("orders"), unique("out"), unique("out-v2"), unique("g")
    create_topic(kafka, src, partitions=2)
    orders = _orders(60)
    produce(kafka, src, [*orders[:30], BAD[0], *orders[30:]])
    spec = _spec(src, "SELECT order_id, amount FROM orders", sink,
                 sink_extra=", delivery: exactlyOnce, key: [order_id]")
    spec = spec.replace(f"      topic: {src}\n", f"      topic: {src}\n      startingOffsets: latest\n")
    plan = plan_from_yaml(spec)
    assert plan.sink.topic == sink and plan.hash
    running = with_output_topic(plan, output)
    assert running.hash == plan.hash

    checkpoint, tx = tmp_path / "v2", f"{group}.tx"
    pipe = run_available_now(spark, running, kafka, checkpoint, unique("q"), consumer_group=group,
                             transactional_id=tx, start_from="earliest")
    assert pipe.main.exception() is None
    assert pipe.eos_sink is not None and pipe.eos_sink.topic == output
    got = consume(kafka, output, expect=len(orders), idle=1.0)
    assert sorted(k.decode() for k, _, _ in got) == sorted(o["order_id"] for o in orders)
    assert [v for _, v, _ in consume(kafka, f"{output}.dlq", expect=1, idle=1.0)] == [BAD[0]]
    assert not _topic_exists(kafka, sink) and not _topic_exists(kafka, f"{sink}.dlq")
    # the batch marker is on the output topic: a successor (or a restart) finds it there
    reader = TransactionalSink(bootstrap=kafka, topic=output, query_id="", checkpoint=str(checkpoint),
                               transactional_id=tx, consumer_group=group)
    try:
        assert reader.fence() is not None
    finally:
        reader.close()


def test_a_backfill_from_a_time_skips_what_came_before_it_and_starts_only_once(spark: Any, kafka: str,
                                                                               tmp_path: Path) -> None:
    """``SLUICE_START_FROM=<RFC 3339 time>``: every source (and its dead-letter query) starts at the
    first record at or after that time, a partition without one at its end; on a checkpoint with
    offsets the start no longer applies (a restart resumes)."""
    from datetime import UTC, datetime

    src, out = unique("orders"), unique("out")
    create_topic(kafka, src, partitions=2)
    before, after, later = _orders(30), _orders(20, start=30), _orders(10, start=50)
    produce(kafka, src, [*before, BAD[0]])
    time.sleep(0.3)
    start = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    time.sleep(0.3)
    produce(kafka, src, [*after, BAD[1]], key=b"one-partition")  # the other partition: nothing after it
    plan = _malformed_plan(src, out, "deadLetter")  # startingOffsets: earliest (the default)
    checkpoint = tmp_path / "ck"
    pipe = run_available_now(spark, plan, kafka, checkpoint, unique("q"), start_from=start)
    assert pipe.main.exception() is None
    assert sorted(r["order_id"] for r in consume_json(kafka, out, expect=len(after), idle=1.0)) == sorted(
        o["order_id"] for o in after)
    assert [v for _, v, _ in consume(kafka, f"{out}.dlq", expect=1, idle=1.0)] == [BAD[1]]

    produce(kafka, src, later)
    run_available_now(spark, plan, kafka, checkpoint, unique("q"), start_from="earliest")
    rows = consume_json(kafka, out, expect=len(after) + len(later), idle=1.0)
    assert sorted(r["order_id"] for r in rows) == sorted(o["order_id"] for o in [*after, *later])
