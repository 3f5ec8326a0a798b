"""Throughput, driver usage and end-to-end latency through driver and executor pods (issue 31).

On the local real-node platform (the operator installed, the platform's Kafka), in one run:

1. **Catch-up throughput** over one pre-filled topic (``--records``, 4 partitions, JSON records of
   about 100 bytes, produced from the host) for ``--query select`` (a stateless projection with a
   WHERE) or ``window`` (a count per minute, update mode). Configurations, each with 0 and 2
   executors (``--executors``):

   * ``eos``: Sluice exactly-once (0 executors: the driver's transactional producer; 2 executors:
     QueryCluster ``exactlyOnce.writers: tasks``);
   * ``alo``: Sluice at-least-once (Spark's Kafka sink);
   * ``hand``: the same query written by hand in PySpark (readStream kafka, ``selectExpr``,
     writeStream kafka), run as a pod of the same runtime image (``local[*]``, or client mode with
     the executor settings the operator gives a driver).

   Every run is a fresh query (a new checkpoint, a new output topic) reading the topic from the
   earliest offsets, ``--max-offsets`` records per batch, no trigger interval (as fast as
   possible), interleaved over ``--rounds`` (ABC CBA ...). Throughput = input records / (timestamp of
   the last output record - of the first), and the wall time from the apply to the last output
   record (driver start included). The output is read with read_committed and checked: exactly the
   input under exactly-once, at least the input under at-least-once (window: each minute's latest
   count summed).
2. **The driver pod's CPU and memory** during each run, every ~2 s from the kubelet's summary API
   through the API server (first / peak / last sample).
3. **End-to-end latency** p50/p99 at ``--rate`` records/s for ``--latency-seconds`` for the
   stateless query with exactly-once output (``--latency-configs``), from the producer's send to a
   read_committed consumer, with the trigger interval ``--trigger`` (default: none, Sluice's).
4. A PNG (``--plot``): records/s per configuration and the driver's memory over each first run.

    python bench/bench_throughput.py [--records 2000000] [--rounds 1] [--query select]
        [--executors 0,2] [--rate 2000] [--latency-seconds 60] [--trigger '1 second']

Needs nothing running: it starts the platform and the operator like ``make demo`` (and leaves
them running); it deletes its namespaces at the end. Run it under ``flock /tmp/sluice-e2e.lock``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import throughput_pods as tp  # noqa: E402
from bench_failover import Platform, percentile, ready  # noqa: E402

from tests.support.waiting import eventually  # noqa: E402

PYTHON = "/opt/sluice/bin/python"  # the runtime image's Python, with its PySpark


class Bench:
    def __init__(self, p: Platform, args: argparse.Namespace) -> None:
        self.p, self.args = p, args
        self.namespaces: dict[int, str] = {}
        for executors in sorted({int(e) for e in args.executors.split(",")}):
            ns = p.namespace(f"bench-tp{executors}", memory="1Gi")
            spec: dict[str, Any] = {"drainSeconds": 10}
            if executors:
                spec.update({"executors": executors, "storage": {"accessMode": "ReadWriteMany"},
                             "executor": {"requests": {"cpu": "100m", "memory": "512Mi"}},
                             "exactlyOnce": {"writers": "tasks"}})
            p.kubectl("patch", "querycluster", "default", "-n", ns, "--type=merge", "-p",
                      json.dumps({"spec": spec}))
            self.namespaces[executors] = ns
        from sluice.operator.builders.context import default_image

        self.image = args.image or default_image()
        self.hand_ns = tp.hand_namespace(p)

    def sluice_doc(self, ns: str, name: str, src: str, out: str, delivery: str,
                   trigger: str) -> dict[str, Any]:
        sql, mode = tp.QUERIES[self.args.query]
        source: dict[str, Any] = {"name": "src", "topic": src, "schema": tp.SCHEMA,
                                  "maxOffsetsPerTrigger": self.args.max_offsets}
        if self.args.query == "window":
            source["eventTime"] = {"column": "ts", "watermark": "1 minute"}
        spec: dict[str, Any] = {"sources": [source], "sql": sql, "shufflePartitions": 4,
                                "sink": {"topic": out, "outputMode": mode, "delivery": delivery}}
        if trigger:
            spec["trigger"] = {"processingTime": trigger}
        return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
                "metadata": {"name": name, "namespace": ns}, "spec": spec}

    def start(self, config: str, name: str, src: str, out: str, trigger: str = "") -> tuple[str, Any]:
        """Apply the configuration's query; its namespace and how to find its driver pod."""
        kind, executors = config.rsplit("-", 1)
        if kind == "hand":
            job = {"bootstrap": self.p.bootstrap, "src": src, "out": out, "query": self.args.query,
                   "ddl": tp.DDL, "maxOffsets": self.args.max_offsets, "trigger": trigger}
            pod = tp.hand_pod(self.hand_ns, name, self.image, int(executors), job, PYTHON, "1Gi", "768m")
            self.p.kubectl("apply", "-f", "-", stdin=json.dumps(pod))

            def hand_driver() -> dict[str, Any] | None:
                found = json.loads(self.p.kubectl("get", "pods", "-n", self.hand_ns, "-l", f"run={name}",
                                                  "-o", "json"))
                return next(iter(found["items"]), None)
            return self.hand_ns, hand_driver
        ns = self.namespaces[int(executors)]
        delivery = "exactlyOnce" if kind == "eos" else "atLeastOnce"
        self.p.apply_when_admitted(self.sluice_doc(ns, name, src, out, delivery, trigger))
        return ns, lambda: self.p.active(ns, name) or next(iter(self.p.pods(ns, name)), None)

    def stop(self, config: str, ns: str, name: str) -> None:
        """Delete the run's query (or pod) and wait until its driver and executor pods are gone."""
        if config.startswith("hand"):
            self.p.kubectl("delete", "pod", name, "-n", ns, "--grace-period=1", "--wait=false")
        else:
            self.p.kubectl("delete", "sq", name, "-n", ns, "--wait=false")

        def gone() -> bool:
            pods = json.loads(self.p.kubectl("get", "pods", "-n", ns, "-o", "json"))["items"]
            return not [q for q in pods if q["metadata"]["name"].startswith(name)
                        or q["metadata"].get("labels", {}).get("sluice.dev/query") == name]
        eventually(gone, what=f"the pods of {name} gone", timeout=300, interval=2)

    def catch_up(self, config: str, src: str, round_: int) -> dict[str, Any]:
        name = f"r{round_}-{config}"
        out = f"bench-tp-{uuid.uuid4().hex[:6]}-{name}-out"
        tp.create_topic(self.p, out)
        output = tp.Output(self.p.bootstrap, out, self.args.query == "window")
        applied = time.time()
        ns, find = self.start(config, name, src, out)
        usage = tp.DriverUsage(self.p, ns, find, name)
        records = self.args.records
        try:
            eventually(lambda: output.counted() >= records, what=f"{name}'s output",
                       timeout=self.args.timeout, interval=1)
            time.sleep(8)  # anything beyond the input (a duplicate) would show by now
        finally:
            samples = usage.stop()
            output.stop()
            self.stop(config, ns, name)
        counted = output.counted()
        exact = config.startswith("eos")
        if (exact and counted != records) or counted < records:
            raise SystemExit(f"{name}: output accounts for {counted} records of {records}")
        assert output.first_ms is not None and output.last_ms is not None
        span = (output.last_ms - output.first_ms) / 1000
        row = {"config": config, "round": round_, "records_per_s": records / span, "span_s": span,
               "wall_s": output.last_arrival - applied, "output_records": output.count, "counted": counted,
               "driver": samples, "executor_pods": usage.executors}
        cpu = [s[1] for s in samples] or [float("nan")]
        mem = [s[2] for s in samples] or [float("nan")]
        verdict = "exact" if counted == records else "more"
        print(f"round {round_} {config:7s} {counted:,} of {records:,} ({verdict}; {output.count:,} output "
              f"records)  first->last output {span:6.1f} s = {row['records_per_s']:8,.0f} records/s; "
              f"apply->all output {row['wall_s']:6.1f} s  driver cpu first/peak/last "
              f"{cpu[0]:.2f}/{max(cpu):.2f}/{cpu[-1]:.2f} cores, memory "
              f"{mem[0]:.0f}/{max(mem):.0f}/{mem[-1]:.0f} MiB ({len(samples)} samples); "
              f"{usage.executors} executor pods", flush=True)
        return row

    def latency(self, config: str) -> list[float]:
        """Seconds from each record's send to a read_committed consumer, at ``--rate``."""
        from confluent_kafka import Consumer, Producer

        name = f"lat-{config}"
        src, out = f"bench-tp-{uuid.uuid4().hex[:6]}-{name}-in", f"bench-tp-{uuid.uuid4().hex[:6]}-{name}-out"
        tp.create_topic(self.p, src)
        tp.create_topic(self.p, out)
        ns, find = self.start(config, name, src, out, self.args.trigger)
        sent: dict[int, float] = {}
        got: dict[int, float] = {}
        stop = threading.Event()

        def read() -> None:
            c = Consumer({"bootstrap.servers": self.p.bootstrap, "group.id": uuid.uuid4().hex,
                          "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                          "fetch.wait.max.ms": 10})
            c.subscribe([out])
            try:
                while not stop.is_set():
                    for m in c.consume(5000, 0.05):
                        if m.error() is None:
                            got.setdefault(int(json.loads(m.value() or b"{}")["id"]), time.time())
            finally:
                c.close()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            eventually(lambda: (pod := find()) is not None and ready(pod), what=f"{name}'s driver",
                       timeout=600, interval=2)
            producer = Producer({"bootstrap.servers": self.p.bootstrap, "linger.ms": 5})
            warmup, measured = self.args.latency_warmup, self.args.latency_seconds
            began, i = time.time(), 0
            while (now := time.time()) < began + warmup + measured:
                due = int((now - began) * self.args.rate)
                while i < due:
                    producer.produce(src, value=tp.record(i), partition=i % 4)
                    sent[i] = time.time()
                    i += 1
                producer.poll(0)
                time.sleep(0.005)
            producer.flush(30)
            eventually(lambda: len(got) >= i, what=f"{name}'s output", timeout=120, interval=1)
        finally:
            stop.set()
            reader.join(5)
            self.stop(config, ns, name)
        first = next(k for k, t in sent.items() if t >= began + warmup)
        return [got[k] - sent[k] for k in range(first, i)]

    def close(self) -> None:
        for ns in [*self.namespaces.values(), self.hand_ns]:
            self.p.kubectl("delete", "namespace", ns, "--wait=false")


def p50_p95(values: list[float]) -> str:
    return f"{statistics.median(values):8,.0f} / {percentile(values, 0.95):8,.0f}"


def summary(rows: list[dict[str, Any]], configs: list[str]) -> dict[str, list[float]]:
    rates = {c: [r["records_per_s"] for r in rows if r["config"] == c] for c in configs}
    print(f"\n{'config':8s} {'n':>2s}  records/s p50 / p95 (first->last output)   wall s p50 / p95   "
          "driver cpu peak (cores), memory first/peak/last (MiB), first run")
    for c in configs:
        walls = [r["wall_s"] for r in rows if r["config"] == c]
        samples = next(r["driver"] for r in rows if r["config"] == c)
        cpu = max((s[1] for s in samples), default=float("nan"))
        mem = [s[2] for s in samples] or [float("nan")]
        print(f"{c:8s} {len(rates[c]):2d}  {p50_p95(rates[c])}                      "
              f"{statistics.median(walls):6.1f} / {percentile(walls, 0.95):6.1f}     "
              f"{cpu:.2f}, {mem[0]:.0f}/{max(mem):.0f}/{mem[-1]:.0f}")
    for kind, target in (("eos", 0.8), ("alo", 0.95)):
        for ex in sorted({c.rsplit("-", 1)[1] for c in configs}):
            a, b = rates.get(f"{kind}-{ex}"), rates.get(f"hand-{ex}")
            if a and b:
                ratio = statistics.median(a) / statistics.median(b)
                wall = {c: statistics.median([r["wall_s"] for r in rows if r["config"] == c])
                        for c in (f"{kind}-{ex}", f"hand-{ex}")}
                print(f"{kind}-{ex} / hand-{ex}: records/s {ratio:.2f} (target >= {target}), wall "
                      f"{wall[f'hand-{ex}'] / wall[f'{kind}-{ex}']:.2f} (hand s / sluice s)")
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every configuration, ABC CBA ...")
    parser.add_argument("--query", choices=sorted(tp.QUERIES), default="select")
    parser.add_argument("--executors", default="0,2", help="executor counts, each a namespace")
    parser.add_argument("--kinds", default="eos,alo,hand")
    parser.add_argument("--max-offsets", type=int, default=250_000, help="maxOffsetsPerTrigger of every run")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take")
    parser.add_argument("--rate", type=float, default=2000, help="records/s of the latency runs")
    parser.add_argument("--latency-seconds", type=float, default=60)
    parser.add_argument("--latency-warmup", type=float, default=20)
    parser.add_argument("--latency-configs", default="eos-0,eos-2", help="empty: no latency runs")
    parser.add_argument("--trigger", default="", help="processingTime of the latency runs; empty: none")
    parser.add_argument("--image", default="", help="the runtime image; empty: the operator's default")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "img" / "throughput.png")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--state-dir", type=Path, default=REPO / ".platform")
    args = parser.parse_args()
    executors = [e for e in args.executors.split(",") if e]
    configs = [f"{k}-{e}" for e in executors for k in args.kinds.split(",") if k]
    lat_configs = [c for c in args.latency_configs.split(",") if c and c.rsplit("-", 1)[1] in executors]
    print(f"load average {os.getloadavg()}; configs {configs}", flush=True)
    p = Platform(args.state_dir)
    bench = Bench(p, args)
    try:
        src = f"bench-tp-{uuid.uuid4().hex[:6]}-in"
        seconds = tp.fill(p, src, args.records)
        print(f"{args.records:,} records into {src} (4 partitions) in {seconds:.1f} s", flush=True)
        rows: list[dict[str, Any]] = []
        for round_ in range(1, args.rounds + 1):
            for config in configs if round_ % 2 else configs[::-1]:
                rows.append(bench.catch_up(config, src, round_))
        rates = summary(rows, configs)
        latencies: dict[str, list[float]] = {}
        for config in lat_configs:
            latencies[config] = bench.latency(config)
            values = latencies[config]
            print(f"latency {config} at {args.rate:.0f} records/s, trigger {args.trigger or 'none'}: "
                  f"{len(values)} records, p50 {statistics.median(values):.3f} s, p99 "
                  f"{percentile(values, 0.99):.3f} s, max {max(values):.3f} s", flush=True)
        print(f"load average {os.getloadavg()}")
        memory = {c: next(r["driver"] for r in rows if r["config"] == c) for c in configs}
        title = f"{args.records:,} records, --query {args.query}, {time.strftime('%Y-%m-%d')}"
        if tp.plot(args.plot, rates, memory, title):
            print(f"plot: {args.plot}")
        else:
            print("no plot: matplotlib is not installed")
        if args.json:
            args.json.write_text(json.dumps({"rows": rows, "latency": latencies}, indent=1))
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
