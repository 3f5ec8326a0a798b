"""Dead letters with the batch against a dead-letter query of its own (issue 31, one read of the source).

Measures, in one run and on one SparkSession (``local[2]``), over one pre-filled topic of
``--records`` JSON records of which ``--bad-every``-th is malformed:

(a) **catch-up time**: the plan-built pipeline with ``availableNow`` until every query of it is
    done, interleaved over ``--rounds`` rounds, per mode:

    * ``batch``: the dead letters written with the batch (the runtime's way: one query whose frame
      is the union of the output and the dead letters);
    * ``separate``: a dead-letter query of its own (the way before; what a checkpoint an older
      runtime started still runs: ``sluice_runtime.pipeline.separate_dead_letters`` forced);
    * ``skip``: the malformed policy ``skip``, no dead letters at all (the floor).

    Prints p50/p95 of each mode's seconds and the ratios of the medians (``batch / separate``,
    ``batch / skip``), and checks that each run wrote every dead letter.
(b) with ``--latency N``: **dead-letter latency**, for ``batch`` and ``separate`` with a 1-second
    trigger: N malformed records produced one every ``--gap`` seconds, each timed from its
    producer timestamp to when a ``read_committed`` consumer of the dead-letter topic gets it;
    p50/p95 per mode.

The query is ``--query select`` (a projection) or ``window`` (a windowed count), exactly-once
written by the driver (``--delivery`` to change it). It starts its own Kafka broker in a temporary
state directory and uses the cached connector jars.

    python bench/bench_dead_letters.py [--records 400000] [--rounds 3] [--query select] [--latency 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for sub in ("operator", "runtime-image", "devtools"):
    sys.path.insert(0, str(ROOT / sub))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runtime import send  # noqa: E402

QUERIES = {
    "select": ("SELECT order_id, customer, amount FROM orders", "append"),
    "window": ("SELECT window(ts, '1 minute').start AS minute, count(*) AS n FROM orders "
               "GROUP BY window(ts, '1 minute')", "update"),
}
MODES = ("batch", "separate", "skip")


def manifest(topic: str, out: str, query: str, policy: str, delivery: str, trigger: str) -> str:
    sql, mode = QUERIES[query]
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
      malformed: {{policy: {policy}, topic: {out}.dlq}}
  sql: "{sql}"
  sink: {{topic: {out}, outputMode: {mode}, delivery: {delivery}}}
{trigger}"""


def build_plan(topic: str, out: str, query: str, policy: str, delivery: str, trigger: str = "") -> Any:
    from sluice.core.compiler import compile_query
    from sluice.core.manifest import parse_manifest

    return compile_query(parse_manifest(manifest(topic, out, query, policy, delivery, trigger)).spec)


def fill(bootstrap: str, topic: str, n: int, bad_every: int) -> int:
    """``n`` records, every ``bad_every``-th not JSON; returns how many are malformed."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                  "compression.type": "lz4", "queue.buffering.max.messages": 500_000})
    base, bad = 1767261600, 0  # 2026-01-01T10:00:00Z
    for i in range(n):
        if i % bad_every == bad_every - 1:
            value, bad = f"not json {i}", bad + 1
        else:
            ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + i // 100))
            value = f'{{"order_id":"o{i}","customer":"c{i % 50}","amount":{i % 97}.5,"ts":"{ts}"}}'
        send(p, topic, value.encode(), i)
    assert p.flush(120) == 0
    return bad


def count(bootstrap: str, topic: str) -> int:
    """Records of ``topic`` a ``read_committed`` reader sees (its partitions assigned, not
    subscribed: a new group's first rebalance can outlast the reader's idle time)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    n, idle = 0, time.monotonic()
    try:
        while time.monotonic() - idle < 3.0:
            batch = c.consume(10000, 0.5)
            if batch:
                n += sum(1 for m in batch if not m.error())
                idle = time.monotonic()
    finally:
        c.close()
    return n


def forced(mode: str) -> None:
    """Make the pipeline run the mode's way (``separate``: a dead-letter query of its own)."""
    from sluice_runtime import pipeline

    original = getattr(forced, "original", None) or pipeline.separate_dead_letters
    forced.original = original  # type: ignore[attr-defined]
    pipeline.separate_dead_letters = (lambda checkpoint, routes: bool(routes)) if mode == "separate" \
        else original  # type: ignore[assignment]


def catch_up(spark: Any, plan: Any, bootstrap: str, work: Path, mode: str) -> float:
    from sluice_runtime.pipeline import build_pipeline

    forced(mode)
    started = time.monotonic()
    pipe = build_pipeline(spark, plan, checkpoint=str(work / uuid.uuid4().hex), bootstrap=bootstrap,
                          query_id=f"bench-{uuid.uuid4().hex[:8]}", available_now=True)
    for q in pipe.all_queries():
        q.awaitTermination()
        if q.exception():
            raise RuntimeError(str(q.exception()))
    elapsed = time.monotonic() - started
    if pipe.eos_sink is not None:
        pipe.eos_sink.close()
    return elapsed


def latency(spark: Any, bootstrap: str, work: Path, mode: str, args: argparse.Namespace) -> list[float]:
    """Seconds from each malformed record's producer timestamp to a read_committed reader."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from sluice_runtime.pipeline import build_pipeline

    forced(mode)
    src, out = f"lat-{uuid.uuid4().hex[:8]}", f"lat-out-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(src, num_partitions=2, replication_factor=1)])[src].result(30)
    trigger = "  trigger: {processingTime: 1 second}\n"
    plan = build_plan(src, out, args.query, "deadLetter", args.delivery, trigger)
    pipe = build_pipeline(spark, plan, checkpoint=str(work / uuid.uuid4().hex), bootstrap=bootstrap,
                          query_id=f"lat-{uuid.uuid4().hex[:8]}")
    got: list[float] = []
    stop = threading.Event()

    def read() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "fetch.wait.max.ms": 10})
        c.subscribe([f"{out}.dlq"])
        try:
            while not stop.is_set():
                m = c.poll(0.05)
                if m is not None and not m.error():
                    got.append(time.time() - float((m.value() or b"0").decode().split()[-1]))
        finally:
            c.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    time.sleep(15)  # the first batches and the dead-letter query started
    for i in range(args.latency):
        good = json.dumps({"order_id": f"l{i}", "customer": "c", "amount": 1.0, "ts": "2026-01-01T10:00:00Z"})
        p.produce(src, value=good.encode())
        p.produce(src, value=f"not json {time.time()}".encode())
        p.flush(10)
        time.sleep(args.gap)
    deadline = time.monotonic() + 30
    while len(got) < args.latency and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    reader.join(5)
    for q in pipe.all_queries():
        q.stop()
    if pipe.eos_sink is not None:
        pipe.eos_sink.close()
    if len(got) != args.latency:
        raise RuntimeError(f"{mode}: {len(got)} of {args.latency} dead letters arrived")
    return got


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--bad-every", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--query", choices=sorted(QUERIES), default="select")
    parser.add_argument("--delivery", choices=["exactlyOnce", "atLeastOnce"], default="exactlyOnce")
    parser.add_argument("--latency", type=int, default=0, help="malformed records timed per mode (0: none)")
    parser.add_argument("--gap", type=float, default=1.7, help="seconds between two timed records")
    args = parser.parse_args()

    from sluice_dev.platform import kafka, sparkjars
    from sluice_runtime.session import create_spark

    jars = [str(p) for p in sparkjars.jar_paths()]
    with tempfile.TemporaryDirectory(prefix="bench-dlq-") as tmp:
        work = Path(tmp)
        kafka.provision()
        try:
            bootstrap = kafka.start(work / "kafka").env["SLUICE_KAFKA_BOOTSTRAP"]
            topic = f"src-{uuid.uuid4().hex[:8]}"
            bad = fill(bootstrap, topic, args.records, args.bad_every)
            plans = {}
            for mode in MODES:
                out = f"out-{mode}-{uuid.uuid4().hex[:6]}"
                plans[mode] = build_plan(topic, out, args.query, "skip" if mode == "skip" else "deadLetter",
                                         args.delivery)
            spark = create_spark(plans["batch"], "local[2]", {"spark.driver.memory": "2g"}, jars)
            spark.sparkContext.setLogLevel("ERROR")
            for mode in MODES:  # one unmeasured run each: the JVM warm for all
                plans[mode] = build_plan(topic, f"warm-{mode}-{uuid.uuid4().hex[:6]}", args.query,
                                         "skip" if mode == "skip" else "deadLetter", args.delivery)
                catch_up(spark, plans[mode], bootstrap, work, mode)
            times: dict[str, list[float]] = {m: [] for m in MODES}
            for r in range(args.rounds):
                order = MODES if r % 2 == 0 else tuple(reversed(MODES))
                for mode in order:
                    out = f"out-{mode}-{r}-{uuid.uuid4().hex[:6]}"
                    plan = build_plan(topic, out, args.query, "skip" if mode == "skip" else "deadLetter",
                                      args.delivery)
                    seconds = catch_up(spark, plan, bootstrap, work, mode)
                    times[mode].append(seconds)
                    if mode != "skip":
                        letters = count(bootstrap, f"{out}.dlq")
                        if letters != bad:
                            raise RuntimeError(f"{mode}: {letters} dead letters, {bad} malformed records")
                    print(f"round {r} {mode}: {seconds:.2f}s", flush=True)
            summary: dict[str, Any] = {"records": args.records, "malformed": bad, "query": args.query,
                                       "delivery": args.delivery, "rounds": args.rounds}
            for mode in MODES:
                summary[mode] = {"p50": round(statistics.median(times[mode]), 2),
                                 "p95": round(pct(times[mode], 0.95), 2),
                                 "runs": [round(t, 2) for t in times[mode]]}
            summary["batch/separate"] = round(summary["batch"]["p50"] / summary["separate"]["p50"], 3)
            summary["batch/skip"] = round(summary["batch"]["p50"] / summary["skip"]["p50"], 3)
            if args.latency:
                for mode in ("batch", "separate"):
                    got = latency(spark, bootstrap, work, mode, args)
                    summary[f"latency_{mode}"] = {"p50": round(statistics.median(got), 2),
                                                  "p95": round(pct(got, 0.95), 2), "n": len(got)}
                    print(f"latency {mode}: {summary[f'latency_{mode}']}", flush=True)
            print(json.dumps(summary, indent=2))
        finally:
            kafka.stop(work / "kafka")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
