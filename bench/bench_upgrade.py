"""Output gap of an in-place upgrade (warm hand-off to the new plan) against a plain stop-and-start
of the driver on the same checkpoint, through driver pods on the local platform.

Steady input (``--rate`` records/s) into two exactly-once queries; a read_committed consumer per
query records when each output record becomes visible (``bench_failover.Watcher``). Two kinds of
event, interleaved (AB AB ...), ``--events`` each:

* ``upgrade``: a data-selection edit of query ``up`` (its WHERE alternates between two filters
  that both pass every record), carried out by the operator: a driver on the new plan starts and
  warms up while the old one serves, the old one drains and hands off, the gate passes; the event
  ends when ``status.lastUpgrade`` says Succeeded for the edit's generation;
* ``restart``: SIGTERM of the driver process of query ``cold`` (``standbyReplicas: 0``): it drains
  and exits, its container starts cold on the same checkpoint (what an upgrade cost before).

The output gap of an event is the longest output silence from the event until output has flowed
again for a while; the runtime's ``gapSeconds`` (old plan's last commit to the new plan's first,
from the Lease) is printed next to it.

    python bench/bench_upgrade.py [--events 5] [--rate 20]

Needs nothing running: it starts the platform and the operator like ``make demo`` (and leaves them
running). Prints one line per event, p50/p95 per kind, the ratio, and lost/duplicated records.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (str(REPO), str(BENCH)):
    if path not in sys.path:  # run as a script: shared helpers in tests.support and bench_failover
        sys.path.insert(0, path)

from bench_failover import Platform, Watcher, measure_event, print_summary, query_doc, ready  # noqa: E402

from tests.support.waiting import eventually  # noqa: E402

KINDS = ("upgrade", "restart")
FILTERS = ("id >= 0", "id > -1")


def status(p: Platform, ns: str, name: str) -> dict[str, Any]:
    return dict(json.loads(p.kubectl("get", "sq", name, "-n", ns, "-o", "json")).get("status") or {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--state-dir", type=Path, default=REPO / ".platform")
    args = parser.parse_args()
    p = Platform(args.state_dir)
    ns = f"bench-upgrade-{uuid.uuid4().hex[:6]}"
    p.kubectl("create", "namespace", ns)
    p.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "QueryCluster",
        "metadata": {"name": "default", "namespace": ns},
        "spec": {"serviceId": "bench", "kafka": {"bootstrapServers": p.bootstrap},
                 "driver": {"requests": {"cpu": "100m", "memory": "512Mi"}},
                 "sparkConf": {"spark.driver.memory": "768m"}}}))
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    watchers: dict[str, Watcher] = {}
    for name in ("up", "cold"):
        src, out = f"{ns}-{name}-in", f"{ns}-{name}-out"
        for f in admin.create_topics(
                [NewTopic(t, num_partitions=2, replication_factor=1) for t in (src, out)]).values():
            f.result(30)
        p.kubectl("apply", "-f", "-", stdin=json.dumps(query_doc(ns, name, src, out, 0)))
        watchers[name] = Watcher(p.bootstrap, src, out, args.rate)

    def settled(name: str) -> bool:
        pods = p.pods(ns, name)
        st = status(p, ns, name)
        return (p.active(ns, name) is not None and len(pods) == 1 and all(ready(x) for x in pods)
                and not st.get("rollout"))

    results: dict[str, list[tuple[float, float | None]]] = {k: [] for k in KINDS}
    for round_ in range(args.events):
        for kind in KINDS:
            name = "up" if kind == "upgrade" else "cold"
            eventually(lambda n=name: settled(n), what=f"{name} settled", timeout=600, interval=0.5)
            time.sleep(5)
            before = p.lease_gap(ns, name).get("time")
            t0 = time.monotonic()
            if kind == "upgrade":
                sql = f"SELECT id, k FROM events WHERE {FILTERS[round_ % 2]}"
                p.kubectl("patch", "sq", name, "-n", ns, "--type=merge", "-p",
                          json.dumps({"spec": {"sql": sql}}))
                body = json.loads(p.kubectl("get", "sq", name, "-n", ns, "-o", "json"))
                gen = int(body["metadata"]["generation"])
                last = eventually(lambda g=gen: (
                    (u := status(p, ns, "up").get("lastUpgrade") or {}).get("generation") == g
                    and u.get("outcome") in ("Succeeded", "RolledBack", "Failed") and u),
                    what="the upgrade to end", timeout=600, interval=0.5)
                if last["outcome"] != "Succeeded":
                    raise SystemExit(f"upgrade {round_ + 1} ended {last['outcome']}: {last.get('message')}")
            else:
                pod = p.active(ns, name)
                assert pod is not None
                pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("sluice://"))
                os.killpg(pid, signal.SIGTERM)
            gap, runtime_gap = measure_event(p, watchers[name], ns, name, before, t0)
            results[kind].append((gap, runtime_gap.get("gapSeconds")))
            print(f"round {round_ + 1} {kind:8s} output gap {gap:6.2f}s  runtime gap "
                  f"{runtime_gap.get('gapSeconds')}s ({runtime_gap.get('reason')})", flush=True)
    for name, w in watchers.items():
        sent, lost, dup = w.stop()
        print(f"query {name}: {sent} records sent, {lost} lost, {dup} duplicated (read_committed)")
    summary = print_summary(results, 8)
    ratio = summary["upgrade"] / summary["restart"]
    print(f"in-place upgrade (warm hand-off) vs stop-and-start: {ratio:.2f}")
    p.kubectl("delete", "namespace", ns, "--wait=false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
