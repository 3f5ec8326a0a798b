"""End to end through driver pods: what an operator upgrade and a QueryCluster change do to running
queries. Steady input (20 records/s) into exactly-once queries; at the end each output, read with
read_committed, holds every input record exactly once.

1. An operator of a later build, whose compiler plans the same SQL differently, is started against
   a running query: nothing happens to it (plan, Deployment, driver pod, checkpoint); its status
   offers the re-plan; the user accepts it and it is carried out in place behind the gate; the
   earlier operator, started again, keeps that plan.
2. A QueryCluster change of the runtime image and of a pinned Spark setting (the session time zone)
   reaches two queries one at a time (``maxConcurrentRollouts: 1``), each an in-place upgrade behind
   its gate; then a Spark version whose plans the image cannot run (the runtime refuses them) fails
   the first query's gate: it is rolled back, the old engine resumes, and the rollout halts before
   the second query.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from cluster import E2ECluster
from sluice.operator.builders.context import default_image
from test_queries import READY_TIMEOUT, cluster_doc, create_topics, query_doc
from test_standby import assert_exactly_once, events

from tests.support.feed import Feed
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.e2e

SELECT = "SELECT id, k FROM events"
#: how long one in-place upgrade may take through pods on this machine (the new driver's warm-up too)
UPGRADE_TIMEOUT = 420.0
#: the same runtime image under another name: a "new" engine
NEXT_IMAGE = "sluice-runtime:e2e-next"


def feed_query(ns: str, name: str, src: str, out: str, **extra: Any) -> dict[str, Any]:
    return query_doc(ns, name, {
        "sources": [{"name": "events", "topic": src, "schema": [
            {"name": "id", "type": "int"}, {"name": "k", "type": "string"}]}],
        "sql": SELECT,
        "sink": {"topic": out, "outputMode": "append", "delivery": "exactlyOnce"},
        "trigger": {"processingTime": "1 second"},
        **extra,
    })


def status(cluster: E2ECluster, ns: str, name: str) -> dict[str, Any]:
    return dict(((cluster.get("streamingquery", ns, name) or {}).get("status")) or {})


def fleet(cluster: E2ECluster, ns: str) -> dict[str, Any]:
    obj = cluster.get("querycluster", ns, "default") or {}
    return dict((obj.get("status") or {}).get("rollout") or {})


def deployment(cluster: E2ECluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.get("deployment", ns, f"{name}-driver") or {})


def test_an_operator_upgrade_keeps_plans_and_a_replan_waits_for_the_user(
        cluster: E2ECluster, ns: str, tmp_path: Path) -> None:
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap), feed_query(ns, "feed", src, out))
    feed = Feed(cluster.bootstrap, src)
    later: OperatorProcess | None = None
    stopped = False
    try:
        cluster.wait_for("an active driver", lambda: cluster.active_pod(ns, "feed"), READY_TIMEOUT)
        before = status(cluster, ns, "feed")
        pod, workload = cluster.active_pod(ns, "feed"), deployment(cluster, ns, "feed")
        assert pod is not None and not before["plan"].get("replan")

        # the operator is upgraded: the chart's stops, a later build's starts
        assert cluster.stop_operator is not None and cluster.start_operator is not None
        cluster.stop_operator()
        stopped = True
        later = OperatorProcess.later_build(cluster.kubeconfig, ns, tmp_path / "later-operator.log")
        offered = cluster.wait_for("the re-plan on offer", lambda: (
            status(cluster, ns, "feed")["plan"].get("replan")), 120)
        assert offered["decision"] == "in-place" and offered["category"] == "transparent", offered
        now = status(cluster, ns, "feed")
        assert now["plan"]["hash"] == before["plan"]["hash"] and not now.get("rollout"), now
        assert now["identity"]["checkpointPath"] == before["identity"]["checkpointPath"]
        time.sleep(10)  # and nothing moves while it is on offer
        after = deployment(cluster, ns, "feed")
        assert after["metadata"]["generation"] == workload["metadata"]["generation"]
        active = cluster.active_pod(ns, "feed")
        assert active is not None and active["metadata"]["uid"] == pod["metadata"]["uid"]
        assert status(cluster, ns, "feed")["plan"]["hash"] == before["plan"]["hash"]
        shown = cluster.kubectl("get", "sq", "feed", "-n", ns, "-o", "wide")
        assert "in-place" in shown, shown

        # the user accepts it: an in-place upgrade behind the gate, like any edit
        cluster.kubectl("annotate", "sq", "feed", "-n", ns, f"sluice.dev/replan={offered['hash']}")
        done = cluster.wait_for("the re-plan carried out", lambda: (
            (s := status(cluster, ns, "feed")).get("lastUpgrade", {}).get("outcome") == "Succeeded"
            and not s.get("rollout") and s), UPGRADE_TIMEOUT)
        assert done["plan"]["hash"] == offered["hash"] and done["lastUpgrade"]["cause"] == "replan", done
        assert done["lastUpgrade"]["checkpoint"] == before["identity"]["checkpointPath"]

        # back to the chart's operator (a downgrade, as far as the compiler goes): it keeps the plan
        later.stop()
        later = None
        cluster.start_operator()
        stopped = False
        back = cluster.wait_for("the earlier compiler's plan on offer", lambda: (
            (s := status(cluster, ns, "feed"))["plan"].get("replan", {}).get("hash")
            == before["plan"]["hash"] and s), 180)
        assert back["plan"]["hash"] == offered["hash"] and not back.get("rollout"), back
        time.sleep(4)
        assert_exactly_once(cluster, ns, out, feed.stop())
    except Exception as exc:
        log = later.tail() if later is not None else ""
        raise AssertionError(f"{exc}\n{log}\n{cluster.diagnostics(ns)}") from exc
    finally:
        feed.stop()
        if later is not None:
            later.stop()
        if stopped and cluster.start_operator is not None:
            cluster.start_operator()


def engine_moves(cluster: E2ECluster, ns: str, names: list[str], patch: dict[str, Any],
                 until: str) -> tuple[dict[str, Any], int]:
    """Patch the QueryCluster and wait until its rollout is ``until``; returns the rollout and the
    most queries seen upgrading at the same time."""
    before = fleet(cluster, ns).get("target")
    cluster.kubectl("patch", "querycluster", "default", "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": patch}))
    most = 0
    deadline = time.monotonic() + UPGRADE_TIMEOUT * len(names)
    while time.monotonic() < deadline:
        upgrading = [n for n in names if status(cluster, ns, n).get("rollout", {}).get("step") in (
            "Applying", "Verifying", "RollingBack")]
        most = max(most, len(upgrading))
        rollout = fleet(cluster, ns)
        if rollout.get("target") != before and rollout.get("state") == until and not upgrading:
            return rollout, most
        time.sleep(1.0)
    raise AssertionError(f"the QueryCluster's rollout did not become {until}: {fleet(cluster, ns)}")


def test_a_cluster_change_rolls_queries_in_waves_and_a_failed_gate_halts_it(
        cluster: E2ECluster, ns: str) -> None:
    src = f"{ns}-events"
    outs = {name: f"{ns}-{name}-out" for name in ("a", "b")}
    create_topics(cluster.bootstrap, src, *outs.values())
    assert cluster.tag_image is not None
    cluster.tag_image(default_image(), NEXT_IMAGE)
    cluster.apply(cluster_doc(ns, cluster.bootstrap, upgrade={"maxConcurrentRollouts": 1}),
                  *(feed_query(ns, name, src, out) for name, out in outs.items()))
    feed = Feed(cluster.bootstrap, src)
    try:
        for name in outs:
            cluster.wait_for(f"an active driver of {name}", lambda n=name: cluster.active_pod(ns, n),
                             READY_TIMEOUT)
        first = {name: status(cluster, ns, name) for name in outs}
        time.sleep(5)

        # 1. a new runtime image and a new session time zone (a pinned setting: these stateless queries
        # take it in place, as a data-selection change): one query at a time, each behind its gate
        conf = dict(cluster_doc(ns, cluster.bootstrap)["spec"]["sparkConf"])
        zone = {**conf, "spark.sql.session.timeZone": "Europe/Paris"}
        rollout, most = engine_moves(cluster, ns, list(outs), {"image": NEXT_IMAGE, "sparkConf": zone},
                                     "Complete")
        assert most == 1 and rollout["updated"] == ["a", "b"], rollout
        for name in outs:
            st = status(cluster, ns, name)
            last = st["lastUpgrade"]
            assert last["outcome"] == "Succeeded" and last["cause"] == "cluster", last
            assert last["category"] == "data-selection"
            assert last["checkpoint"] == st["identity"]["checkpointPath"]
            assert st["engine"]["image"] == NEXT_IMAGE and st["plan"]["hash"] != first[name]["plan"]["hash"]
            pod = cluster.active_pod(ns, name)
            assert pod is not None and pod["spec"]["containers"][0]["image"] == NEXT_IMAGE
        plan_cm = cluster.get("configmap", ns, status(cluster, ns, "a")["plan"]["configMap"]) or {}
        assert '"spark.sql.session.timeZone": "Europe/Paris"' in plan_cm["data"]["plan.json"]
        assert events(cluster, ns, "RolloutComplete")
        stable = {name: status(cluster, ns, name) for name in outs}
        time.sleep(5)

        # 2. a Spark the image does not carry: the plans are compiled for it and the runtime refuses
        # them; the first query's gate fails, it is rolled back, and the rollout halts before b
        rollout, _ = engine_moves(cluster, ns, list(outs), {"sparkVersion": "4.4.0"}, "Halted")
        failure = rollout["failure"]
        assert failure["query"] == "a" and "PlanIncompatible" in failure["message"], rollout
        a = status(cluster, ns, "a")
        assert a["lastUpgrade"]["outcome"] == "RolledBack", a["lastUpgrade"]
        assert a["lastUpgrade"]["error"]["class"] == "PlanIncompatible", a["lastUpgrade"]
        assert a["plan"]["hash"] == stable["a"]["plan"]["hash"]
        assert a["engine"]["digest"] == stable["a"]["engine"]["digest"]
        b = status(cluster, ns, "b")
        assert b["lastUpgrade"] == stable["b"]["lastUpgrade"] and b["plan"] == stable["b"]["plan"], b
        # the cluster pokes b once it has halted; b says so on its own next reconcile
        cluster.wait_for("b says the rollout it waits for is halted", lambda: "halted" in (
            status(cluster, ns, "b").get("engine") or {}).get("waiting", ""), 60)
        assert events(cluster, ns, "RolloutHalted")
        old_engine = stable["a"]["engine"]["digest"]
        cluster.wait_for("a's stable plan active again", lambda: (
            (lease := cluster.get("lease", ns, "a-driver")) and
            lease["metadata"]["annotations"].get("sluice.dev/holder-engine") == old_engine), 120)
        time.sleep(5)
        sent = feed.stop()
        for out in outs.values():
            assert_exactly_once(cluster, ns, out, sent)
    except Exception as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(ns)}") from exc
    finally:
        feed.stop()
