"""Dead letters written with the batch that read them (issue 31), on a real broker and real PySpark:
the main query's frame carries its sources' malformed records, so they are out when the batch that
read them commits (in its transactions under exactly-once), a stateful plan keeps its state beside
them, each source's rows are counted once in the reports, and a checkpoint an older runtime started
keeps its dead-letter query of its own."""

from __future__ import annotations

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

BAD = [b"not json", b'{"id": "x", "n": "lots"}']


@pytest.fixture(scope="module")
def spark(spark_jars: list[Path]) -> Any:
    return shared_spark(spark_jars)


def _plan(src: str, out: str, sql: str, *, sink_extra: str = "", trigger: str = "") -> Plan:
    return plan_from_yaml(f"""\
  shufflePartitions: 2
  sources:
    - name: events
      topic: {src}
      schema:
        - {{name: id, type: string}}
        - {{name: n, type: long}}
        - {{name: ts, type: timestamp}}
      eventTime: {{column: ts, watermark: 1 minute}}
      malformed: {{policy: deadLetter}}
  sql: "{sql}"
  sink: {{topic: {out}{sink_extra}}}
{trigger}""")


def _events(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"e{i}", "n": i, "ts": ts(i / 10)} for i in range(start, start + n)]


def _counted(pipe: Any) -> tuple[int, int]:
    """(rows Spark reports, rows the driver's progress tail reports) over the main query's batches."""
    from sluice_runtime.progress import ProgressTail

    raw = sum(int(p["numInputRows"]) for p in pipe.main.recentProgress)
    fixed = sum(int(p["numInputRows"]) for p in ProgressTail(pipe.main, pipe.scans).poll())
    return raw, fixed


def _headers(records: list[Any]) -> list[dict[str, str]]:
    return [{k: v.decode() for k, v in h} for _, _, h in records]


@pytest.mark.parametrize(("delivery", "writers"), [("atLeastOnce", "driver"), ("exactlyOnce", "driver"),
                                                   ("exactlyOnce", "tasks")])
def test_dead_letters_are_out_when_their_batch_commits(spark: Any, kafka: str, tmp_path: Path,
                                                       delivery: str, writers: str) -> None:
    """The query is stopped the moment the batch that read the records has committed: its dead
    letters are out already (a dead-letter query of its own ran up to 10 s later)."""
    from sluice_runtime.drain import last_commit
    from sluice_runtime.pipeline import build_pipeline

    src, out = unique("events"), unique("out")
    create_topic(kafka, src, partitions=2)
    plan = _plan(src, out, "SELECT id, n FROM events", sink_extra=f", delivery: {delivery}",
                 trigger="  trigger: {processingTime: 1 second}\n")
    checkpoint = tmp_path / "ck"
    pipe = build_pipeline(spark, plan, checkpoint=str(checkpoint), bootstrap=kafka, query_id=unique("q"),
                          eos_writers=writers)
    try:
        assert pipe.dead_letter == {} and pipe.scans == {src: 1}  # read and parsed once per batch
        good = _events(6)
        produce(kafka, src, [good[0], BAD[0], *good[1:4], BAD[1], *good[4:]])
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if _counted(pipe)[0] >= 8 and last_commit(checkpoint) == pipe.main.lastProgress["batchId"]:
                break
            assert pipe.main.exception() is None
            time.sleep(0.05)
        else:
            pytest.fail(f"the batch did not commit: {pipe.main.recentProgress}")
    finally:
        for q in pipe.all_queries():
            q.stop()
        if pipe.eos_sink is not None:
            pipe.eos_sink.close()
    assert _counted(pipe) == (8, 8)
    from sluice_runtime.malformed import observed_counts

    assert sum(observed_counts(p).get(plan.steps[0].id, 0) for p in pipe.main.recentProgress) == 2
    assert sorted(r["id"] for r in consume_json(kafka, out, expect=6, idle=0.5)) == [e["id"] for e in good]
    dead = consume(kafka, f"{out}.dlq", expect=2, idle=0.5)
    assert sorted(v for _, v, _ in dead) == sorted(BAD)
    for headers in _headers(dead):
        assert headers["sluice.source.topic"] == src and "declared columns" in headers["sluice.error"]
    if delivery == "exactlyOnce":  # in the batch's transactions: nothing of them outside one
        assert len(consume(kafka, f"{out}.dlq", committed_only=False, idle=0.5)) == 2


def test_a_windowed_count_keeps_its_state_beside_its_dead_letters(spark: Any, kafka: str,
                                                                  tmp_path: Path) -> None:
    from tests.integration.test_runtime_streaming import run_available_now

    src, out = unique("events"), unique("out")
    create_topic(kafka, src)
    sql = ("SELECT window(ts, '1 minute').start AS minute, count(*) AS c FROM events "
           "GROUP BY window(ts, '1 minute')")
    plan = _plan(src, out, sql, sink_extra=", outputMode: update, delivery: exactlyOnce")
    produce(kafka, src, [*_events(15), BAD[0]])
    checkpoint = tmp_path / "ck"
    first = run_available_now(spark, plan, kafka, checkpoint, unique("q"))
    produce(kafka, src, [BAD[1], *_events(10, start=15)])
    second = run_available_now(spark, plan, kafka, checkpoint, unique("q"))
    assert first.main.exception() is None and second.main.exception() is None
    latest: dict[str, int] = {}
    for row in consume_json(kafka, out, expect=2, idle=0.5):
        latest[row["minute"]] = row["c"]
    # 10:00 holds e0..e9, 10:01 e10..e19 (5 of them read by the first run: the state held them),
    # 10:02 e20..e24
    assert sorted(latest.values()) == [5, 10, 10]
    assert [v for _, v, _ in consume(kafka, f"{out}.dlq", expect=2, idle=0.5)] == BAD
    # a stateful plan's dead letters come from a second scan of the batch in the streaming query:
    # Spark sums both scans; the reports the driver reads count each record once
    assert first.scans == {src: 2}
    assert _counted(first) == (32, 16) and _counted(second) == (22, 11)


def test_a_checkpoint_with_a_dead_letter_query_of_its_own_keeps_it(spark: Any, kafka: str,
                                                                   tmp_path: Path) -> None:
    """A query an older runtime started has ``dlq/<source id>`` offsets behind the main query's:
    its dead letters stay in their own query, which goes on from there (nothing skipped)."""
    from tests.integration.test_runtime_streaming import run_available_now

    src, out = unique("events"), unique("out")
    create_topic(kafka, src)
    plan = _plan(src, out, "SELECT id, n FROM events")
    produce(kafka, src, [BAD[0], *_events(3)])
    checkpoint = tmp_path / "ck"
    # what an older runtime left: the dead-letter query's offsets (the next record comes after them)
    legacy = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka)
              .option("subscribe", src).option("startingOffsets", "earliest")
              .load().writeStream.format("noop")
              .option("checkpointLocation", str(checkpoint / "dlq" / plan.steps[0].id))
              .trigger(availableNow=True).start())
    legacy.awaitTermination(120)
    produce(kafka, src, [BAD[1]])
    pipe = run_available_now(spark, plan, kafka, checkpoint, unique("q"))
    assert list(pipe.dead_letter) == [plan.steps[0].id] and pipe.scans == {src: 1}
    assert pipe.main.exception() is None
    assert sorted(r["id"] for r in consume_json(kafka, out, expect=3, idle=0.5)) == ["e0", "e1", "e2"]
    # the older query had passed BAD[0]; it goes on from its own offsets: BAD[1] only
    assert [v for _, v, _ in consume(kafka, f"{out}.dlq", expect=1, idle=1.0)] == [BAD[1]]
    assert _counted(pipe) == (3 + 2, 3 + 2)
