"""A driver JVM's start with and without the class-data-sharing archive (sluice_runtime.classdata).

Each run is a fresh Python process that starts a driver the way the runtime does (PySpark's
launcher, ``SPARK_SUBMIT_OPTS``; ``local[2]``, the runtime's session defaults, RocksDB state) and
runs a streaming windowed count (a rate source, ``foreachBatch``) to its first committed batch. It
prints, per run, the seconds to the SparkSession, to the first committed batch, and the JVM's CPU
seconds by then; then p50/p95 per variant and the ratios ``with archive / without``:

* ``none``: ``-XX:TieredStopAtLevel=1`` only (C1, as the test suite's drivers);
* ``archive``: the same plus ``-XX:SharedArchiveFile`` naming the archive of this machine's JDK
  and PySpark (``sluice_dev.platform.classdata``, written once under the cache, as the runtime
  image writes its own at build time).

The variants alternate (none, archive, none, ...) after one unmeasured run of each, so both see
the same machine load.

``--executor``: an executor JVM instead, started as in an executor pod (``sluice-runtime
executor`` with the variables Spark's Kubernetes scheduler sets; the archive named in
``SPARK_SUBMIT_OPTS`` as the image names it), its driver URL a port nobody listens on: the seconds
until it gave up on the driver (its JVM started, Spark's executor classes loaded, its RPC
environment up, one connection refused) and its CPU seconds.

    python bench/bench_jvm_start.py [--rounds 5] [--jvm-options "-XX:TieredStopAtLevel=1"] [--executor]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for sub in ("operator", "runtime-image", "devtools"):
    sys.path.insert(0, str(ROOT / sub))

from sluice_dev.platform import classdata  # noqa: E402
from sluice_runtime.classdata import use_options  # noqa: E402

DRIVER = """
import json, os, sys, tempfile, time
started = time.monotonic()
from pyspark import SparkContext
from pyspark.sql import SparkSession, functions as F
from sluice_runtime.classdata import session_settings

builder = SparkSession.builder.master("local[2]").appName("bench-jvm-start")
for key, value in session_settings().items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
session = time.monotonic() - started
first = []
def batch(frame, batch_id):
    frame.collect()
    if not first:
        first.append(time.monotonic() - started)
counts = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
          .withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 second")).count())
with tempfile.TemporaryDirectory() as scratch:
    query = (counts.writeStream.outputMode("update").foreachBatch(batch)
             .option("checkpointLocation", scratch + "/cp").trigger(processingTime="500 milliseconds")
             .start())
    while not first:
        query.awaitTermination(0.05)
    pid = SparkContext._gateway.proc.pid
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    query.stop()
spark.stop()
print(json.dumps({"session_s": session, "first_batch_s": first[0], "jvm_cpu_s": cpu}))
"""

METRICS = ("session_s", "first_batch_s", "jvm_cpu_s")
EXECUTOR_METRICS = ("exit_s", "cpu_s")
#: what Spark's Kubernetes scheduler sets on an executor pod (a driver URL nobody answers)
EXECUTOR_POD_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:9", "SPARK_EXECUTOR_ID": "1",
    "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "bench", "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
    "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "bench-exec-1",
}


def run_driver(jvm_options: str) -> dict[str, float]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_SUBMIT_OPTS": jvm_options,
           "PYTHONPATH": os.pathsep.join(str(ROOT / s) for s in ("operator", "runtime-image"))}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"driver failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_executor(jvm_options: str) -> dict[str, float]:
    """``jvm_options``: the executor's own (``SPARK_JAVA_OPT_*``); the archive, when among them, goes
    to ``SPARK_SUBMIT_OPTS`` instead, where the image names it."""
    options = jvm_options.split()
    archive = [o for o in options if o.startswith("-XX:SharedArchiveFile=")]
    own = [o for o in options if o not in archive]
    env = {**os.environ, **EXECUTOR_POD_ENV, "SPARK_SUBMIT_OPTS": " ".join(archive),
           **{f"SPARK_JAVA_OPT_{i}": o for i, o in enumerate(own)}}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "sluice-runtime"), "executor"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if "KubernetesExecutorBackend" not in done.stderr:
        raise SystemExit(f"the executor did not start ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"exit_s": elapsed, "cpu_s": cpu}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jvm-options", default="-XX:TieredStopAtLevel=1")
    parser.add_argument("--executor", action="store_true", help="an executor JVM instead of a driver")
    args = parser.parse_args()
    run, metrics = (run_executor, EXECUTOR_METRICS) if args.executor else (run_driver, METRICS)
    archive = classdata.provision({**os.environ, "SPARK_SUBMIT_OPTS": args.jvm_options})
    variants = {"none": args.jvm_options,
                "archive": " ".join([args.jvm_options, *use_options(archive)])}
    print(f"archive: {archive} ({archive.stat().st_size // 2**20} MB)")
    for options in variants.values():  # one unmeasured run of each
        run(options)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for round_ in range(1, args.rounds + 1):
        for name, options in variants.items():
            result = run(options)
            runs[name].append(result)
            print(f"round {round_} {name:8} " + "  ".join(f"{m} {result[m]:6.2f}" for m in metrics),
                  flush=True)
    summary: dict[str, Any] = {"rounds": args.rounds, "jvm_options": args.jvm_options,
                               "jvm": "executor" if args.executor else "driver"}
    for metric in metrics:
        row: dict[str, dict[str, float]] = {}
        for name in variants:
            values = [r[metric] for r in runs[name]]
            row[name] = {"p50": statistics.median(values), "p95": percentile(values, 0.95)}
        ratio = row["archive"]["p50"] / row["none"]["p50"]
        summary[metric] = {**row, "ratio_p50": ratio}
        print(f"{metric:14} none p50 {row['none']['p50']:6.2f} p95 {row['none']['p95']:6.2f} | "
              f"archive p50 {row['archive']['p50']:6.2f} p95 {row['archive']['p95']:6.2f} | "
              f"ratio p50 {ratio:.2f}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
