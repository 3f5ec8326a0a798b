"""End to end: a real Prometheus scrapes the operator and the drivers, evaluates the chart's alert
rules, and ``SluiceQueryNotProgressing`` fires on a hung driver.

Prometheus (Debian's ``prometheus``, :mod:`sluice_dev.platform.prometheus`) runs on the host, on
127.0.0.1, scraping and evaluating every second. Debian builds it without the Kubernetes service
discovery, so the test lists the pods every second into ``file_sd_configs`` files
(:class:`PodTargets`) with the labels the chart's ServiceMonitor and PodMonitor give: the operator
pods' ``metrics`` port, scraped with ``honor_labels``, and the driver pods' ``http`` port with
``namespace``, ``pod`` and ``streamingquery`` (the pod label ``sluice.dev/query``). It scrapes
the pod IPs: the host reaches them through the node's bridge (under kind, only with a route to
kind's pod network).

The rules are ``charts/sluice/files/alerts.yaml``, expressions verbatim. Only the ``for:`` of
``SluiceQueryNotProgressing`` is rewritten in the test's copy, from 10m to 20s: longer than the
query's trigger interval (10 s), so that a driver between two batches never fires.

The rule joins a driver's lag (``> 0``), ``changes(sluice_last_committed_batch_id[15m]) == 0``
and ``sluice_query_active == 1`` on (namespace, pod, query). A driver that committed two batches
within the last 15 minutes never matches, so the stall is set up where the window needs no 15
minutes: a driver that took over (a fail-over after ``kill -9`` of the active driver, right
after one of its commits) commits its first batch and hangs before its second (SIGSTOP of its
JVM alone: the runtime's Python process goes on answering ``/metrics`` and renewing the Lease, so
no standby takes over and the driver keeps reporting ``sluice_query_active`` 1 and its last lag).
Its batch id has had one value in the whole window. The lag comes from the batches' progress
reports only, so it is above 0 only when the last batch stopped short of the latest offset: the
source has a rate limit (``maxOffsetsPerTrigger``) below the input rate, as for a query working
off a backlog. (A query that has caught up reports 0 after every batch, and keeps reporting 0
when it hangs; a batch run again from the offset log after a fail-over reports no lag at all.)

Healthy first: the first driver's batch id changes in Prometheus, its lag and the operator's
``sluice_operator_query_phase`` carry the query's namespace and name, nothing fires and the
alert is not pending. Then the stall: the alert fires for the main Spark query with the query's
namespace and name, the hung pod and the Spark query (about 20 s after the stop); resumed
(SIGCONT), the driver commits and the alert resolves.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster import E2ECluster
from sluice_dev.platform import common
from sluice_dev.platform import prometheus as prom
from test_queries import READY_TIMEOUT, cluster_doc, create_topics, query_doc
from test_standby import ready_standby

from tests.support.feed import Feed

pytestmark = pytest.mark.e2e

RULES = Path(__file__).resolve().parents[2] / "charts" / "sluice" / "files" / "alerts.yaml"
ALERT = "SluiceQueryNotProgressing"
#: the test's ``for:`` of the alert (the chart's: 10m), longer than the trigger interval
ALERT_FOR = "20s"
QUERY = "feed"  # test_standby.ready_standby's query
TRIGGER_SECONDS = 10
#: input records per second, and the rate limit per batch (a second's worth is 1 / TRIGGER_SECONDS
#: of it): the query falls behind, 1 record/s, so that every batch reports a lag above 0
RATE, MAX_OFFSETS_PER_TRIGGER = 2.0, 10
OPERATOR_NAMESPACE = "sluice-system"
#: the driver pods the chart's PodMonitor selects
DRIVERS = "app.kubernetes.io/component=driver,app.kubernetes.io/managed-by=sluice-operator"
SCRAPE = "1s"


def rules_for_the_test() -> dict[str, Any]:
    """The chart's rules file, with only the ``for:`` of ``ALERT`` rewritten."""
    rules: dict[str, Any] = yaml.safe_load(RULES.read_text())
    found = [rule for group in rules["groups"] for rule in group["rules"] if rule.get("alert") == ALERT]
    assert len(found) == 1, f"{ALERT} is not once in {RULES}"
    found[0]["for"] = ALERT_FOR
    return rules


class PodTargets:
    """The scrape targets of the operator pods (port ``metrics``) and of the query namespace's
    driver pods (port ``http``), listed every second into ``file_sd_configs`` files with the labels
    the chart's ServiceMonitor and PodMonitor give them: ``namespace``, ``pod``, and for a driver
    ``streamingquery`` (its ``sluice.dev/query`` label). Debian's Prometheus has no Kubernetes
    service discovery; this is what it would find."""

    def __init__(self, cluster: E2ECluster, ns: str, directory: Path) -> None:
        self.cluster, self.ns = cluster, ns
        self.operator, self.drivers = directory / "operator.json", directory / "drivers.json"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-targets", daemon=True)

    def groups(self, namespace: str, selector: str, port_name: str) -> list[dict[str, Any]]:
        listed = self.cluster.read(f"/api/v1/namespaces/{namespace}/pods", [("labelSelector", selector)])
        groups: list[dict[str, Any]] = []
        for pod in (listed or {}).get("items", []):
            ip = (pod.get("status") or {}).get("podIP")
            ports = [p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []
                     if p.get("name") == port_name]
            if not ip or not ports or pod["status"].get("phase") != "Running":
                continue
            labels = {"namespace": namespace, "pod": pod["metadata"]["name"]}
            query = (pod["metadata"].get("labels") or {}).get("sluice.dev/query")
            if query:
                labels["streamingquery"] = query
            groups.append({"targets": [f"{ip}:{ports[0]}"], "labels": labels})
        return groups

    def refresh(self) -> None:
        prom.write_targets(self.operator, self.groups(
            OPERATOR_NAMESPACE, "app.kubernetes.io/component=operator", "metrics"))
        prom.write_targets(self.drivers, self.groups(self.ns, DRIVERS, "http"))

    def start(self) -> None:
        self.refresh()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.refresh()
            except Exception as exc:  # a failed listing keeps the last targets
                print(f"pod targets: {exc}")

    def scrape_config(self) -> dict[str, Any]:
        """The operator's job (``honor_labels``: its per-query series keep their own namespace)
        and the drivers' job."""
        def job(name: str, path: Path, honor_labels: bool) -> dict[str, Any]:
            return {"job_name": name, "honor_labels": honor_labels,
                    "file_sd_configs": [{"files": [str(path)], "refresh_interval": SCRAPE}]}

        return {
            "global": {"scrape_interval": SCRAPE, "scrape_timeout": SCRAPE, "evaluation_interval": SCRAPE},
            "scrape_configs": [job("sluice-operator", self.operator, True),
                               job("sluice-drivers", self.drivers, False)],
        }


@pytest.fixture
def prometheus(cluster: E2ECluster, ns: str, tmp_path: Path) -> Iterator[prom.Server]:
    """A Prometheus scraping the operator and the drivers of ``ns``, with the test's rules."""
    directory = tmp_path / "prometheus"
    targets = PodTargets(cluster, ns, directory)
    targets.start()
    try:
        server = prom.start(directory, targets.scrape_config(), {"alerts.yaml": rules_for_the_test()})
    except common.PlatformError as exc:
        targets.stop()
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()
    targets.stop()


def alerts_of(server: prom.Server, ns: str) -> list[dict[str, Any]]:
    return [a for a in server.alerts() if a["labels"].get("namespace") == ns]


def series(server: prom.Server, expr: str) -> list[dict[str, str]]:
    """The label sets of ``expr``'s result now."""
    return [dict(sample["metric"]) for sample in server.query(expr)]


def a_commit(server: prom.Server, matchers: str, after: float = -1.0, timeout: float = 120.0) -> float:
    """Wait (polling fast) until Prometheus has a last committed batch id matching ``matchers``
    above ``after``; returns it."""
    expr = f"max(sluice_last_committed_batch_id{{{matchers}}}) > {after}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = server.query(expr)
        if found:
            return float(found[0]["value"][1])
        time.sleep(0.2)
    raise AssertionError(f"Prometheus saw no {expr} within {timeout:.0f}s")


def test_a_hung_driver_fires_query_not_progressing(cluster: E2ECluster, ns: str,
                                                   prometheus: prom.Server) -> None:
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    feed = Feed(cluster.bootstrap, src, rate=RATE)
    cluster.apply(cluster_doc(ns, cluster.bootstrap, standbyReplicas=1), query_doc(ns, QUERY, {
        "sources": [{"name": "events", "topic": src, "maxOffsetsPerTrigger": MAX_OFFSETS_PER_TRIGGER,
                     "schema": [{"name": "id", "type": "int"}, {"name": "k", "type": "string"}]}],
        "sql": "SELECT id, k FROM events",
        "sink": {"topic": out, "outputMode": "append", "delivery": "exactlyOnce"},
        "trigger": {"processingTime": f"{TRIGGER_SECONDS} seconds"},
    }))
    hung: dict[str, Any] | None = None
    try:
        active = cluster.wait_for("an active driver", lambda: cluster.active_pod(ns, QUERY), READY_TIMEOUT)
        first = active["metadata"]["name"]
        # the main Spark query (its dead-letter queries, "<query>-dlq-<source>", report the same)
        where = f'namespace="{ns}", streamingquery="{QUERY}", query!~".+-dlq-.+"'

        # 1. healthy: the driver commits, its series and the operator's name the query
        committing = cluster.wait_for("Prometheus to see the first driver commit batches", lambda: series(
            prometheus, f"changes(sluice_last_committed_batch_id{{{where}}}[15m]) > 0"), READY_TIMEOUT)
        assert [(s["pod"], s["query"][:7]) for s in committing] == [(first, "sluice-")], committing
        main = committing[0]["query"]
        lag = series(prometheus, f"sum by (namespace, streamingquery, pod, query) "
                                 f"(sluice_kafka_lag_records{{{where}}}) > 0")
        assert [s["pod"] for s in lag] == [first], f"no lag above 0 for {first}: {lag}"
        assert series(prometheus, f"sluice_query_active{{{where}}} == 1"), "sluice_query_active"
        phase = cluster.wait_for("the operator's phase series of the query", lambda: series(
            prometheus, f"sluice_operator_query_phase{{{where}}} == 1"), 60)
        assert phase[0]["phase"] in ("Starting", "Running"), phase
        # pending from the first batch on, until an evaluation (every second, shortly after the
        # query above) sees the second: nothing fires, and the alert is not pending any more
        cluster.wait_for(f"no {ALERT} and nothing firing", lambda: not [
            a for a in alerts_of(prometheus, ns) if a["state"] == "firing"
            or (a["labels"]["alertname"], a["labels"].get("query")) == (ALERT, main)], 10)
        standby = cluster.wait_for("a warm standby", lambda: ready_standby(cluster, ns, first), READY_TIMEOUT)

        # 2. the stall: a fail-over, and the new driver's JVM hangs after its first batch
        # right after a commit of the active driver: the standby then starts a new batch (a batch
        # that was running would be run again from its logged offsets, which reports no lag) and
        # has nearly a whole trigger interval before the next one
        of_first = f'{where}, pod="{first}"'
        a_commit(prometheus, of_first, after=a_commit(prometheus, of_first))
        cluster.signal_pod(active, signal.SIGKILL)
        new = cluster.wait_for("the standby to take over", lambda: (
            (p := cluster.active_pod(ns, QUERY)) is not None and p["metadata"]["name"] == standby and p), 60)
        of_new = f'{where}, pod="{standby}"'
        a_commit(prometheus, of_new)
        cluster.signal_jvm(new, signal.SIGSTOP)
        hung, stopped = new, time.monotonic()
        single = series(prometheus, f"changes(sluice_last_committed_batch_id{{{of_new}}}[15m]) == 0")
        assert single, f"{standby} committed a second batch before its JVM was stopped"

        def of_main() -> list[dict[str, Any]]:
            return [a for a in alerts_of(prometheus, ns)
                    if (a["labels"]["alertname"], a["labels"].get("query")) == (ALERT, main)]

        def firing() -> dict[str, Any] | None:
            return next((a for a in of_main() if a["state"] == "firing"), None)

        alert = cluster.wait_for(f"{ALERT} to fire", firing, 120)
        took = time.monotonic() - stopped
        labels = alert["labels"]
        named = (labels["streamingquery"], labels["pod"], labels["severity"])
        assert named == (QUERY, standby, "critical"), labels
        assert f"{ns}/{QUERY} is not progressing" in alert["annotations"]["summary"], alert
        assert took < 90, f"{ALERT} fired {took:.0f}s after the JVM stopped"
        print(f"{ALERT} fired {took:.1f}s after the JVM of {standby} stopped")

        # 3. resumed, the driver commits again and the alert resolves
        cluster.signal_jvm(new, signal.SIGCONT)
        hung = None
        cluster.wait_for(f"{ALERT} to resolve", lambda: not of_main(), 120)
    except Exception as exc:
        try:
            targets: Any = [(t["labels"], t["health"], t["lastError"]) for t in prometheus.targets()]
        except Exception as unread:
            targets = unread
        raise AssertionError(f"{exc}\nPrometheus targets: {targets}\n{cluster.diagnostics(ns)}") from exc
    finally:
        if hung is not None:
            cluster.signal_jvm(hung, signal.SIGCONT)
        feed.stop()
