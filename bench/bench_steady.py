"""CPU of one exactly-once driver in its steady state, at process level (no pods), per setting.

A driver at a batch a second does little per batch, but its JVM does it every second, for hours, and
on a small node the drivers' steady state is what a hand-off or a restart competes with. This runs
one driver (the pipeline of ``bench_first_batch``: ``SELECT id, k FROM events`` into an exactly-once
sink, a 1-second trigger) on ``--rate`` records/s per ``--modes`` setting, interleaved, ``--rounds``
each, every run a fresh driver process on a checkpoint of its own, and measures from ``--window``
``A:B`` (seconds after the driver started; the JVM still compiles hot code for minutes):

* the driver's CPU (its Python process and its JVM, from ``/proc``), in % of one core;
* the whole machine's busy CPU, which also counts the processes the driver starts (and the broker
  and the feed, the same for every mode), in % of one core.

Modes (combine with ``+``): ``runtime`` (the runtime's Spark settings), ``spark`` (Spark's own
checkpoint file manager, on Hadoop's FileContext, instead of the runtime's), ``dlq`` (the source's
malformed policy ``deadLetter``: dead letters written with the batch; default ``skip``),
``separate`` (with ``dlq``: a dead-letter query of its own, as before dead letters went with the
batch and as a checkpoint an older runtime started still runs), ``monitor`` (the
runtime's progress monitor runs, as in a pod), ``recent`` (the monitor reads every report Spark
retains each second, PySpark's ``recentProgress``, as it did before ``sluice_runtime.progress``),
``dlqfast`` (with ``separate``: the dead-letter query triggers with the main query, as it did before
``sluice_runtime.pipeline.DEAD_LETTER_INTERVAL``). ``spark+recent+dlqfast`` is a driver as it ran
before those three changes (add ``separate``).

    python bench/bench_steady.py [--rounds 2] [--modes spark+recent+dlqfast+separate+monitor+dlq,monitor+dlq]
        [--window 60:150]

Starts its own Kafka broker under a temporary directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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

from bench_first_batch import feed, plan_for  # noqa: E402

#: Spark's default checkpoint file manager for ``file:`` paths (the ``spark`` mode)
FILE_CONTEXT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
)


def process_cpu(pid: int) -> float:
    """CPU-seconds of ``pid`` and its live descendants (every thread)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total


def machine_busy() -> float:
    """CPU-seconds the machine spent busy (all CPUs, everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def child(args: argparse.Namespace) -> int:
    """One driver: the pipeline started with the mode's settings, then idle until killed."""
    from sluice_runtime import pipeline as pipeline_mod
    from sluice_runtime.pipeline import prepare_pipeline, start_pipeline
    from sluice_runtime.session import create_spark

    parts = set(args.mode.split("+"))
    if "separate" in parts:
        pipeline_mod.separate_dead_letters = lambda checkpoint, routes: bool(routes)  # type: ignore[assignment]
    if "dlqfast" in parts:
        pipeline_mod.dead_letter_interval = lambda sink: sink.trigger.processing_time or "0 seconds"
    plan = plan_for(args.src, args.out, "select", "deadLetter" if "dlq" in parts else "skip")
    conf = {"spark.sql.shuffle.partitions": "2"}
    if "spark" in parts:
        conf["spark.sql.streaming.checkpointFileManagerClass"] = FILE_CONTEXT_MANAGER
    spark = create_spark(plan, "local[2]", conf, json.loads(args.jars), own_session=True)
    prepared = prepare_pipeline(spark, plan, bootstrap=args.bootstrap, query_id="steady")
    pipeline = start_pipeline(prepared, checkpoint=args.checkpoint)
    if "monitor" in parts:
        from sluice_runtime import driver
        from sluice_runtime.driver import _monitor
        from sluice_runtime.server import RuntimeState

        if "recent" in parts:
            class EveryReport:
                def __init__(self, query: Any) -> None:
                    self.query = query

                def poll(self) -> list[Any]:
                    return list(self.query.recentProgress)

            driver.ProgressTail = EveryReport  # type: ignore[assignment,misc]

        threading.Thread(target=_monitor, args=(pipeline, RuntimeState(), threading.Event()),
                         daemon=True).start()
    print("started", flush=True)
    while True:
        time.sleep(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="spark+recent+dlqfast+separate+monitor+dlq,runtime+monitor+dlq")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--window", default="60:150", help="A:B, seconds after the driver started")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("mode", "bootstrap", "src", "out", "checkpoint", "jars"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    from bench_failover import percentile
    from confluent_kafka.admin import AdminClient, NewTopic
    from sluice_dev.platform import kafka, sparkjars

    modes = args.modes.split(",")
    start, end = (float(x) for x in args.window.split(":"))
    jars = [str(p) for p in sparkjars.jar_paths()]
    driver: dict[str, list[float]] = {m: [] for m in modes}
    machine: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="sluice-steady-") as tmp:
        state = Path(tmp)
        bootstrap = kafka.start(state / "platform").env["SLUICE_KAFKA_BOOTSTRAP"]
        stop = threading.Event()
        try:
            src = f"steady-in-{uuid.uuid4().hex[:6]}"
            outs = {(r, m): f"steady-out-{uuid.uuid4().hex[:6]}" for r in range(args.rounds) for m in modes}
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1)
                                          for t in (src, *outs.values())]).values():
                f.result(30)
            threading.Thread(target=feed, args=(bootstrap, src, args.rate, stop), daemon=True).start()
            for round_ in range(args.rounds):
                for mode in modes:
                    log = state / f"driver-{round_}-{mode}.log"
                    cmd = [sys.executable, __file__, "--child", "--mode", mode, "--bootstrap", bootstrap,
                           "--src", src, "--out", outs[(round_, mode)], "--jars", json.dumps(jars),
                           "--checkpoint", str(state / f"checkpoint-{round_}-{mode}")]
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
                    with log.open("wb") as out:
                        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)
                    try:
                        time.sleep(start)
                        c0, m0, t0 = process_cpu(proc.pid), machine_busy(), time.monotonic()
                        time.sleep(end - start)
                        c1, m1, t1 = process_cpu(proc.pid), machine_busy(), time.monotonic()
                        if proc.poll() is not None:
                            raise SystemExit(f"driver {mode} exited early:\n{log.read_text()[-3000:]}")
                    finally:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait(30)
                    driver[mode].append((c1 - c0) / (t1 - t0) * 100)
                    machine[mode].append((m1 - m0) / (t1 - t0) * 100)
                    print(f"round {round_} {mode:20s} driver {driver[mode][-1]:5.1f} %  machine "
                          f"{machine[mode][-1]:5.1f} %  (first {start:.0f} s: {c0:.1f} CPU-s; load "
                          f"{os.getloadavg()[0]:.2f})", flush=True)
        finally:
            stop.set()
            kafka.stop(state / "platform")
    print(f"\n{'mode':20s} {'driver p50':>10s} {'p95':>6s} {'machine p50':>11s} {'p95':>6s}  (% of one core)")
    for mode in modes:
        print(f"{mode:20s} {percentile(driver[mode], 0.5):10.1f} {percentile(driver[mode], 0.95):6.1f} "
              f"{percentile(machine[mode], 0.5):11.1f} {percentile(machine[mode], 0.95):6.1f}")
    base = modes[0]
    for mode in modes[1:]:
        print(f"{mode} / {base}: driver {percentile(driver[mode], 0.5) / percentile(driver[base], 0.5):.2f}, "
              f"machine {percentile(machine[mode], 0.5) / percentile(machine[base], 0.5):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
