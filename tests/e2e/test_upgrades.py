"""End to end through driver pods: in-place upgrades behind the health gate, and rollback.

Steady input (20 records/s) into an exactly-once query; every edit is applied with kubectl while
records flow, and at the end the output, read with read_committed, holds every input record
exactly once: nothing lost or duplicated across hand-offs, a failed plan and its rollback.

add a WHERE (data-selection) and an output column (schema-evolution) in one edit: Succeeded, on
the same checkpoint; then an edit that compiles but fails at run time (an ANSI cast of a non-numeric
string to INT): RolledBack automatically, the old plan runs again and processes the records that
arrived meanwhile; then a further column, and an edit made during that rollout waits for it,
while the operator, killed in the middle of the rollout, resumes it when it starts again; then a
second source (UNION ALL) is a replace with hand-off: plan version 2 on a new checkpoint starts
where version 1's output ends, into the same topic; last, version 1 is cleaned up once its
retention (5 s) has passed. (``rollback: Never``, which leaves the failed plan running Degraded
until the next edit, is tested against the API server: ``tests/integration/test_upgrade_reconcile.py``.)
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from cluster import E2ECluster
from test_queries import READY_TIMEOUT, cluster_doc, consume, create_topics, produce, query_doc, ts
from test_standby import assert_exactly_once, events

from tests.support.feed import Feed

pytestmark = pytest.mark.e2e

SELECT = "SELECT id, k FROM events"
COLUMN = "SELECT id, k, upper(k) AS kk FROM events WHERE id >= 0"
#: further columns (schema-evolution, each)
LATER = "SELECT id, k, upper(k) AS kk, lower(k) AS lk FROM events WHERE id >= 0"
LAST = "SELECT id, k, upper(k) AS kk, lower(k) AS lk, length(k) AS kn FROM events WHERE id >= 0"
#: compiles; fails on the first record: k is "k0", "k1", ... and ANSI casts refuse it
FAILING = "SELECT id, k, upper(k) AS kk, CAST(k AS INT) AS n FROM events WHERE id >= 0"
#: version 2 (a replace): a second source
UNION = f"{LAST} UNION ALL SELECT id, k, upper(k) AS kk, lower(k) AS lk, length(k) AS kn FROM extra"
EXTRA_RECORDS = 5
#: how long one in-place upgrade may take through pods on this machine (warm-up of the new driver
#: included)
UPGRADE_TIMEOUT = 420.0


def groups(bootstrap: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer came
    return [g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid]


def feed_query(ns: str, src: str, out: str, **extra: Any) -> dict[str, Any]:
    return query_doc(ns, "feed", {
        "sources": [{"name": "events", "topic": src, "schema": [
            {"name": "id", "type": "int"}, {"name": "k", "type": "string"}]}],
        "sql": SELECT,
        "sink": {"topic": out, "outputMode": "append", "delivery": "exactlyOnce"},
        "trigger": {"processingTime": "1 second"},
        **extra,
    })


def status(cluster: E2ECluster, ns: str) -> dict[str, Any]:
    return dict(((cluster.get("streamingquery", ns, "feed") or {}).get("status")) or {})


def edit_sql(cluster: E2ECluster, ns: str, sql: str) -> int:
    cluster.kubectl("patch", "sq", "feed", "-n", ns, "--type=merge", "-p", json.dumps({"spec": {"sql": sql}}))
    return int((cluster.get("streamingquery", ns, "feed") or {})["metadata"]["generation"])


def upgrade_ended(cluster: E2ECluster, ns: str, generation: int, *outcomes: str) -> dict[str, Any]:
    """Wait until the rollout started for ``generation`` ended with one of ``outcomes``."""
    def ended() -> dict[str, Any] | None:
        st = status(cluster, ns)
        last = st.get("lastUpgrade") or {}
        if st.get("rollout", {}).get("step") not in (None, "Failed"):
            return None
        if last.get("generation") == generation and last.get("outcome") in outcomes:
            return st
        return None

    return dict(cluster.wait_for(f"the upgrade of generation {generation} to end {outcomes}", ended,
                                 UPGRADE_TIMEOUT))


@pytest.mark.timeout(1800)  # five rollouts: 681 s in a CI run on a starved CPU, over 900 s under more load
def test_in_place_upgrades_a_rollback_an_edit_mid_rollout_an_operator_restart_and_a_replace(
    cluster: E2ECluster, ns: str
) -> None:
    """One query, one feed, five rollouts (a query start costs a minute of JVM and Spark here)."""
    src, out, extra = f"{ns}-events", f"{ns}-events-out", f"{ns}-extra"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap),
                  feed_query(ns, src, out, cleanup={"retainVersions": 0, "retention": "5s"}))
    feed = Feed(cluster.bootstrap, src)
    operator_stopped = False
    try:
        cluster.wait_for("an active driver", lambda: cluster.active_pod(ns, "feed"), READY_TIMEOUT)
        first = status(cluster, ns)
        checkpoint = first["identity"]["checkpointPath"]
        time.sleep(5)

        # 1-2. add a WHERE (data-selection) and an output column (schema-evolution, the edit's
        # category): in place, on the same checkpoint, with a measured output gap
        st = upgrade_ended(cluster, ns, edit_sql(cluster, ns, COLUMN), "Succeeded")
        last = st["lastUpgrade"]
        assert last["category"] == "schema-evolution" and last["fromHash"] == first["plan"]["hash"]
        assert st["plan"]["hash"] == last["toHash"] and st["identity"]["checkpointPath"] == checkpoint
        assert last["checkpoint"] == checkpoint and last["gapSeconds"] is not None
        stable = st["plan"]["hash"]
        time.sleep(3)

        # 3. a plan that fails at run time: rolled back by itself, the stable plan runs again
        st = upgrade_ended(cluster, ns, edit_sql(cluster, ns, FAILING), "RolledBack")
        last = st["lastUpgrade"]
        assert st["plan"]["hash"] == stable and last["rollback"] == "handBack", last
        assert last["error"]["class"] == "CAST_INVALID_INPUT", last
        assert [h["outcome"] for h in st["history"][:2]] == ["RolledBack", "Succeeded"]
        cluster.wait_for("the stable plan's driver active again", lambda: (
            (lease := cluster.get("lease", ns, "feed-driver")) and
            lease["metadata"]["annotations"].get("sluice.dev/holder-plan-hash") == stable), 120)
        cluster.wait_for("an UpgradeRolledBack event", lambda: events(cluster, ns, "UpgradeRolledBack"), 60)
        sent_before = feed.sent
        time.sleep(8)  # records that arrive now are processed by the stable plan

        # 4. a further column; 5. an edit made during that rollout waits for it, and the operator
        # killed mid-rollout resumes it (not COLUMN: that is the stable plan, and going back to it
        # mid-rollout cancels)
        edit_sql(cluster, ns, LATER)
        st = cluster.wait_for("the further column rolling out", lambda: (
            (s := status(cluster, ns)).get("rollout", {}).get("step") in ("Applying", "Verifying")
            and s["rollout"]["fromHash"] == stable and s), 60)
        target = st["rollout"]["targetHash"]
        last_gen = edit_sql(cluster, ns, LAST)
        assert cluster.stop_operator is not None and cluster.start_operator is not None
        cluster.stop_operator()
        operator_stopped = True
        time.sleep(10)
        cluster.start_operator()
        operator_stopped = False
        st = upgrade_ended(cluster, ns, last_gen, "Succeeded")
        outcomes = [(h["toHash"], h["outcome"]) for h in st["history"][:2]]
        assert outcomes[1] == (target, "Succeeded"), outcomes  # the further column, then the later edit
        assert st["history"][0]["fromHash"] == target, st["history"][0]
        assert st["phase"] in ("Running", "Starting") and not st.get("rollout"), st
        time.sleep(3)

        # 7. a second source (UNION ALL) needs a new checkpoint: a replace with hand-off (the
        # default strategy); version 2 reads events exactly from where version 1's output ends,
        # and the new topic from its start
        v1_group = st["identity"]["consumerGroup"]
        assert any(g.startswith(v1_group + ".eos.") for g in groups(cluster.bootstrap))  # its marker
        create_topics(cluster.bootstrap, extra)
        produce(cluster.bootstrap, extra, [{"id": -1 - i, "k": "x"} for i in range(EXTRA_RECORDS)])
        cluster.kubectl("patch", "sq", "feed", "-n", ns, "--type=merge", "-p", json.dumps({"spec": {
            "sources": [*feed_query(ns, src, out)["spec"]["sources"], {
                "name": "extra", "topic": extra, "schema": [
                    {"name": "id", "type": "int"}, {"name": "k", "type": "string"}]}],
            "sql": UNION}}))
        gen = int((cluster.get("streamingquery", ns, "feed") or {})["metadata"]["generation"])
        st = upgrade_ended(cluster, ns, gen, "Succeeded")
        last = st["lastUpgrade"]
        assert last["decision"] == "replace" and st["plan"]["version"] == 2, last
        assert st["identity"]["checkpointPath"] == checkpoint.rsplit("/", 1)[0] + "/v2"
        assert last["checkpoint"] == st["identity"]["checkpointPath"] and last["gapSeconds"] is not None
        assert (st["versions"][0]["version"], st["versions"][0]["state"]) == (2, "Running")

        # 8. version 1 is cleaned up 5 s after it retired: its checkpoint (by the active driver),
        # its consumer and marker groups, its plan ConfigMaps; output goes on undisturbed
        cluster.wait_for("version 1 cleaned up", lambda: [
            (v["version"], v["state"]) for v in status(cluster, ns).get("versions", [])
        ] == [(2, "Running")], 120)
        assert events(cluster, ns, "CheckpointRemoved") and events(cluster, ns, "VersionCleanedUp")
        assert not [g for g in groups(cluster.bootstrap) if g == v1_group or g.startswith(v1_group + ".")]
        time.sleep(4)
        sent = feed.stop()
        rows = assert_exactly_once(cluster, ns, out, sent, extra=EXTRA_RECORDS)
        late = [r for r in rows if sent_before <= r["id"] < sent_before + 100]
        assert late and all("kk" in r and "n" not in r for r in late), late[:3]
        assert sorted(r["id"] for r in rows if r["id"] < 0) == list(range(-EXTRA_RECORDS, 0))
    except Exception as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(ns)}") from exc
    finally:
        feed.stop()
        if operator_stopped and cluster.start_operator is not None:
            cluster.start_operator()


def epoch(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


def per_window(rows: list[dict[str, Any]], key: str) -> dict[tuple[str, int], int]:
    return {(r[key], epoch(r["w"]["start"])): r["n"] for r in rows}


WINDOWED = ("SELECT window(ts, '1 minute') AS w, {key}, count(*) AS n FROM clicks "
            "GROUP BY window(ts, '1 minute'), {key}")


def test_a_new_group_by_key_is_backfilled_into_a_versioned_topic_then_the_old_version_goes(
    cluster: E2ECluster, ns: str
) -> None:
    """A windowed count per page, exactly once; the GROUP BY key changes to the region (a replace):
    with backfill, version 2 re-reads the whole history into ``<sink>-v2`` beside version 1, takes
    over once caught up, and version 1's checkpoint, groups and topic go after 5 s; then a replace
    that fails its gate is discarded with what it left, and the delete removes the inventory."""
    src, out = f"{ns}-clicks", f"{ns}-clicks-per-minute"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(cluster_doc(ns, cluster.bootstrap), query_doc(ns, "clicks", {
        "sources": [{"name": "clicks", "topic": src, "schema": [
            {"name": "page", "type": "string"}, {"name": "region", "type": "string"},
            {"name": "ts", "type": "timestamp"}], "eventTime": {"column": "ts", "watermark": "10 seconds"}}],
        "sql": WINDOWED.format(key="page"),
        "sink": {"topic": out, "outputMode": "append", "key": ["page"], "delivery": "exactlyOnce"},
        "trigger": {"processingTime": "1 second"},
        "upgrade": {"replaceStrategy": "backfill", "maxLagRecords": 0, "healthBatches": 2},
        "cleanup": {"retainVersions": 0, "retention": "5s", "deleteTopics": "AfterRetention"},
        "deletionPolicy": "Delete",
    }))
    rows = [{"page": f"/p{i % 3}", "region": f"r{i % 2}", "ts": ts(i)} for i in range(120)]  # two minutes
    produce(cluster.bootstrap, src, rows)
    time.sleep(5)  # a later event advances the watermark past both windows: append mode emits them
    produce(cluster.bootstrap, src, [{"page": "/tick", "region": "tick", "ts": ts(300)}])
    by_page: Counter[tuple[str, int]] = Counter()
    by_region: Counter[tuple[str, int]] = Counter()
    for i in range(120):
        by_page[(f"/p{i % 3}", (1_700_000_000 + i) // 60 * 60)] += 1
        by_region[(f"r{i % 2}", (1_700_000_000 + i) // 60 * 60)] += 1
    try:
        got = consume(cluster.bootstrap, out, len(by_page), READY_TIMEOUT, committed=True)
        assert per_window(got, "page") == dict(by_page)
        v1 = status_of(cluster, ns)
        assert v1["output"]["topic"] == out

        cluster.kubectl("patch", "sq", "clicks", "-n", ns, "--type=merge", "-p", json.dumps({"spec": {
            "sql": WINDOWED.format(key="region"), "sink": {"key": ["region"]}}}))
        st = cluster.wait_for("the backfill running beside version 1", lambda: (
            (s := status_of(cluster, ns)).get("rollout", {}).get("step") == "Backfilling" and s), 60)
        versioned = st["rollout"]["outputTopic"]
        assert versioned == f"{out}-v2" and st["lastUpgrade"]["decision"] == "replace"
        assert st["output"]["topic"] == out  # version 1 serves until version 2 caught up
        st = cluster.wait_for("version 2 serving from its own topic", lambda: (
            (s := status_of(cluster, ns)).get("lastUpgrade", {}).get("outcome") in ("Succeeded", "RolledBack",
                                                                                      "Failed") and s),
            UPGRADE_TIMEOUT)
        assert st["lastUpgrade"]["outcome"] == "Succeeded", st["lastUpgrade"]
        assert st["output"]["topic"] == versioned and st["plan"]["version"] == 2
        assert events(cluster, ns, "BackfillCaughtUp") and events(cluster, ns, "OutputSwitched")
        # the versioned topic holds the new counts for the whole history, each window once
        got = consume(cluster.bootstrap, versioned, len(by_region), READY_TIMEOUT, committed=True)
        assert per_window(got, "region") == dict(by_region) and len(got) == len(by_region), got
        # version 1 goes 5 s after it retired: checkpoint, consumer and marker groups, its topic
        v1_group = v1["identity"]["consumerGroup"]
        cluster.wait_for("version 1 cleaned up", lambda: [
            (v["version"], v["state"]) for v in status_of(cluster, ns).get("versions", [])
        ] == [(2, "Running")], 120)
        assert events(cluster, ns, "CheckpointRemoved") and events(cluster, ns, "VersionCleanedUp")
        assert not [g for g in groups(cluster.bootstrap) if g == v1_group or g.startswith(v1_group + ".")]
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topics = admin.list_topics(timeout=10).topics
        assert out not in topics and versioned in topics
        assert cluster.get("deployment", ns, "clicks-backfill") is None

        # a replace that fails its gate: a GROUP BY key that fails at run time (an ANSI cast of
        # "r0" to INT); its backfill is discarded, version 2 never stopped, and what version 3
        # left (its checkpoint, groups and topic) goes at once
        v2_group = st["identity"]["consumerGroup"]
        cluster.kubectl("patch", "sq", "clicks", "-n", ns, "--type=merge", "-p", json.dumps({"spec": {
            "sql": WINDOWED.format(key="CAST(region AS INT) AS r").replace(
                "), CAST(region AS INT) AS r", "), CAST(region AS INT)"),
            "sink": {"key": ["r"]}}}))
        st = cluster.wait_for("the failing backfill rolled back", lambda: (
            (s := status_of(cluster, ns)).get("lastUpgrade", {}).get("outcome") in ("RolledBack", "Failed")
            and not s.get("rollout") and s), UPGRADE_TIMEOUT)
        last = st["lastUpgrade"]
        assert last["outcome"] == "RolledBack" and last["rollback"] == "discard", last
        assert last["error"]["class"] == "CAST_INVALID_INPUT", last
        assert st["plan"]["version"] == 2 and st["output"]["topic"] == versioned
        cluster.wait_for("version 3's leftovers removed", lambda: [
            (v["version"], v["state"]) for v in status_of(cluster, ns).get("versions", [])
        ] == [(2, "Running")], 120)
        v3_group = v2_group.rsplit(".v", 1)[0] + ".v3"
        assert not [g for g in groups(cluster.bootstrap) if g == v3_group or g.startswith(v3_group + ".")]
        topics = admin.list_topics(timeout=10).topics
        assert f"{out}-v3" not in topics and versioned in topics
        assert cluster.get("deployment", ns, "clicks-backfill") is None

        # deletionPolicy Delete removes the whole inventory: the running version's topic and groups,
        # the state volume (every version's checkpoint)
        cluster.kubectl("delete", "sq", "clicks", "-n", ns, "--timeout=180s")
        cluster.wait_for("the state claim deleted", lambda: cluster.get("pvc", ns, "clicks-state") is None,
                         120)
        assert versioned not in admin.list_topics(timeout=10).topics
        assert not [g for g in groups(cluster.bootstrap) if g == v2_group or g.startswith(v2_group + ".")]
    except Exception as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(ns)}") from exc


def status_of(cluster: E2ECluster, ns: str, name: str = "clicks") -> dict[str, Any]:
    return dict(((cluster.get("streamingquery", ns, name) or {}).get("status")) or {})

