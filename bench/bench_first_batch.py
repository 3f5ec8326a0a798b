"""The first micro-batch after a takeover, per warm-up strategy, at process level (no pods).

A standby driver prepares its pipeline (optionally warming up), waits, then starts on the
checkpoint the previous holder left and commits its first batch. This measures that last step,
the one a hand-off, a fail-over and an in-place upgrade all wait for, for each ``--modes`` warm-up
(interleaved, ``--rounds`` each, every run a fresh driver process on the same checkpoint, like
successive takeovers):

* ``none``: the pipeline's DataFrames analysed, nothing run;
* ``generic``: plus a small batch job (what standbys did up to now);
* ``plan``: plus the plan itself run once on a scratch checkpoint over the last records of its
  sources, its output read and dropped (``sluice_runtime.warmup``).

``MODE:POLICY`` runs a mode with the source's malformed policy set to ``POLICY`` (default
``deadLetter``, which adds a dead-letter query; ``skip`` has none), e.g. ``plan:skip``.

Input flows at ``--rate`` records/s into an exactly-once query (the benches' ``SELECT id, k``).
Prints, per run, the time from ``start`` to the first committed batch and Spark's durationMs of
that batch; then p50/p95 per mode and the ratio to ``generic``.

    python bench/bench_first_batch.py [--rounds 5] [--modes generic,plan]

Starts its own Kafka broker under a temporary directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (str(REPO), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

SPEC = """  sources:
    - name: events
      topic: {src}
      schema: [{{name: id, type: int}}, {{name: k, type: string}}]
      malformed: {{policy: {malformed}}}
  sql: {sql}
  sink: {{topic: {out}, outputMode: {mode}, delivery: exactlyOnce}}
  trigger: {{processingTime: 1 second}}
"""
QUERIES = {
    "select": ("SELECT id, k FROM events", "append"),
    "count": ("SELECT k, count(*) AS n FROM events GROUP BY k", "update"),
}


def plan_for(src: str, out: str, query: str, malformed: str = "deadLetter") -> Any:
    from tests.support.runtime import plan_from_yaml

    sql, mode = QUERIES[query]
    return plan_from_yaml(SPEC.format(src=src, out=out, sql=sql, mode=mode, malformed=malformed))


def child(args: argparse.Namespace) -> int:
    """One driver: prepare (with the mode's warm-up), start, wait for the first commit."""
    from sluice_runtime import epochs
    from sluice_runtime.pipeline import prepare_pipeline, start_pipeline
    from sluice_runtime.session import create_spark

    warm_up, _, malformed = args.mode.partition(":")
    plan = plan_for(args.src, args.out, args.query, malformed or "deadLetter")
    jars = json.loads(args.jars)
    spark = create_spark(plan, "local[2]", {"spark.sql.shuffle.partitions": "2"}, jars, own_session=True)
    t = time.monotonic()
    prepared = prepare_pipeline(spark, plan, bootstrap=args.bootstrap, query_id=args.query_id,
                                warm_up=warm_up)
    warm = time.monotonic() - t
    time.sleep(2)
    checkpoint = Path(args.checkpoint)
    before = epochs.last_commit_time(checkpoint)
    timings = time_sink_steps()
    compiled_before = compilations(spark)
    t0 = time.monotonic()
    pipeline = start_pipeline(prepared, checkpoint=str(checkpoint))
    started = time.monotonic() - t0
    first = None
    deadline = t0 + 300
    while time.monotonic() < deadline:
        latest = epochs.last_commit_time(checkpoint)
        if latest is not None and (before is None or latest[0] > before[0]):
            first = time.monotonic() - t0
            break
        time.sleep(0.02)
    time.sleep(1.5)
    progress = [p for p in pipeline.main.recentProgress if before is None or int(p["batchId"]) > before[0]]
    durations = dict(progress[0]["durationMs"]) if progress else {}
    durations.update({k: round(v * 1000) for k, v in timings.items()})
    durations["classes compiled"] = compilations(spark) - compiled_before
    pipeline.main.stop()
    for q in pipeline.dead_letter.values():
        q.stop()
    if pipeline.eos_sink is not None:
        pipeline.eos_sink.close()
    print(json.dumps({"mode": args.mode, "warm": round(warm, 2), "start": round(started, 2),
                      "first_commit": None if first is None else round(first, 2), "durationMs": durations}),
          flush=True)
    return 0


def compilations(spark: Any) -> int:
    """How many classes Spark's code generator compiled so far (cache misses) in this JVM."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def time_sink_steps() -> dict[str, float]:
    """Time the exactly-once sink's steps of the first batch (seconds, first call of each)."""
    from sluice_runtime.sink_exactly_once import TransactionalSink

    timings: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                timings.setdefault(name, time.monotonic() - t)
        return wrapper

    for name in ("init", "_ensure_marker", "write_rows"):
        setattr(TransactionalSink, name, timed(f"sink.{name}", getattr(TransactionalSink, name)))
    write_batch = TransactionalSink.write_batch

    def first_batch(self: TransactionalSink, frame: Any, batch_id: int) -> bool:
        out = write_batch(self, frame, batch_id)
        for part, seconds in self.last_timings.items():
            timings.setdefault(f"sink.{part}", seconds)
        return out

    TransactionalSink.write_batch = first_batch  # type: ignore[method-assign]
    return timings


def feed(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n = 0
    while not stop.is_set():
        producer.produce(topic, key=str(n % 7), value=json.dumps({"id": n, "k": f"k{n % 7}"}))
        producer.poll(0)
        n += 1
        time.sleep(1.0 / rate)
    producer.flush(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default="generic,plan")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--query", choices=sorted(QUERIES), default="select")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("mode", "bootstrap", "src", "out", "checkpoint", "jars", "query-id"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    from bench_failover import percentile
    from confluent_kafka.admin import AdminClient, NewTopic
    from sluice_dev.platform import kafka, sparkjars

    modes = args.modes.split(",")
    jars = [str(p) for p in sparkjars.jar_paths()]
    with tempfile.TemporaryDirectory(prefix="sluice-first-batch-") as tmp:
        state = Path(tmp)
        bootstrap = kafka.start(state / "platform").env["SLUICE_KAFKA_BOOTSTRAP"]
        stop = threading.Event()
        try:
            src, out = f"fb-in-{uuid.uuid4().hex[:6]}", f"fb-out-{uuid.uuid4().hex[:6]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1)
                                          for t in (src, out)]).values():
                f.result(30)
            threading.Thread(target=feed, args=(bootstrap, src, args.rate, stop), daemon=True).start()
            results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            common = ["--bootstrap", bootstrap, "--src", src, "--out", out, "--query", args.query,
                      "--checkpoint", str(state / "checkpoint"), "--jars", json.dumps(jars),
                      "--query-id", "fb"]
            # round 0 (not counted): the first driver on an empty checkpoint
            for round_ in range(args.rounds + 1):
                for mode in modes:
                    proc = subprocess.run([sys.executable, __file__, "--child", "--mode", mode, *common],
                                          capture_output=True, text=True, timeout=900,
                                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
                    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
                    if proc.returncode != 0 or not lines:
                        print(proc.stderr[-3000:], file=sys.stderr)
                        raise SystemExit(f"driver run failed ({mode}, exit {proc.returncode})")
                    record = json.loads(lines[-1])
                    print(f"round {round_} {mode:8s} warm-up {record['warm']:6.2f}s"
                          f"  start {record['start']:5.2f}s  first commit {record['first_commit']}s"
                          f"  {record['durationMs']}", flush=True)
                    if round_ > 0:
                        results[mode].append(record)
            print(f"\n{'mode':8s} {'p50':>7s} {'p95':>7s}  (seconds from start to the first commit)")
            p50s: dict[str, float] = {}
            for mode in modes:
                values = [float(r["first_commit"]) for r in results[mode]]
                p50s[mode] = percentile(values, 0.5)
                print(f"{mode:8s} {p50s[mode]:7.2f} {percentile(values, 0.95):7.2f}")
            base = "generic" if "generic" in modes else modes[0]
            for mode in modes:
                if mode != base:
                    print(f"{mode} / {base}: {p50s[mode] / p50s[base]:.2f}")
        finally:
            stop.set()
            kafka.stop(state / "platform")
    return 0


if __name__ == "__main__":
    sys.exit(main())
