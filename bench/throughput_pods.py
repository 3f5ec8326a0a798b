"""Helpers of ``bench/bench_throughput.py``: the pre-filled topic, the output watcher, the driver
pod's CPU and memory from the kubelet's summary API, the hand-written PySpark job as a pod, the plot.
"""

from __future__ import annotations

import calendar
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench_failover import Platform
from bench_runtime import send

#: the JSON columns of the records (about 100 bytes each); ``ts`` spreads them over minutes
SCHEMA = [{"name": "id", "type": "bigint"}, {"name": "k", "type": "string"}, {"name": "v", "type": "int"},
          {"name": "note", "type": "string"}, {"name": "ts", "type": "timestamp"}]
DDL = "id BIGINT, k STRING, v INT, note STRING, ts TIMESTAMP"
#: query -> (SQL over the source ``src``, output mode); the hand-written job's equivalent is HAND_JOB's
QUERIES = {
    "select": ("SELECT id, k, v FROM src WHERE v >= 0", "append"),
    "window": ("SELECT window(ts, '1 minute').start AS minute, count(*) AS n FROM src "
               "GROUP BY window(ts, '1 minute')", "update"),
}
BASE_TS = 1_767_261_600  # 2026-01-01T10:00:00Z


def record(i: int) -> bytes:
    ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(BASE_TS + i // 1000))
    return (f'{{"id":{i},"k":"k{i % 100}","v":{i % 97},"note":"{"x" * 20}","ts":"{ts}"}}').encode()


def create_topic(p: Platform, topic: str, partitions: int = 4) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def fill(p: Platform, topic: str, n: int) -> float:
    """``n`` records into a new 4-partition ``topic``, as fast as the producer goes; seconds taken."""
    from confluent_kafka import Producer

    create_topic(p, topic)
    producer = Producer({"bootstrap.servers": p.bootstrap, "linger.ms": 100, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    began = time.monotonic()
    for i in range(n):
        send(producer, topic, record(i), i, partition=i % 4)
    assert producer.flush(300) == 0
    return time.monotonic() - began


class Output:
    """Reads an output topic with read_committed from the start (its partitions assigned) while a
    run goes on: the count, the first and last record timestamps (ms) and when the last arrived.
    ``window``: the latest count per minute (update mode), whose sum is the input counted."""

    def __init__(self, bootstrap: str, topic: str, window: bool) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.window = window
        self.count = 0
        self.first_ms: int | None = None
        self.last_ms: int | None = None
        self.last_arrival = 0.0
        self.minutes: dict[str, int] = {}
        self._stop = threading.Event()
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
        parts = self._c.list_topics(topic, timeout=10).topics[topic].partitions
        self._c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in parts])
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            batch = [m for m in self._c.consume(20000, 0.2) if m.error() is None]
            if not batch:
                continue
            stamps = [m.timestamp()[1] for m in batch]
            self.first_ms = min(stamps) if self.first_ms is None else min(self.first_ms, *stamps)
            self.last_ms = max(stamps) if self.last_ms is None else max(self.last_ms, *stamps)
            if self.window:
                for m in batch:
                    row = json.loads(m.value() or b"{}")
                    self.minutes[str(row.get("minute"))] = int(row.get("n", 0))
            self.last_arrival = time.time()
            self.count += len(batch)

    def counted(self) -> int:
        """Input records the output accounts for (window: the sum of each minute's latest count)."""
        return sum(self.minutes.values()) if self.window else self.count

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._c.close()


class DriverUsage:
    """A pod's CPU (cores, from the cumulative usage between samples) and memory (working set,
    MiB) every ``interval`` seconds, from the kubelet's summary API through the API server."""

    def __init__(self, p: Platform, ns: str, find: Any, executor_prefix: str, interval: float = 2.0) -> None:
        self.p, self.ns, self.find, self.interval = p, ns, find, interval
        self.samples: list[tuple[float, float, float]] = []  # (time, cores, MiB)
        #: the most executor pods (``<executor_prefix>-exec-<n>``) seen running at once
        self.executors = 0
        self.executor_prefix = f"{executor_prefix}-exec-"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        prev: tuple[int, int] | None = None
        pod_name: str | None = None
        node: str | None = None
        while not self._stop.wait(self.interval):
            if pod_name is None or node is None:
                pod = self.find()
                pod_name = pod["metadata"]["name"] if pod else None
                node = pod["spec"].get("nodeName") if pod else None
                if pod_name is None or node is None:
                    continue
            try:
                summary = json.loads(self.p.kubectl("get", "--raw",
                                                    f"/api/v1/nodes/{node}/proxy/stats/summary"))
            except RuntimeError:
                continue
            running = [e for e in summary.get("pods", []) if e.get("podRef", {}).get("namespace") == self.ns
                       and str(e["podRef"].get("name", "")).startswith(self.executor_prefix)]
            self.executors = max(self.executors, len(running))
            for entry in summary.get("pods", []):
                ref = entry.get("podRef", {})
                if ref.get("name") != pod_name or ref.get("namespace") != self.ns:
                    continue
                cpu, mem = entry.get("cpu") or {}, entry.get("memory") or {}
                used = cpu.get("usageCoreNanoSeconds")
                if used is None or mem.get("workingSetBytes") is None or not cpu.get("time"):
                    break
                # the kubelet's own sample time: it refreshes its stats every few seconds
                at = calendar.timegm(time.strptime(cpu["time"][:19], "%Y-%m-%dT%H:%M:%S"))
                if prev is not None and at > prev[0]:
                    self.samples.append((at, (int(used) - prev[1]) / 1e9 / (at - prev[0]),
                                         int(mem["workingSetBytes"]) / 2**20))
                if prev is None or at > prev[0]:
                    prev = (at, int(used))

    def stop(self) -> list[tuple[float, float, float]]:
        self._stop.set()
        self._thread.join(30)
        return self.samples


HAND_JOB = """\
import json, os
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

conf = json.loads(os.environ["BENCH_CONF"].replace("$POD_IP", os.environ.get("POD_IP", "")))
master = os.environ["BENCH_MASTER"]
if master == "k8s":
    master = f"k8s://https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
builder = SparkSession.builder.master(master).appName("hand")
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
args = json.loads(os.environ["BENCH_ARGS"])
raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args["bootstrap"])
       .option("subscribe", args["src"]).option("startingOffsets", "earliest")
       .option("maxOffsetsPerTrigger", str(args["maxOffsets"])).option("failOnDataLoss", "false").load())
src = raw.selectExpr(f"from_json(cast(value as string), '{args['ddl']}') AS r").select("r.*")
if args["query"] == "window":
    out = (src.withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute")).count()
           .selectExpr("to_json(named_struct('minute', window.start, 'n', count)) AS value"))
    mode = "update"
else:
    out = src.where("v >= 0").selectExpr("to_json(named_struct('id', id, 'k', k, 'v', v)) AS value")
    mode = "append"
writer = (out.writeStream.format("kafka").option("kafka.bootstrap.servers", args["bootstrap"])
          .option("topic", args["out"]).option("checkpointLocation", "/tmp/checkpoint").outputMode(mode))
if args["trigger"]:
    writer = writer.trigger(processingTime=args["trigger"])
writer.start().awaitTermination()
"""


def hand_namespace(p: Platform) -> str:
    """A namespace for the hand-written job (no Pod Security enforcement: Spark's plain executor
    pods), the job's script in a ConfigMap and a ServiceAccount that may run executor pods."""
    from sluice_dev.platform import chart

    ns = f"bench-hand-{uuid.uuid4().hex[:6]}"
    p.kubectl("apply", "-f", "-", stdin=json.dumps(chart.namespace_manifest(ns, labels={})))
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hand-job", "namespace": ns},
         "data": {"job.py": HAND_JOB}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "hand", "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "hand", "namespace": ns},
         "rules": [{"apiGroups": [""],
                    "resources": ["pods", "configmaps", "services", "persistentvolumeclaims"],
                    "verbs": ["create", "get", "list", "watch", "patch", "delete", "deletecollection"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "hand", "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hand"},
         "subjects": [{"kind": "ServiceAccount", "name": "hand", "namespace": ns}]}]
    p.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    return ns


def hand_pod(ns: str, name: str, image: str, executors: int, job: dict[str, Any], python: str,
             driver_memory: str, heap: str) -> dict[str, Any]:
    """The hand-written job's driver pod: the runtime image's Python and PySpark, ``local[*]`` or
    client mode with ``executors`` executor pods (the Spark settings the operator gives a driver)."""
    conf: dict[str, str] = {"spark.driver.memory": heap, "spark.local.dir": "/tmp",
                            "spark.sql.shuffle.partitions": "4"}
    master = "local[*]"
    if executors:
        master = "k8s"
        conf.update({
            "spark.executor.instances": str(executors), "spark.kubernetes.namespace": ns,
            "spark.kubernetes.container.image": image,
            "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
            "spark.kubernetes.driver.pod.name": name, "spark.kubernetes.executor.podNamePrefix": name,
            "spark.driver.host": "$POD_IP", "spark.driver.bindAddress": "$POD_IP",
            "spark.driver.port": "7078", "spark.driver.blockManager.port": "7079",
            "spark.kubernetes.executor.request.cores": "100m", "spark.executor.memory": "512m",
            "spark.executor.memoryOverhead": "448m", "spark.executor.cores": "1",
            "spark.kubernetes.authenticate.driver.serviceAccountName": "hand"})
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "HOME", "value": "/tmp"},
           {"name": "BENCH_MASTER", "value": master}, {"name": "BENCH_CONF", "value": json.dumps(conf)},
           {"name": "BENCH_ARGS", "value": json.dumps(job)}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": "hand", "run": name}},
            "spec": {"restartPolicy": "Never", "serviceAccountName": "hand",
                     "containers": [{"name": "job", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": [python, "/etc/hand/job.py"], "env": env,
                                     "resources": {"requests": {"cpu": "100m", "memory": driver_memory},
                                                   "limits": {"memory": driver_memory}},
                                     "volumeMounts": [{"name": "job", "mountPath": "/etc/hand"},
                                                      {"name": "tmp", "mountPath": "/tmp"}]}],
                     "volumes": [{"name": "job", "configMap": {"name": "hand-job"}},
                                 {"name": "tmp", "emptyDir": {}}]}}


def plot(path: Path, rates: dict[str, list[float]], memory: dict[str, list[tuple[float, float, float]]],
         title: str) -> bool:
    """Bars of records/s per configuration (p50, the runs as dots) and the driver's memory over
    each configuration's first run; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (bars, mem) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = list(rates)
    medians = [sorted(v)[len(v) // 2] if v else 0.0 for v in rates.values()]
    bars.bar(labels, medians, color="tab:blue")
    for x, values in enumerate(rates.values()):
        bars.plot([x] * len(values), values, "k.")
    bars.set_ylabel("records/s (first to last output record)")
    bars.set_title("catch-up throughput")
    bars.tick_params(axis="x", labelrotation=30)
    for label, samples in memory.items():
        if samples:
            t0 = samples[0][0]
            mem.plot([s[0] - t0 for s in samples], [s[2] for s in samples], label=label)
    mem.set_xlabel("seconds since the driver pod's first sample")
    mem.set_ylabel("driver working set (MiB)")
    mem.set_title("driver memory during the run")
    if any(memory.values()):
        mem.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
