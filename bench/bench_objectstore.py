"""Checkpoints in an object store against a state volume, through driver pods on the local platform.

Two identical exactly-once queries with a warm standby, fed at ``--rate`` records/s each, one with
its checkpoint on the state claim (``volume``), one in the platform's object store through s3a
(``s3``, the QueryCluster's ``storage.objectStore``):

* **batch duration**: every micro-batch's duration as the active driver reports it
  (``sluice_batch_duration_seconds`` with ``sluice_last_committed_batch_id``, read through the API
  server's pod proxy every 0.5 s, one sample per batch id), over ``--steady`` seconds, both
  queries in the same period;
* **output gap** of a kill -9 of the active driver (the standby takes over) and of a hand-off (a
  ``restartNonce`` edit), interleaved (volume, s3, volume, s3 ...), ``--events`` rounds: the
  longest silence of the read_committed output, with the runtime's own ``gapSeconds``.

    python bench/bench_objectstore.py [--events 3] [--steady 120] [--rate 20]

Prints p50/p95 per storage and the ratios s3 / volume; nothing lost or duplicated at the end.
Needs nothing running: it starts the platform and the operator like ``make demo``.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_failover import Platform, Watcher, measure_event, percentile, query_doc, ready  # noqa: E402

from tests.support.waiting import eventually  # noqa: E402

STORAGES = ("volume", "s3")
KINDS = ("kill-standby", "roll-handoff")


def object_store(p: Platform, ns: str, state_dir: Path) -> None:
    """The object store of ``.platform`` for the QueryCluster of ``ns`` (its keys in a Secret)."""
    state = json.loads((state_dir / "state.json").read_text())
    env = state["objectstore"]["env"]
    p.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": ns},
        "stringData": {"accessKey": env["SLUICE_S3_ACCESS_KEY"], "secretKey": env["SLUICE_S3_SECRET_KEY"]}}))
    p.kubectl("patch", "querycluster", "default", "-n", ns, "--type=merge", "-p", json.dumps({"spec": {
        "storage": {"objectStore": {"uri": f"s3a://{env['SLUICE_S3_BUCKET']}/bench-{ns}",
                                    "endpoint": env["SLUICE_S3_ENDPOINT"], "pathStyleAccess": True,
                                    "credentialsSecret": "s3"}}}}))


class Batches:
    """Per-batch durations of a query's active driver, sampled from its metrics."""

    def __init__(self, p: Platform, ns: str, name: str) -> None:
        self.p, self.ns, self.name = p, ns, name
        self.durations: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(30)
        return list(self.durations.values())

    def _sample(self) -> None:
        """Every 0.5 s from the active driver's own endpoint (the host reaches pod IPs on the real
        node); which pod is active is looked up again every 5 s."""
        pod: dict[str, Any] | None = None
        looked = 0.0
        while not self._stop.wait(0.5):
            if pod is None or time.monotonic() - looked > 5:
                pod, looked = self.p.active(self.ns, self.name), time.monotonic()
            if pod is None or not (pod.get("status") or {}).get("podIP"):
                continue
            try:
                with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8080/metrics", timeout=3) as r:
                    text = r.read().decode()
            except OSError:
                continue
            values = {}
            for line in text.splitlines():
                for metric in ("sluice_batch_duration_seconds", "sluice_last_committed_batch_id"):
                    if line.startswith(metric + "{") or line.startswith(metric + " "):
                        values[metric] = float(line.rsplit(" ", 1)[1])
            if len(values) == 2:
                self.durations[(pod["metadata"]["name"], int(values["sluice_last_committed_batch_id"]))] = (
                    values["sluice_batch_duration_seconds"])


#: the runtime's log lines that say where a takeover's time went
TAKEOVER_LINES = ("took over", "checkpoint epoch", "first batch", "first commit", "acquired", "lease")


def takeover_lines(p: Platform, ns: str) -> str:
    """The new active driver's log lines of its takeover (``--why``)."""
    pod = p.active(ns, "q")
    if pod is None:
        return "  (no active driver)"
    text = p.kubectl("logs", "-n", ns, pod["metadata"]["name"], "-c", "driver", "--tail", "200")
    return "\n".join(f"  {line}" for line in text.splitlines()
                     if any(mark in line for mark in TAKEOVER_LINES))


def line(label: str, values: list[float]) -> str:
    return (f"{label:24s} n={len(values):4d}  p50 {statistics.median(values):6.3f}s  "
            f"p95 {percentile(values, 0.95):6.3f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3)
    parser.add_argument("--steady", type=float, default=120.0)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--state-dir", type=Path, default=REPO / ".platform")
    parser.add_argument("--why", action="store_true",
                        help="after each event, print the new active driver's takeover log lines")
    args = parser.parse_args()
    p = Platform(args.state_dir)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    namespaces: dict[str, str] = {}
    watchers: dict[str, Watcher] = {}
    for storage in STORAGES:
        ns = p.namespace(f"bench-{storage}")
        if storage == "s3":
            object_store(p, ns, args.state_dir)
        src, out = f"{ns}-in", f"{ns}-out"
        for f in admin.create_topics(
                [NewTopic(t, num_partitions=2, replication_factor=1) for t in (src, out)]).values():
            f.result(30)
        p.apply_when_admitted(query_doc(ns, "q", src, out, 1))
        namespaces[storage] = ns
        watchers[storage] = Watcher(p.bootstrap, src, out, args.rate)

    def settled(storage: str) -> bool:
        ns = namespaces[storage]
        pods = p.pods(ns, "q")
        return p.active(ns, "q") is not None and len(pods) == 2 and all(ready(x) for x in pods)

    def flowing(storage: str) -> bool:
        return settled(storage) and watchers[storage].flowing()

    for storage in STORAGES:
        eventually(functools.partial(flowing, storage), what=f"{storage} settled", timeout=600, interval=1)

    # 1. batch durations, both queries in the same period
    samplers = {s: Batches(p, namespaces[s], "q") for s in STORAGES}
    for sampler in samplers.values():
        sampler.start()
    time.sleep(args.steady)
    durations = {s: samplers[s].stop() for s in STORAGES}
    print("\nmicro-batch duration (the active driver's, one sample per batch)")
    for storage in STORAGES:
        print(line(storage, durations[storage]), flush=True)
    batch_ratio = statistics.median(durations["s3"]) / statistics.median(durations["volume"])
    batch_ratio95 = percentile(durations["s3"], 0.95) / percentile(durations["volume"], 0.95)
    print(f"s3 / volume: p50 {batch_ratio:.2f}, p95 {batch_ratio95:.2f}")

    # 2. events, interleaved
    results: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
    for round_ in range(args.events):
        for kind in KINDS:
            for storage in STORAGES:
                ns = namespaces[storage]
                eventually(functools.partial(settled, storage), what=f"{storage} settled", timeout=600,
                           interval=0.5)
                time.sleep(5)
                before = p.lease_gap(ns, "q").get("time")
                pod = p.active(ns, "q")
                assert pod is not None
                t0 = time.monotonic()
                if kind == "kill-standby":
                    p.signal(pod, signal.SIGKILL)
                else:
                    p.kubectl("patch", "sq", "q", "-n", ns, "--type=merge", "-p",
                              json.dumps({"spec": {"restartNonce": f"r{round_}"}}))
                gap, record = measure_event(p, watchers[storage], ns, "q", before, t0)
                results.setdefault((kind, storage), []).append((gap, record.get("gapSeconds")))
                print(f"round {round_ + 1} {kind:13s} {storage:6s} output gap {gap:6.2f}s  runtime gap "
                      f"{record.get('gapSeconds')}s ({record.get('reason')})", flush=True)
                if args.why:
                    print(takeover_lines(p, ns), flush=True)
    for storage, w in watchers.items():
        sent, lost, dup = w.stop()
        print(f"query on {storage}: {sent} records sent, {lost} lost, {dup} duplicated (read_committed)")
    print(f"\n{'event':22s} {'n':>3s} {'p50':>7s} {'p95':>7s}   runtime gap p50 / p95")
    medians: dict[tuple[str, str], float] = {}
    for (kind, storage), rows in results.items():
        gaps = [g for g, _ in rows]
        rts = [r for _, r in rows if r is not None]
        medians[(kind, storage)] = statistics.median(gaps)
        rt = f"{statistics.median(rts):.2f}s / {percentile(rts, 0.95):.2f}s" if rts else "-"
        print(f"{kind + ' ' + storage:22s} {len(gaps):3d} {medians[(kind, storage)]:6.2f}s "
              f"{percentile(gaps, 0.95):6.2f}s   {rt}")
    for kind in KINDS:
        print(f"{kind}: s3 / volume output gap p50 {medians[(kind, 's3')] / medians[(kind, 'volume')]:.2f}")
    for ns in namespaces.values():
        p.kubectl("delete", "namespace", ns, "--wait=false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
