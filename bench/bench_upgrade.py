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
from the Lease) is printed next to it. Before each event, every query is settled and its output
flowing, then the benchmark waits ``--settle`` seconds more (default 0): a restarted JVM keeps a
core busy for minutes after its first commit, so on a small machine the previous event would
otherwise compete with the next one; the load at the event is printed with it.

* ``replace`` (``--kinds``; ``bench/bench_replace.py`` runs it against ``upgrade``): an edit of
  query ``rep`` that adds or removes a second (empty) source with UNION ALL, a replace with
  hand-off: plan version N+1 on a new checkpoint starts where version N's output ends.

    python bench/bench_upgrade.py [--events 5] [--rate 20] [--kinds upgrade,restart] [--settle 0]
        [--java-options=-XX:TieredStopAtLevel=1]

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
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (str(REPO), str(BENCH)):
    if path not in sys.path:  # run as a script: shared helpers in tests.support and bench_failover
        sys.path.insert(0, path)

from bench_failover import Platform, Watcher, measure_event, print_summary, query_doc, ready  # noqa: E402

from tests.support.waiting import eventually  # noqa: E402

KINDS = ("upgrade", "replace", "restart")
FILTERS = ("id >= 0", "id > -1")
#: the replace edits alternate between these (each adds or removes a source: a replace)
REPLACE_SQL = ("SELECT id, k FROM events UNION ALL SELECT id, k FROM extra", "SELECT id, k FROM events")
QUERY = {"upgrade": "up", "replace": "rep", "restart": "cold"}


#: seconds between the polls (a ``kubectl get`` each, about 0.1 CPU-second here) while an event
#: runs: the output gap is measured by the read_committed consumer, not by the polls, so they need
#: not be frequent, and a poll every 0.5 s took about a tenth of this 2-core machine from the
#: drivers during the hand-off
POLL = 2.0


def machine_load() -> str:
    """The load average and the CPU pressure (Linux PSI, ``some avg10``) right now."""
    load = f"{os.getloadavg()[0]:.2f}"
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()[1].split("=")[1]
    except (OSError, IndexError):
        some = "n/a"
    return f"load {load}, cpu pressure {some} %"


def status(p: Platform, ns: str, name: str) -> dict[str, Any]:
    return dict(json.loads(p.kubectl("get", "sq", name, "-n", ns, "-o", "json")).get("status") or {})


def main(kinds: tuple[str, ...] = ("upgrade", "restart"), doc: str | None = None) -> int:
    parser = argparse.ArgumentParser(description=(doc or __doc__ or "").split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--state-dir", type=Path, default=REPO / ".platform")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait before each event once every query is settled")
    parser.add_argument("--java-options", default="",
                        help="the drivers' JVM options (sparkConf spark.driver.extraJavaOptions), e.g. "
                             "--java-options=-XX:TieredStopAtLevel=1 (with '=': the value starts with a "
                             "dash); default: none, the JVM's defaults")
    parser.add_argument("--kinds", default=",".join(kinds),
                        help=f"of {', '.join(KINDS)}; the last is the baseline")
    args = parser.parse_args()
    chosen = [k for k in args.kinds.split(",") if k]
    if not chosen or any(k not in KINDS for k in chosen):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    p = Platform(args.state_dir)
    ns = p.namespace("bench-upgrade", java_options=args.java_options)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    watchers: dict[str, Watcher] = {}
    for name in (QUERY[k] for k in chosen):
        src, out, extra = f"{ns}-{name}-in", f"{ns}-{name}-out", f"{ns}-{name}-extra"
        for f in admin.create_topics(
                [NewTopic(t, num_partitions=2, replication_factor=1) for t in (src, out, extra)]).values():
            f.result(30)
        doc = query_doc(ns, name, src, out, 0)
        doc["spec"]["sources"].append({**doc["spec"]["sources"][0], "name": "extra", "topic": extra})
        p.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
        watchers[name] = Watcher(p.bootstrap, src, out, args.rate)

    def settled(name: str) -> bool:
        pods = p.pods(ns, name)
        st = status(p, ns, name)
        return (p.active(ns, name) is not None and len(pods) == 1 and all(ready(x) for x in pods)
                and not st.get("rollout"))

    results: dict[str, list[tuple[float, float | None]]] = {k: [] for k in chosen}
    for round_ in range(args.events):
        for kind in chosen:
            name = QUERY[kind]
            for other in watchers:  # every query, so that no event still runs when this one starts
                eventually(lambda n=other: settled(n), what=f"{other} settled", timeout=600, interval=POLL)
                eventually(lambda n=other: watchers[n].flowing(), what=f"{other}'s output flowing",
                           timeout=600, interval=0.5)
            time.sleep(args.settle)
            load = machine_load()
            before = p.lease_gap(ns, name).get("time")
            t0 = time.monotonic()
            if kind in ("upgrade", "replace"):
                sql = (f"SELECT id, k FROM events WHERE {FILTERS[round_ % 2]}" if kind == "upgrade"
                       else REPLACE_SQL[round_ % 2])
                p.kubectl("patch", "sq", name, "-n", ns, "--type=merge", "-p",
                          json.dumps({"spec": {"sql": sql}}))
                body = json.loads(p.kubectl("get", "sq", name, "-n", ns, "-o", "json"))
                gen = int(body["metadata"]["generation"])
                last = eventually(lambda g=gen, n=name: (
                    (u := status(p, ns, n).get("lastUpgrade") or {}).get("generation") == g
                    and u.get("outcome") in ("Succeeded", "RolledBack", "Failed") and u),
                    what="the upgrade to end", timeout=600, interval=POLL)
                if last["outcome"] != "Succeeded" or (kind == "replace") != (last["decision"] == "replace"):
                    raise SystemExit(f"{kind} {round_ + 1} ended {last['outcome']} ({last['decision']}): "
                                     f"{last.get('message')}")
            else:
                pod = p.active(ns, name)
                assert pod is not None
                p.signal(pod, signal.SIGTERM)
            gap, runtime_gap = measure_event(p, watchers[name], ns, name, before, t0, interval=POLL)
            results[kind].append((gap, runtime_gap.get("gapSeconds")))
            print(f"round {round_ + 1} {kind:8s} output gap {gap:6.2f}s  runtime gap "
                  f"{runtime_gap.get('gapSeconds')}s ({runtime_gap.get('reason')}); the longest silence "
                  f"began {runtime_gap['silenceAt']}s after the event, the takeover was recorded at "
                  f"{runtime_gap['recordedAt']}s; at the event: {load}", flush=True)
    for name, w in watchers.items():
        sent, lost, dup = w.stop()
        print(f"query {name}: {sent} records sent, {lost} lost, {dup} duplicated (read_committed)")
    summary = print_summary(results, 8)
    baseline = chosen[-1]
    for kind in chosen[:-1]:
        print(f"{kind} vs {baseline} (output gap p50): {summary[kind] / summary[baseline]:.2f}")
    if "replace" in chosen:
        print(f"plan version of query rep after the replaces: {status(p, ns, 'rep')['plan']['version']}")
    p.kubectl("delete", "namespace", ns, "--wait=false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
