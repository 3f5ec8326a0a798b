"""Output gap of driver fail-overs and restarts, through driver pods on the local platform.

Steady input (``--rate`` records/s) into an exactly-once query; a read_committed consumer records
when each output record becomes visible. The *output gap* of an event is the longest silence of
the output from the event until output has flowed again for a while, and the runtime's own
``gapSeconds`` (last commit of the old driver to the first commit of the new one, from the Lease)
is printed next to it. Four kinds of event, interleaved (ABCD ABCD ...), ``--events`` each:

* ``kill-standby``: kill -9 of the active driver, ``standbyReplicas: 1`` (a warm standby takes over);
* ``kill-cold``: kill -9 of the active driver, ``standbyReplicas: 0`` (the container restarts cold);
* ``roll-handoff``: a ``restartNonce`` edit (a warm replacement driver starts first, then hand-off);
* ``restart-cold``: SIGTERM of the driver's process, ``standbyReplicas: 0`` (it drains, exits and
  its container starts cold on the same checkpoint: what a StatefulSet roll did before standbys).

One more on the real node, only when asked for with ``--kinds``:

* ``kill-cold-noarchive``: ``kill-cold`` with drivers that map the JDK's own class-data archive
  instead of the image's (``spark.driver.extraJavaOptions: -XX:SharedArchiveFile=`` the JDK's
  ``classes.jsa``, after the image's ``SPARK_SUBMIT_OPTS``): the baseline of the image's archive
  (``sluice_runtime.classdata``) in a cold restart.

Two more with executors (``executors: 2`` per active driver, a ``ReadWriteMany`` state claim, a
standby), only when asked for with ``--kinds``:

* ``kill-executors-release``: kill -9 of the active driver, ``standbyExecutors: release`` (the
  default: the standby holds no executor pods and asks for them when it takes over);
* ``kill-executors-hold``: the same with ``standbyExecutors: hold`` (the standby runs executors of
  its own and warmed up through them).

Two more, on two nodes with checkpoints in the object store (``bench/failover_nodes.py``), only
when asked for with ``--kinds`` (the platform then runs two nodes):

* ``node-standby``: the active driver's node powered off, a standby on the other node;
* ``node-cold``: the same without a standby (the driver rescheduled on the other node).

    python bench/bench_failover.py [--events 5] [--rate 20] [--kinds node-standby,node-cold]
    python bench/bench_failover.py --kinds kill-cold,kill-cold-noarchive
    python bench/bench_failover.py --kinds kill-executors-release,kill-executors-hold

Needs nothing running: it starts the platform and the operator like ``make demo`` (and leaves
them running). Prints one line per event and p50/p95 per kind with the ratios.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the shared helpers live in tests.support
    sys.path.insert(0, str(REPO))

from sluice_dev.platform import chart  # noqa: E402

from tests.support.feed import Feed, lost_and_duplicated  # noqa: E402
from tests.support.realnode import signal_container  # noqa: E402
from tests.support.waiting import eventually  # noqa: E402

KINDS = ("kill-standby", "kill-cold", "roll-handoff", "restart-cold")
#: the node-loss events (bench/failover_nodes.py), on two nodes
NODE_KINDS = ("node-standby", "node-cold")
#: a cold restart without the image's class-data archive (the JDK's own instead)
NOARCHIVE = "kill-cold-noarchive"
#: fail-overs of queries with executors, by what their standby does with executor pods
EXECUTOR_KINDS = {"kill-executors-release": "release", "kill-executors-hold": "hold"}
JDK_ARCHIVE_OPTION = "-XX:SharedArchiveFile=/usr/lib/jvm/java-17-openjdk-amd64/lib/server/classes.jsa"


class Platform:
    def __init__(self, state_dir: Path, nodes: int = 1) -> None:
        from sluice_dev.platform import orchestrate

        state = orchestrate.up(state_dir, log=lambda m: None, nodes=nodes)
        running = orchestrate.status(state_dir, log=lambda _m: None)
        if not running or not orchestrate.operator_ready(state_dir):
            state = orchestrate.deploy(state_dir, log=lambda m: None)
        self.state_dir = state_dir
        #: each real node's runc state root (drivers are signalled from the host through it)
        info = state["node"]["info"]
        prefixes = ["", *(f"node_{index}_" for index in range(2, nodes + 1))]
        self.runc_roots = {info[f"{p}node"]: str(Path(info[f"{p}runc_root"]) / "k8s.io") for p in prefixes}
        self.kubeconfig = state["kube"]["env"]["KUBECONFIG"]
        self.kubectl_bin = str(Path(state["kube"]["info"]["bin_dir"]) / "kubectl")
        self.bootstrap = state["kafka"]["env"]["SLUICE_KAFKA_BOOTSTRAP"]

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run([self.kubectl_bin, *args], input=stdin, capture_output=True, text=True,
                                env={**os.environ, "KUBECONFIG": self.kubeconfig}, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def namespace(self, prefix: str, memory: str = "512Mi", heap: str = "768m",
                  java_options: str = "", cluster: dict[str, Any] | None = None) -> str:
        """A new namespace with a default QueryCluster on the platform's broker (small drivers;
        ``java_options``: the drivers' ``spark.driver.extraJavaOptions``, none by default)."""
        ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
        spark_conf = {"spark.driver.memory": heap}
        if java_options:
            spark_conf["spark.driver.extraJavaOptions"] = java_options
        self.kubectl("apply", "-f", "-", stdin=json.dumps(chart.namespace_manifest(ns)))
        self.apply_when_admitted({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
            "metadata": {"name": "default", "namespace": ns},
            "spec": {"serviceId": "bench", "kafka": {"bootstrapServers": self.bootstrap},
                     "driver": {"requests": {"cpu": "100m", "memory": memory}},
                     "sparkConf": spark_conf, **(cluster or {})}})
        return ns

    def apply_when_admitted(self, doc: dict[str, Any], timeout: float = 120) -> None:
        """``kubectl apply`` of ``doc``, again while the operator's admission webhook cannot be
        reached yet (a Deployment that just became available may have no Service endpoint yet)."""
        def applied() -> bool:
            try:
                self.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
            except RuntimeError as exc:
                if "failed calling webhook" not in str(exc):
                    raise
                return False
            return True

        eventually(applied, what="the admission webhook answering", timeout=timeout, interval=2)

    def signal(self, pod: dict[str, Any], sig: int) -> None:
        """``sig`` to a driver pod's runtime (SIGKILL, SIGTERM) from the host."""
        root = self.runc_roots[pod["spec"]["nodeName"]]
        signal_container(root, pod["status"]["containerStatuses"][0]["containerID"], sig)

    def pods(self, ns: str, query: str) -> list[dict[str, Any]]:
        selector = f"sluice.dev/query={query},app.kubernetes.io/component=driver"
        out = self.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json")
        return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]

    def active(self, ns: str, query: str) -> dict[str, Any] | None:
        """The pod holding the query's driver Lease."""
        try:
            lease = json.loads(self.kubectl("get", "lease", f"{query}-driver", "-n", ns, "-o", "json"))
        except RuntimeError:
            return None  # not created yet
        holder = str(lease["spec"].get("holderIdentity") or "").split("/", 1)[0]
        return next((p for p in self.pods(ns, query) if p["metadata"]["name"] == holder), None)

    def lease_gap(self, ns: str, query: str) -> dict[str, Any]:
        lease = json.loads(self.kubectl("get", "lease", f"{query}-driver", "-n", ns, "-o", "json"))
        text = lease["metadata"].get("annotations", {}).get("sluice.dev/last-takeover")
        return dict(json.loads(text or "{}"))


def ready(pod: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True"


class Watcher:
    """Feeds a source topic (tests.support.feed) and records when output records become visible
    (read_committed)."""

    def __init__(self, bootstrap: str, src: str, out: str, rate: float) -> None:
        from confluent_kafka import Consumer

        self.feed = Feed(bootstrap, src, rate)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        self.consumer.subscribe([out])
        self.arrivals: list[float] = []
        self.ids: list[int] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._consume, daemon=True).start()

    def _consume(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            now = time.monotonic()
            row = json.loads(msg.value())
            with self._lock:
                self.arrivals.append(now)
                self.ids.append(int(row["id"]))

    def flowing(self, within: float = 2.0, steady: float = 10.0) -> bool:
        """Whether output has arrived steadily: no silence longer than ``within`` in the last
        ``steady`` seconds (before an event: a cold start's first batches are not the event's)."""
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self.arrivals if t >= now - steady]
        points = [now - steady, *recent, now]
        return bool(recent) and max(b - a for a, b in itertools.pairwise(points)) <= within

    def gap_between(self, t0: float, t1: float) -> float:
        """Longest output silence between ``t0`` (the event) and ``t1`` (call it once the takeover
        is recorded and output has flowed again for a while)."""
        return self.longest_silence(t0, t1)[0]

    def longest_silence(self, t0: float, t1: float) -> tuple[float, float]:
        """:meth:`gap_between`, and when that silence began (seconds after ``t0``)."""
        with self._lock:
            times = [t for t in self.arrivals if t0 - 5 <= t <= t1]
        before = max((t for t in times if t <= t0), default=t0)
        points = [before, *(t for t in times if t > t0)]
        gaps = [(b - a, a - t0) for a, b in itertools.pairwise(points)]
        return max(gaps, default=(t1 - t0, 0.0))

    def stop(self) -> tuple[int, int, int]:
        sent = self.feed.stop()
        time.sleep(10)
        self._stop.set()
        with self._lock:
            lost, dup = lost_and_duplicated(self.ids, sent)
        self.consumer.close()
        return sent, len(lost), len(dup)


def query_doc(ns: str, name: str, src: str, out: str, standbys: int) -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"sources": [{"name": "events", "topic": src, "schema": [
                {"name": "id", "type": "int"}, {"name": "k", "type": "string"}]}],
                "sql": "SELECT id, k FROM events",
                "sink": {"topic": out, "outputMode": "append", "delivery": "exactlyOnce"},
                "trigger": {"processingTime": "1 second"}, "standbyReplicas": standbys}}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure_event(p: Platform, watcher: Watcher, ns: str, name: str, before: str | None,
                  t0: float, interval: float = 0.5) -> tuple[float, dict[str, Any]]:
    """Wait for the new driver's takeover record (its first commit) after the event at ``t0``
    (polled every ``interval`` seconds), let output flow again, and return the output gap and the
    takeover record."""
    def recorded() -> dict[str, Any] | None:
        g = p.lease_gap(ns, name)
        return g if g.get("time") != before and g.get("gapSeconds") is not None else None

    runtime_gap = eventually(recorded, what="the takeover gap", timeout=300, interval=interval)
    taken = time.monotonic() - t0
    time.sleep(8)  # output flowing again
    gap, at = watcher.longest_silence(t0, time.monotonic())
    return gap, {**runtime_gap, "silenceAt": round(at, 1), "recordedAt": round(taken, 1)}


def print_summary(results: dict[str, list[tuple[float, float | None]]], width: int) -> dict[str, float]:
    """p50/p95 of the output gap and of the runtime's gap per kind of event; the p50s by kind."""
    print(f"\n{'event':{width}s} {'n':>3s} {'p50':>7s} {'p95':>7s}   runtime gap p50 / p95")
    summary: dict[str, float] = {}
    for kind, rows in results.items():
        gaps = [g for g, _ in rows]
        rts = [r for _, r in rows if r is not None]
        summary[kind] = statistics.median(gaps)
        rt50 = statistics.median(rts) if rts else float("nan")
        rt95 = percentile(rts, 0.95) if rts else float("nan")
        print(f"{kind:{width}s} {len(gaps):3d} {summary[kind]:6.2f}s {percentile(gaps, 0.95):6.2f}s   "
              f"{rt50:.2f}s / {rt95:.2f}s")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--state-dir", type=Path, default=REPO / ".platform")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--node-lease", type=int, default=5,
                        help="lease.durationSeconds of the node-loss queries (3 to 300)")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS) - set(NODE_KINDS) - {NOARCHIVE} - set(EXECUTOR_KINDS)
    if unknown:
        parser.error(f"unknown --kinds {sorted(unknown)}: "
                     f"{', '.join((*KINDS, NOARCHIVE, *EXECUTOR_KINDS, *NODE_KINDS))}")
    on_nodes = any(k in NODE_KINDS for k in kinds)
    p = Platform(args.state_dir, nodes=2 if on_nodes else 1)
    from confluent_kafka.admin import AdminClient, NewTopic

    # kind -> (namespace, query, standbys)
    where: dict[str, tuple[str, str, int]] = {}
    if set(kinds) & set(KINDS):
        ns = p.namespace("bench-failover")
        where.update({k: (ns, "warm", 1) if k == "kill-standby" else (ns, "cold", 0) for k in KINDS})
    if NOARCHIVE in kinds:
        where[NOARCHIVE] = (p.namespace("bench-failover-jdk", java_options=JDK_ARCHIVE_OPTION), "cold", 0)
    for kind, mode in EXECUTOR_KINDS.items():
        if kind in kinds:
            where[kind] = (p.namespace(f"bench-failover-{mode}", cluster={
                "executors": 2, "standbyExecutors": mode, "storage": {"accessMode": "ReadWriteMany"},
                "executor": {"requests": {"cpu": "100m", "memory": "512Mi"}}}), "warm", 1)
    if on_nodes:
        import failover_nodes

        ns_nodes = failover_nodes.namespace(p, args.node_lease)
        where.update({k: (ns_nodes, *failover_nodes.QUERIES[k]) for k in NODE_KINDS})
    queries = {(ns, name): standbys for k, (ns, name, standbys) in where.items() if k in kinds}
    watchers: dict[tuple[str, str], Watcher] = {}
    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    for (ns, name), standbys in queries.items():
        src, out = f"{ns}-{name}-in", f"{ns}-{name}-out"
        for f in admin.create_topics(
                [NewTopic(t, num_partitions=2, replication_factor=1) for t in (src, out)]).values():
            f.result(30)
        p.kubectl("apply", "-f", "-", stdin=json.dumps(query_doc(ns, name, src, out, standbys)))
        watchers[(ns, name)] = Watcher(p.bootstrap, src, out, args.rate)

    def settled(ns: str, name: str, standbys: int) -> bool:
        pods = p.pods(ns, name)
        return (p.active(ns, name) is not None and len(pods) == 1 + standbys and all(ready(x) for x in pods))

    results: dict[str, list[tuple[float, float | None]]] = {k: [] for k in kinds}
    for round_ in range(args.events):
        for kind in kinds:
            ns, name, standbys = where[kind]
            if kind in NODE_KINDS:
                failover_nodes.active_on_node_2(p, ns, name, standbys)
            watcher = watchers[(ns, name)]
            eventually(functools.partial(settled, ns, name, standbys), what=f"{name} settled", timeout=600,
                       interval=0.5)
            eventually(watcher.flowing, what=f"{name}'s output flowing", timeout=600, interval=0.5)
            time.sleep(5)
            before = p.lease_gap(ns, name).get("time")
            pod = p.active(ns, name)
            assert pod is not None
            t0 = time.monotonic()
            if kind in NODE_KINDS:
                failover_nodes.power_off_node_2(p)
            elif kind.startswith("kill"):
                p.signal(pod, signal.SIGKILL)
            elif kind == "restart-cold":
                p.signal(pod, signal.SIGTERM)
            else:
                p.kubectl("patch", "sq", name, "-n", ns, "--type=merge", "-p",
                          json.dumps({"spec": {"restartNonce": f"r{round_}"}}))
            # the event ends when the new driver recorded its first commit (a roll first waits for
            # the replacement to warm up, while the old driver keeps serving)
            try:
                gap, runtime_gap = measure_event(p, watcher, ns, name, before, t0)
            except AssertionError:
                print(p.kubectl("get", "nodes,pods,leases", "-n", ns, "-o", "wide"), flush=True)
                raise
            finally:
                if kind in NODE_KINDS:
                    failover_nodes.power_on_node_2(p)
            results[kind].append((gap, runtime_gap.get("gapSeconds")))
            print(f"round {round_ + 1} {kind:19s} output gap {gap:6.2f}s  runtime gap "
                  f"{runtime_gap.get('gapSeconds')}s ({runtime_gap.get('reason')})", flush=True)
    for (_, name), w in watchers.items():
        sent, lost, dup = w.stop()
        print(f"query {name}: {sent} records sent, {lost} lost, {dup} duplicated (read_committed)")
    summary = print_summary(results, 19)
    if "kill-standby" in summary and "kill-cold" in summary:
        ratio = summary["kill-standby"] / summary["kill-cold"]
        print(f"fail-over with a standby vs a cold restart: {ratio:.2f}")
    if "kill-cold" in summary and NOARCHIVE in summary:
        ratio = summary["kill-cold"] / summary[NOARCHIVE]
        print(f"cold restart with the image's archive vs without: {ratio:.2f}")
    if "roll-handoff" in summary and "restart-cold" in summary:
        ratio = summary["roll-handoff"] / summary["restart-cold"]
        print(f"restart by hand-off vs a cold restart:      {ratio:.2f}")
    if "kill-executors-release" in summary and "kill-executors-hold" in summary:
        ratio = summary["kill-executors-release"] / summary["kill-executors-hold"]
        print(f"with executors, a standby without vs with:  {ratio:.2f}")
    if "node-standby" in summary and "node-cold" in summary:
        ratio = summary["node-standby"] / summary["node-cold"]
        print(f"node loss with a standby vs without one:    {ratio:.2f}")
    for ns in {ns for ns, _ in queries}:
        p.kubectl("delete", "namespace", ns, "--wait=false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
