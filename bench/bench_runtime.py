"""Runtime benchmark: one pre-filled topic, one windowed aggregation.

Measures, in one run and on one SparkSession (``local[2]``):

(a) the plan-built pipeline (``sluice_runtime.pipeline``, available-now) against
(b) the same query written by hand in PySpark against the same connector, interleaved: after one
    unmeasured warm-up of each, ``--pairs`` pairs each run (a) then (b) (ABAB...), so that both
    sides see the same machine load. Per pair it prints both times and the ratio
    ``hand seconds / plan seconds`` (plan-built throughput over hand-written; target: at least
    0.95, i.e. within 5%), then the median ratio with its spread (min/max, p5/p95) and p50/p95 of
    each side's time;
(c) with ``--eos-pairs N``: exactly-once against at-least-once (both plan-built), interleaved the
    same way;
(d) with ``--startup``: time from process start to the first committed batch of a
    ``sluice-runtime run`` process.

It starts its own Kafka broker (``sluice_dev.platform.kafka``) in a temporary state directory and
uses the cached connector jars (``sluice_dev.platform.sparkjars``).

    python bench/bench_runtime.py [--records 1000000] [--pairs 5] [--eos-pairs 0] [--startup]

``--records 100000`` makes a quick run. The JSON summary at the end holds every figure.

The source policy for malformed records is ``skip`` here so that (a) and (b) read the topic once
each (``deadLetter`` adds a second query over the source); the plan-built pipeline still parses
with the corrupt-record column and counts malformed records, which the hand-written one does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for sub in ("operator", "runtime-image", "devtools"):
    sys.path.insert(0, str(ROOT / sub))

SQL = (
    "SELECT window(ts, '1 minute') AS w, customer, count(*) AS n, sum(amount) AS total "
    "FROM orders GROUP BY window(ts, '1 minute'), customer"
)


def manifest(topic: str, out: str, delivery: str) -> str:
    return f"""\
apiVersion: sluice.dev/v1alpha1
kind: StreamingQuery
metadata: {{name: bench, namespace: bench}}
spec:
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
      malformed: {{policy: skip}}
  sql: "{SQL}"
  sink: {{topic: {out}, outputMode: update, delivery: {delivery}}}
"""


def build_plan(topic: str, out: str, delivery: str) -> Any:
    from sluice.core.compiler import compile_query
    from sluice.core.manifest import parse_manifest

    return compile_query(parse_manifest(manifest(topic, out, delivery)).spec)


def send(producer: Any, topic: str, value: bytes, index: int, partition: int | None = None) -> None:
    """Produce one record, waiting while the producer's queue is full; serve its delivery reports
    every 10,000 records (``index``: the record's number in the run)."""
    kwargs = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, value=value, **kwargs)
            break
        except BufferError:
            producer.poll(0.05)
    if index % 10000 == 0:
        producer.poll(0)


def fill(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
    )
    started = time.monotonic()
    base = 1767261600  # 2026-01-01T10:00:00Z
    for i in range(n):
        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + i // 100))
        value = f'{{"order_id":"o{i}","customer":"c{i % 50}","amount":{i % 97}.5,"ts":"{ts}"}}'
        send(p, topic, value.encode(), i)
    assert p.flush(120) == 0
    return time.monotonic() - started


def run_plan(spark: Any, plan: Any, bootstrap: str, work: Path) -> float:
    from sluice_runtime.pipeline import build_pipeline

    started = time.monotonic()
    pipe = build_pipeline(
        spark,
        plan,
        checkpoint=str(work / uuid.uuid4().hex),
        bootstrap=bootstrap,
        query_id=f"bench-{uuid.uuid4().hex[:8]}",
        available_now=True,
    )
    for q in pipe.all_queries():
        q.awaitTermination()
        if q.exception():
            raise RuntimeError(str(q.exception()))
    elapsed = time.monotonic() - started
    if pipe.eos_sink is not None:
        pipe.eos_sink.close()
    return elapsed


def run_by_hand(spark: Any, topic: str, out: str, bootstrap: str, work: Path) -> float:
    """The same query as a PySpark user would write it, same connector."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    rows = raw.select(
        F.from_json(
            F.col("value").cast("string"), "order_id string, customer string, amount double, ts timestamp"
        ).alias("r")
    )
    rows = rows.select("r.*").where(F.col("order_id").isNotNull() | F.col("ts").isNotNull())
    agg = (
        rows.withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", "1 minute").alias("w"), "customer")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total"))
    )
    q = (
        agg.select(F.to_json(F.struct("w", "customer", "n", "total")).alias("value"))
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("checkpointLocation", str(work / uuid.uuid4().hex))
        .outputMode("update")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return time.monotonic() - started


def time_to_first_commit(plan: Any, bootstrap: str, jars: list[Path], work: Path) -> float:
    plan_path = work / "plan-startup.json"
    plan_path.write_text(plan.to_json())
    ck = work / "startup-ck"
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice_runtime.cli",
            "run",
            "--plan",
            str(plan_path),
            "--checkpoint",
            str(ck),
            "--bootstrap",
            bootstrap,
            "--jars",
            ",".join(map(str, jars)),
            "--http-addr",
            "off",
            "--query-id",
            f"bench-startup-{uuid.uuid4().hex[:6]}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while not (ck / "commits" / "0").exists():
            if proc.poll() is not None:
                raise RuntimeError(f"runtime exited with {proc.returncode}")
            time.sleep(0.1)
        return time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(300)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100), interpolating linearly between the closest ranks."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def interleaved(
    label_a: str, run_a: Callable[[], float], label_b: str, run_b: Callable[[], float], pairs: int
) -> dict[str, Any]:
    """Run A then B ``pairs`` times (ABAB...); print each pair; summarise seconds and the ratio b/a."""
    seconds: dict[str, list[float]] = {label_a: [], label_b: []}
    ratios: list[float] = []
    for i in range(1, pairs + 1):
        a, b = run_a(), run_b()
        seconds[label_a].append(a)
        seconds[label_b].append(b)
        ratios.append(b / a)
        print(f"pair {i}: {label_a} {a:.2f} s, {label_b} {b:.2f} s, ratio {b / a:.3f}", flush=True)
    ratio = {
        "median": round(percentile(ratios, 50), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
        "p5": round(percentile(ratios, 5), 3),
        "p95": round(percentile(ratios, 95), 3),
    }
    p50_p95 = {k: [round(percentile(v, 50), 2), round(percentile(v, 95), 2)] for k, v in seconds.items()}
    print(
        f"ratio {label_b} s / {label_a} s ({label_a} throughput over {label_b}): median {ratio['median']} "
        f"(min {ratio['min']}, max {ratio['max']}, p5 {ratio['p5']}, p95 {ratio['p95']}); "
        + "; ".join(f"{k} p50 {p[0]} s, p95 {p[1]} s" for k, p in p50_p95.items()),
        flush=True,
    )
    return {
        "pairs": pairs,
        "order": "".join(f"{label_a[0]}{label_b[0]}".upper() for _ in range(pairs)),
        "seconds": {k: [round(x, 2) for x in v] for k, v in seconds.items()},
        "seconds_p50_p95": p50_p95,
        f"ratio_{label_b}_over_{label_a}": ratio,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the topic")
    parser.add_argument("--pairs", type=int, default=5, help="plan/hand pairs, run ABAB...")
    parser.add_argument("--eos-pairs", type=int, default=0, help="at-least-once/exactly-once pairs")
    parser.add_argument("--startup", action="store_true", help="also time process start to first commit")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")

    from sluice_dev.platform import kafka as kafka_component
    from sluice_dev.platform import sparkjars
    from sluice_runtime.session import create_spark

    state = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    kafka_component.provision()
    started = kafka_component.start(state)
    bootstrap = started.env["SLUICE_KAFKA_BOOTSTRAP"]
    results: dict[str, Any] = {"records": args.records, "load_average_before": os.getloadavg()}
    try:
        jars = sparkjars.jar_paths()
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        results["fill_seconds"] = round(fill(bootstrap, topic, args.records), 1)
        alo = build_plan(topic, f"{topic}-out-alo", "atLeastOnce")
        eos = build_plan(topic, f"{topic}-out-eos", "exactlyOnce")
        spark = create_spark(alo, "local[2]", {"spark.driver.memory": "2g"}, jars)
        work = state / "work"
        work.mkdir()

        def plan() -> float:
            return run_plan(spark, alo, bootstrap, work)

        def hand() -> float:
            return run_by_hand(spark, topic, f"{topic}-out-hand", bootstrap, work)

        # warm-up (JIT, connector classes, both code paths) on the same topic, not measured
        run_by_hand(spark, topic, f"{topic}-warm", bootstrap, work)
        plan()
        results["plan_vs_hand"] = interleaved("plan", plan, "hand", hand, args.pairs)
        if args.eos_pairs > 0:
            results["alo_vs_eos"] = interleaved(
                "alo", plan, "eos", lambda: run_plan(spark, eos, bootstrap, work), args.eos_pairs
            )
        spark.stop()
        if args.startup:
            small = f"{topic}-startup"
            fill(bootstrap, small, 1000)
            startup_plan = build_plan(small, f"{small}-out", "atLeastOnce")
            results["d_start_to_first_commit_s"] = round(
                time_to_first_commit(startup_plan, bootstrap, jars, work), 1
            )
        results["load_average_after"] = os.getloadavg()
    finally:
        kafka_component.stop(state)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
