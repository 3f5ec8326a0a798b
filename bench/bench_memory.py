"""Memory of one driver per query, at process level (no pods): the runtime's process tree sampled
every second while a query runs at a modest input rate.

Each query runs as ``python -m sluice_runtime.cli run`` (the command of a driver pod, ``local[2]``)
against its own Kafka broker, fed ``--rate`` records/s of JSON records made from the query's source
schema (``--keys`` distinct values per string column, event times of now). After the first
committed batch and ``--warmup`` seconds, it samples for ``--seconds``:

* RSS of the runtime's Python process and of its JVM, from ``/proc``, and their sum (the tree: the
  processes the JVM starts for a moment, ``chmod`` for each checkpoint file, are left out: until
  they exec, they share the JVM's pages and would count them twice);
* the JVM's heap: used (``jstat -gc``: survivor + eden + old) and committed.

At the end of each run it asks the JVM for its Native Memory Tracking summary (``--nmt``; the JVM
then runs with ``-XX:NativeMemoryTracking=summary``), which splits the JVM's committed memory into
heap, class metadata, code, threads, GC and the rest. RocksDB's memory is native memory outside the
JVM's accounting: it is in the JVM's RSS, not in the NMT total.

Modes, interleaved per query (``--modes``):

* ``spark``: the runtime as it ran before sizing: no container memory given, so Spark's 1 GiB
  default heap and RocksDB unbounded (the baseline);
* ``sized``: ``SLUICE_MEMORY_LIMIT=<--memory>``, as the operator sets it on a driver container
  (the heap and RocksDB's bound derived by ``sluice.core.sizing``).

Queries (``--queries``): the manifests under ``examples/`` (``pageviews``, ``revenue``: windowed
aggregations with RocksDB state) and ``select-eos`` (the benchmarks' stateless ``SELECT id, k`` into
an exactly-once sink, whose rows pass through the driver's Python process), or paths of manifests.
Prints every run, then per query and mode p50/p95 of the tree's RSS and of the heap used, and the
largest sample.

    python bench/bench_memory.py [--queries pageviews,revenue,select-eos] [--modes spark,sized]
        [--memory 2Gi] [--rate 50] [--warmup 30] [--seconds 60] [--rounds 1] [--nmt]

Starts its own Kafka broker under a temporary directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (str(REPO), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_failover import percentile  # noqa: E402

EXAMPLES = REPO / "examples"
#: the variable the operator sets on a driver container (Downward API), see sluice.core.sizing
MEMORY_ENV = "SLUICE_MEMORY_LIMIT"
SELECT_EOS = """\
apiVersion: sluice.dev/v1alpha1
kind: StreamingQuery
metadata: {name: select-eos, namespace: bench}
spec:
  sources:
    - name: events
      topic: events
      schema: [{name: id, type: int}, {name: k, type: string}]
  sql: SELECT id, k FROM events
  sink: {topic: events-out, delivery: exactlyOnce}
  trigger: {processingTime: 1 second}
"""
MIB = 1024 * 1024


def manifest_text(query: str) -> str:
    if query == "select-eos":
        return SELECT_EOS
    path = Path(query) if query.endswith((".yaml", ".yml")) else EXAMPLES / f"{query}.yaml"
    return path.read_text()


def plan_of(query: str, suffix: str) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    """The query's plan on topics of its own (``<topic>-<suffix>``), and each source topic's schema."""
    import yaml
    from sluice.core.compiler import compile_query
    from sluice.core.manifest import parse_manifest

    doc = yaml.safe_load(manifest_text(query))
    schemas: dict[str, list[dict[str, Any]]] = {}
    for source in doc["spec"]["sources"]:
        source["topic"] = f"{source['topic']}-{suffix}"
        schemas[source["topic"]] = source["schema"]
    doc["spec"]["sink"]["topic"] = f"{doc['spec']['sink']['topic']}-{suffix}"
    return compile_query(parse_manifest(yaml.safe_dump(doc)).spec), schemas


def record(schema: list[dict[str, Any]], n: int, keys: int, rng: random.Random) -> dict[str, Any]:
    """One JSON record of ``schema``: strings from ``keys`` values, event times of now."""
    out: dict[str, Any] = {}
    for column in schema:
        kind = str(column["type"]).lower()
        if kind == "string":
            out[column["name"]] = f"{column['name']}-{rng.randrange(keys)}"
        elif kind == "timestamp":
            out[column["name"]] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        elif kind in ("int", "integer", "bigint", "long"):
            out[column["name"]] = n
        elif kind in ("double", "float") or kind.startswith("decimal"):
            out[column["name"]] = round(rng.uniform(1, 100), 2)
        elif kind == "boolean":
            out[column["name"]] = n % 2 == 0
        else:
            raise SystemExit(f"bench_memory: no generator for column type {kind!r}")
    return out


def feed(bootstrap: str, schemas: dict[str, list[dict[str, Any]]], rate: float, keys: int,
         stop: threading.Event) -> None:
    """``rate`` records/s into every source topic until ``stop``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(7)
    n, start = 0, time.monotonic()
    while not stop.is_set():
        for topic, schema in schemas.items():
            producer.produce(topic, value=json.dumps(record(schema, n, keys, rng)).encode())
        producer.poll(0)
        n += 1
        ahead = start + n / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(10)


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    seen: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo += children(p)
    return seen


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class HeapWatch:
    """The JVM's heap from ``jstat -gc PID 1000``: one line a second, one jstat process."""

    def __init__(self, pid: int) -> None:
        self.used = 0
        self.committed = 0
        self.proc = subprocess.Popen(["jstat", "-gc", str(pid), "1000"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        header: list[str] = []
        for line in self.proc.stdout:
            fields = line.split()
            if fields and fields[0] == "S0C":
                header = fields
                continue
            if not header or len(fields) != len(header):
                continue
            row = dict(zip(header, (float(f.replace(",", ".")) for f in fields), strict=True))
            self.used = int((row["S0U"] + row["S1U"] + row["EU"] + row["OU"]) * 1024)
            self.committed = int((row["S0C"] + row["S1C"] + row["EC"] + row["OC"]) * 1024)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def native_memory(pid: int) -> dict[str, int]:
    """Committed MiB per NMT category (``Total`` included), {} without NMT."""
    try:
        text = subprocess.run(["jcmd", str(pid), "VM.native_memory", "summary"], capture_output=True,
                              text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[str, int] = {}
    for match in re.finditer(r"^-?\s*([A-Za-z][A-Za-z /]*?)\s*\(reserved=\d+KB, committed=(\d+)KB",
                             text, re.MULTILINE):
        out[match.group(1).strip()] = int(match.group(2)) // 1024
    total = re.search(r"Total: reserved=\d+KB, committed=(\d+)KB", text)
    if total:
        out["Total"] = int(total.group(1)) // 1024
    return out


def metric(port: int, name: str) -> float | None:
    """The sum of a metric's samples at the runtime's /metrics (None when absent)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and not line.startswith("#")]
    return sum(values) if values else None


@dataclass
class Run:
    query: str
    mode: str
    tree: list[int] = field(default_factory=list)
    python: list[int] = field(default_factory=list)
    jvm: list[int] = field(default_factory=list)
    heap_used: list[int] = field(default_factory=list)
    heap_committed: int = 0
    max_heap: str = ""
    nmt: dict[str, int] = field(default_factory=dict)
    state_rows: float | None = None
    batches: float | None = None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_one(args: argparse.Namespace, query: str, mode: str, bootstrap: str, jars: list[str],
            state: Path) -> Run:
    from confluent_kafka.admin import AdminClient, NewTopic

    suffix = uuid.uuid4().hex[:6]
    plan, schemas = plan_of(query, suffix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [*schemas, plan.sink.topic]
    for future in admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1)
                                       for t in topics]).values():
        future.result(30)
    work = state / f"{query.replace('/', '_')}-{mode}-{suffix}"
    work.mkdir(parents=True)
    plan_path = work / "plan.json"
    plan_path.write_text(plan.to_json())
    checkpoint = work / "checkpoint"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in (MEMORY_ENV, "SPARK_SUBMIT_OPTS")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    if mode == "sized":
        env[MEMORY_ENV] = args.memory
    elif mode != "spark":
        raise SystemExit(f"bench_memory: unknown mode {mode!r} (spark, sized)")
    if args.nmt:
        env["SPARK_SUBMIT_OPTS"] = "-XX:NativeMemoryTracking=summary"
    cmd = [sys.executable, "-m", "sluice_runtime.cli", "run", "--plan", str(plan_path), "--checkpoint",
           str(checkpoint), "--bootstrap", bootstrap, "--master", "local[2]", "--jars", ",".join(jars),
           "--query-id", f"mem-{suffix}", "--http-addr", f"127.0.0.1:{port}"]
    stop = threading.Event()
    threading.Thread(target=feed, args=(bootstrap, schemas, args.rate, args.keys, stop), daemon=True).start()
    log = work / "driver.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    result = Run(query=query, mode=mode)
    watch: HeapWatch | None = None
    try:
        deadline = time.monotonic() + 300
        while not (checkpoint / "commits" / "0").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"driver {query}/{mode} did not commit a batch:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        jvm = next((p for p in tree(proc.pid) if comm(p) == "java"), None)
        if jvm is None:
            raise SystemExit(f"driver {query}/{mode}: no JVM under process {proc.pid}")
        watch = HeapWatch(jvm)
        time.sleep(args.warmup)
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise SystemExit(f"driver {query}/{mode} exited:\n{log.read_text()[-3000:]}")
            python, java = rss_bytes(proc.pid), rss_bytes(jvm)
            result.tree.append(python + java)
            result.python.append(python)
            result.jvm.append(java)
            if watch.used:
                result.heap_used.append(watch.used)
            time.sleep(1.0)
        result.heap_committed = watch.committed
        cmdline = Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")
        result.max_heap = next((a.decode() for a in cmdline if a.startswith(b"-Xmx")), "(none)")
        if args.nmt:
            result.nmt = native_memory(jvm)
        result.state_rows = metric(port, "sluice_state_rows")
        result.batches = metric(port, "sluice_batches_total")
    finally:
        stop.set()
        if watch is not None:
            watch.stop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(30)
        for pid in children(proc.pid):  # the JVM runs in a session of its own
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return result


def mib(values: list[int], q: float) -> str:
    return f"{percentile([float(v) for v in values], q) / MIB:.0f}" if values else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--queries", default="pageviews,revenue,select-eos")
    parser.add_argument("--modes", default="spark,sized")
    parser.add_argument("--memory", default="2Gi", help="the container memory of mode sized")
    parser.add_argument("--rate", type=float, default=50.0, help="records/s into each source topic")
    parser.add_argument("--keys", type=int, default=1000, help="distinct values per string column")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds after the first commit")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds sampled")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--nmt", action="store_true", help="the JVM's Native Memory Tracking summary")
    args = parser.parse_args()

    from sluice_dev.platform import kafka, sparkjars

    jars = [str(p) for p in sparkjars.jar_paths()]
    queries, modes = args.queries.split(","), args.modes.split(",")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="sluice-memory-") as tmp:
        state = Path(tmp)
        bootstrap = kafka.start(state / "platform").env["SLUICE_KAFKA_BOOTSTRAP"]
        try:
            for round_ in range(args.rounds):
                for query in queries:
                    for mode in modes:
                        r = run_one(args, query, mode, bootstrap, jars, state)
                        runs.append(r)
                        nmt = (" nmt " + ", ".join(f"{k} {v}" for k, v in r.nmt.items())) if r.nmt else ""
                        print(f"round {round_} {query:12s} {mode:6s} {r.max_heap:9s} tree RSS p50 "
                              f"{mib(r.tree, 0.5)} p95 {mib(r.tree, 0.95)} max {mib(r.tree, 1)} MiB; "
                              f"python p50 {mib(r.python, 0.5)}, JVM p50 {mib(r.jvm, 0.5)} MiB; heap used "
                              f"p50 {mib(r.heap_used, 0.5)} p95 {mib(r.heap_used, 0.95)} of "
                              f"{r.heap_committed / MIB:.0f} MiB committed; state rows {r.state_rows}, "
                              f"batches {r.batches}{nmt} (load {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            kafka.stop(state / "platform")
    print(f"\n{'query':12s} {'mode':6s} {'-Xmx':9s} {'tree RSS p50':>12s} {'p95':>5s} {'max':>5s} "
          f"{'python p50':>10s} {'JVM p50':>7s} {'heap used p50':>13s} {'p95':>5s} {'non-heap':>8s} "
          f"{'outside NMT':>11s}  (MiB)")
    for query in queries:
        for mode in modes:
            rs = [r for r in runs if r.query == query and r.mode == mode]
            tree_s = [v for r in rs for v in r.tree]
            heap = [v for r in rs for v in r.heap_used]
            python = [v for r in rs for v in r.python]
            jvm = [v for r in rs for v in r.jvm]
            # the JVM's own memory outside the heap (NMT committed: class metadata, code, threads, GC,
            # symbols...), and what its RSS holds beyond NMT's total: native memory the JVM does not
            # track (RocksDB, the C libraries' allocations); the last run's NMT of each query and mode
            nmt = rs[-1].nmt
            non_heap = str(nmt["Total"] - nmt.get("Java Heap", 0) - nmt.get("Native Memory Tracking", 0)) \
                if nmt else "-"
            outside = str(round(percentile([float(v) for v in rs[-1].jvm], 0.5) / MIB) - nmt["Total"]) \
                if nmt and rs[-1].jvm else "-"
            print(f"{query:12s} {mode:6s} {rs[0].max_heap:9s} {mib(tree_s, 0.5):>12s} "
                  f"{mib(tree_s, 0.95):>5s} {mib(tree_s, 1):>5s} {mib(python, 0.5):>10s} "
                  f"{mib(jvm, 0.5):>7s} {mib(heap, 0.5):>13s} {mib(heap, 0.95):>5s} {non_heap:>8s} "
                  f"{outside:>11s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
