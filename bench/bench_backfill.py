"""A replace with backfill through driver pods: the time from the edit to the switch, and how fast
the backfill reads its sources against a fresh query on the same data, in the same run.

A topic is pre-filled with ``--records`` records (1,000,000 by default, 2 partitions). Query ``bf``
(a count per key, exactly once, ``replaceStrategy: backfill``, ``maxLagRecords: 0``) runs on it.
Two kinds of round, interleaved (fresh, backfill, fresh, backfill, ...), ``--rounds`` each:

* ``fresh``: a new StreamingQuery with the SQL the next backfill will run, reading from the
  earliest offsets, applied with kubectl; its read time is from the apply until its driver's Lease
  reports that its committed batches read every record (``inputRows`` of the holder's progress);
* ``backfill``: an edit of ``bf``'s GROUP BY (a replace; it alternates between two keys), carried
  out with backfill: its read time is from the edit until the backfill driver's Lease reports every
  record read; then the time from the edit until the switch (``status.output.topic`` names the new
  version's topic and the upgrade Succeeded).

Both read times include starting a driver pod (JVM, Spark, warm-up), as a user sees them. Prints one
line per round, p50/p95 per kind, records per second, and the ratio backfill / fresh.

    python bench/bench_backfill.py [--records 1000000] [--rounds 3]

Needs nothing running: it starts the platform and the operator like ``make demo`` (and leaves them
running).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (str(REPO), str(BENCH)):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_failover import Platform, percentile  # noqa: E402

from tests.support.waiting import eventually  # noqa: E402

#: the backfills alternate between these GROUP BY keys (each change is a replace)
SQL = ("SELECT k, count(*) AS n FROM events GROUP BY k",
       "SELECT k, id % 2 AS parity, count(*) AS n FROM events GROUP BY k, id % 2")
PROGRESS = "sluice.dev/holder-progress"


def fill(bootstrap: str, topic: str, records: int) -> float:
    """Produce ``records`` small JSON records (100 keys); returns the seconds it took."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 500000, "compression.type": "lz4"})
    t0 = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, json.dumps({"id": i, "k": f"k{i % 100}"}).encode())
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)
    return time.monotonic() - t0


def query(ns: str, name: str, src: str, out: str, sql: str, start: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "sluice.dev/v1alpha1", "kind": "StreamingQuery",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"sources": [{"name": "events", "topic": src, "startingOffsets": start, "schema": [
                {"name": "id", "type": "int"}, {"name": "k", "type": "string"}]}],
                "sql": sql, "sink": {"topic": out, "outputMode": "update", "key": ["k"],
                                     "delivery": "exactlyOnce"},
                "trigger": {"processingTime": "1 second"}, "standbyReplicas": 0, **extra}}


def rows_read(p: Platform, ns: str, lease: str) -> int:
    try:
        body = json.loads(p.kubectl("get", "lease", lease, "-n", ns, "-o", "json"))
    except RuntimeError:
        return 0  # not created yet
    progress = json.loads((body["metadata"].get("annotations") or {}).get(PROGRESS) or "{}")
    return int(progress.get("inputRows") or 0)


def read_every(p: Platform, ns: str, lease: str, records: int) -> Callable[[], bool]:
    """Whether the holder of ``lease`` reported ``records`` rows read in its term."""
    return lambda: rows_read(p, ns, lease) >= records


def status(p: Platform, ns: str, name: str) -> dict[str, Any]:
    return dict(json.loads(p.kubectl("get", "sq", name, "-n", ns, "-o", "json")).get("status") or {})


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--state-dir", type=Path, default=REPO / ".platform")
    args = parser.parse_args()
    p = Platform(args.state_dir)
    ns = p.namespace("bench-backfill", memory="1Gi", heap="1g")
    from confluent_kafka.admin import AdminClient, NewTopic

    src, out = f"{ns}-in", f"{ns}-bf-out"
    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=2, replication_factor=1)
                                  for t in (src, out)]).values():
        f.result(30)
    took = fill(p.bootstrap, src, args.records)
    print(f"filled {src} with {args.records} records in {took:.1f}s", flush=True)
    # version 1 serves new records only (a backfill re-reads from the earliest offsets whatever the
    # plan says); a fresh query reads the whole topic
    p.kubectl("apply", "-f", "-", stdin=json.dumps(query(
        ns, "bf", src, out, SQL[0], "latest", upgrade={"replaceStrategy": "backfill", "maxLagRecords": 0,
                                             "healthBatches": 2, "healthTimeoutSeconds": 900},
        cleanup={"retainVersions": 0, "retention": "5s", "deleteTopics": "AfterRetention"})))

    def settled() -> bool:
        st = status(p, ns, "bf")
        return bool(st.get("ready")) and not st.get("rollout") and len(st.get("versions") or []) == 1

    reads: dict[str, list[float]] = {"fresh": [], "backfill": []}
    switches: list[float] = []
    for round_ in range(args.rounds):
        sql = SQL[(round_ + 1) % 2]
        # fresh: the same SQL as this round's backfill, on its own
        name = f"fresh{round_ + 1}"
        eventually(settled, what="bf settled", timeout=900, interval=1)
        t0 = time.monotonic()
        p.kubectl("apply", "-f", "-", stdin=json.dumps(query(ns, name, src, f"{ns}-{name}-out", sql,
                                                             "earliest", deletionPolicy="Delete")))
        eventually(read_every(p, ns, f"{name}-driver", args.records), what=f"{name} read every record",
                   timeout=1200, interval=0.5)
        reads["fresh"].append(time.monotonic() - t0)
        print(f"round {round_ + 1} fresh    read {args.records} records in {reads['fresh'][-1]:6.1f}s",
              flush=True)
        p.kubectl("delete", "sq", name, "-n", ns, "--wait=true", "--timeout=300s")

        eventually(settled, what="bf settled", timeout=900, interval=1)
        time.sleep(3)
        t0 = time.monotonic()
        p.kubectl("patch", "sq", "bf", "-n", ns, "--type=merge", "-p", json.dumps({"spec": {"sql": sql}}))
        eventually(read_every(p, ns, "bf-backfill", args.records), what="the backfill read every record",
                   timeout=1200, interval=0.5)
        reads["backfill"].append(time.monotonic() - t0)
        last = eventually(lambda: ((u := status(p, ns, "bf").get("lastUpgrade") or {}).get("outcome")
                                   in ("Succeeded", "RolledBack", "Failed") and u),
                          what="the switch", timeout=900, interval=0.5)
        switches.append(time.monotonic() - t0)
        if last["outcome"] != "Succeeded":
            raise SystemExit(f"backfill {round_ + 1} ended {last['outcome']}: {last.get('message')}")
        topic = status(p, ns, "bf").get("output", {}).get("topic")
        print(f"round {round_ + 1} backfill read {args.records} records in {reads['backfill'][-1]:6.1f}s; "
              f"switched to {topic} {switches[-1]:6.1f}s after the edit", flush=True)

    print(f"\n{'':14s} {'n':>3s} {'p50':>8s} {'p95':>8s} {'records/s (p50)':>16s}")
    p50: dict[str, float] = {}
    for kind, values in reads.items():
        p50[kind] = statistics.median(values)
        print(f"{kind + ' read':14s} {len(values):3d} {p50[kind]:7.1f}s {percentile(values, 0.95):7.1f}s "
              f"{args.records / p50[kind]:16.0f}")
    print(f"{'switch':14s} {len(switches):3d} {statistics.median(switches):7.1f}s "
          f"{percentile(switches, 0.95):7.1f}s   (edit -> output topic switched)")
    print(f"backfill vs fresh (read time p50): {p50['backfill'] / p50['fresh']:.2f}")
    p.kubectl("delete", "namespace", ns, "--wait=false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
