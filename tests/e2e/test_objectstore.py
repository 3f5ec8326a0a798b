"""End to end through driver pods with the checkpoints in an object store (``s3a://``).

A real s3proxy on the node's address (the platform's object store), a QueryCluster with
``storage.objectStore`` and a credentials Secret, an exactly-once query with a standby and
``deletionPolicy: Delete``, steady input:

* no state claim; the drivers' checkpoint, its epochs and their term claims are objects;
* a zombie: the active driver paused (SIGSTOP) past its lease; the standby takes over on expiry
  in a new epoch on the same s3a checkpoint, and the zombie, resumed, stops without writing and
  waits as a standby (a takeover after a kill -9 on the store is tests/e2e/test_node_loss.py's,
  a node's power loss being the harder case);
* an in-place upgrade (a condition that keeps every row) by hand-off on the same checkpoint;
* a replace with hand-off (a second source): plan version 2 on the prefix ``v2``; version 1's
  objects are removed by the active driver once its 5 s retention passed;
* every input record in the output exactly once (read_committed) after all of it;
* deleting the query: the purge pod deletes every object under the query's prefix, and only
  those (another prefix in the bucket stays).

``E2E_CLUSTER=kind`` needs an S3-compatible store reachable from the pods and the test process:
``E2E_S3_ENDPOINT``, ``E2E_S3_BUCKET``, ``E2E_S3_ACCESS_KEY``, ``E2E_S3_SECRET_KEY``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import E2ECluster
from sluice_dev.platform import common
from sluice_dev.platform import objectstore as component
from test_queries import READY_TIMEOUT, cluster_doc, create_topics, produce, query_doc
from test_standby import assert_exactly_once, events, ready_standby, takeover_record

from tests.support.feed import Feed

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def store(cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from object_store(cluster, tmp_path_factory)


def object_store(cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The object store the pods use: s3proxy on the node's address (where Kafka's pod listener
    is), or the one ``E2E_S3_*`` names on kind."""
    if cluster.kind == "kind":
        names = ("E2E_S3_ENDPOINT", "E2E_S3_BUCKET", "E2E_S3_ACCESS_KEY", "E2E_S3_SECRET_KEY")
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            pytest.fail(f"E2E_CLUSTER=kind: the object-store tests need {', '.join(missing)}", pytrace=False)
        yield {n.removeprefix("E2E_S3_").lower(): os.environ[n] for n in names}
        return
    state = tmp_path_factory.mktemp("e2e-objectstore")
    address = cluster.bootstrap.rsplit(":", 1)[0]
    try:
        started = component.start(state, pod_address=address)
    except common.PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        env = started.env
        yield {"endpoint": env["SLUICE_S3_ENDPOINT"], "bucket": env["SLUICE_S3_BUCKET"],
               "access_key": env["SLUICE_S3_ACCESS_KEY"], "secret_key": env["SLUICE_S3_SECRET_KEY"]}
    finally:
        component.stop(state)


def storage_docs(ns: str, store: dict[str, str], root: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The credentials Secret ``s3`` and the QueryCluster's ``storage`` for checkpoints under
    ``s3a://<bucket>/<root>``."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": ns},
              "stringData": {"accessKey": store["access_key"], "secretKey": store["secret_key"]}}
    object_store = {"uri": f"s3a://{store['bucket']}/{root}", "endpoint": store["endpoint"],
                    "pathStyleAccess": True, "credentialsSecret": "s3"}
    return secret, {"objectStore": object_store}


def keys(store: dict[str, str], prefix: str) -> list[str]:
    client = component.S3(store["endpoint"], store["access_key"], store["secret_key"])
    return sorted(client.keys(store["bucket"], prefix))


SCHEMA = [{"name": "id", "type": "int"}, {"name": "k", "type": "string"}]
#: the in-place edit: a condition that keeps every row
WHERE = "SELECT id, k FROM events WHERE id >= 0"
#: the replace: a second source
UNION = f"{WHERE} UNION ALL SELECT id, k FROM extra"
EXTRA_RECORDS = 5
LEASE_SECONDS = 10
UPGRADE_TIMEOUT = 420.0


def feed_query(ns: str, src: str, out: str, sql: str = "SELECT id, k FROM events",
               extra: str | None = None) -> dict[str, Any]:
    sources = [{"name": "events", "topic": src, "schema": SCHEMA}]
    if extra is not None:
        sources.append({"name": "extra", "topic": extra, "schema": SCHEMA})
    return query_doc(ns, "feed", {
        "sources": sources, "sql": sql,
        "sink": {"topic": out, "outputMode": "append", "delivery": "exactlyOnce"},
        "trigger": {"processingTime": "1 second"},
        "deletionPolicy": "Delete",
        "cleanup": {"retainVersions": 0, "retention": "5s"},
    })


def status(cluster: E2ECluster, ns: str) -> dict[str, Any]:
    return dict((cluster.get("streamingquery", ns, "feed") or {}).get("status") or {})


def upgrade_ended(cluster: E2ECluster, ns: str, generation: int) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        st = status(cluster, ns)
        last = st.get("lastUpgrade") or {}
        if st.get("rollout", {}).get("step") not in (None, "Failed") or last.get("generation") != generation:
            return None
        return st if last.get("outcome") in ("Succeeded", "RolledBack", "Failed") else None

    st: dict[str, Any] = cluster.wait_for(f"the upgrade of generation {generation}", ended, UPGRADE_TIMEOUT)
    assert st["lastUpgrade"]["outcome"] == "Succeeded", st["lastUpgrade"]
    return st


def generation(cluster: E2ECluster, ns: str) -> int:
    return int((cluster.get("streamingquery", ns, "feed") or {})["metadata"]["generation"])


@pytest.mark.timeout(1800)
def test_checkpoints_in_an_object_store_fail_over_upgrade_and_are_purged(
    cluster: E2ECluster, ns: str, store: dict[str, str],
) -> None:
    src, out, extra = f"{ns}-events", f"{ns}-events-out", f"{ns}-extra"
    create_topics(cluster.bootstrap, src, out)
    root = f"e2e-{ns}"
    # another query's objects under the same root: the purge must leave them
    neighbour = f"{root}/e2e/{ns}/feed2/v1/offsets/0"
    client = component.S3(store["endpoint"], store["access_key"], store["secret_key"])
    assert client.put(store["bucket"], neighbour, b"{}").status == 200
    secret, storage = storage_docs(ns, store, root)
    cluster.apply(secret, cluster_doc(ns, cluster.bootstrap, standbyReplicas=1, storage=storage),
                  feed_query(ns, src, out))
    prefix = f"{root}/e2e/{ns}/feed/"
    feed = Feed(cluster.bootstrap, src)
    try:
        active = cluster.wait_for("an active driver", lambda: cluster.active_pod(ns, "feed"), READY_TIMEOUT)
        first = active["metadata"]["name"]
        standby = cluster.wait_for("a warm standby", lambda: ready_standby(cluster, ns, first), READY_TIMEOUT)
        assert cluster.query_condition(ns, "feed", "NodeLossTolerant") == "True"
        assert not json.loads(cluster.kubectl("get", "pvc", "-n", ns, "-o", "json"))["items"]
        cluster.wait_for("the checkpoint's commits in the store", lambda: any(
            "/commits/" in k for k in keys(store, prefix + "v1/")), 120)
        objects = keys(store, prefix + "v1/")
        assert any(k.endswith("/_term") for k in objects), objects  # the term's conditional claim
        time.sleep(3)

        # 1. the zombie: the active driver paused past its lease; the standby takes over on expiry
        # in a new term, on the same s3a checkpoint
        paused = cluster.active_pod(ns, "feed")
        assert paused is not None and paused["metadata"]["name"] == first
        cluster.signal_pod(paused, signal.SIGSTOP)
        try:
            cluster.wait_for("the standby to take over on expiry", lambda: (
                (p := cluster.active_pod(ns, "feed")) is not None and p["metadata"]["name"] == standby),
                LEASE_SECONDS * 4)
            record = takeover_record(cluster, ns)
            assert record is not None and (record.from_pod, record.to_pod) == (first, standby), record
            time.sleep(4)
        finally:
            cluster.signal_pod(paused, signal.SIGCONT)
        def zombie_stands_by() -> bool:
            active = cluster.active_pod(ns, "feed")
            return active is not None and ready_standby(cluster, ns, active["metadata"]["name"]) == first

        cluster.wait_for("the zombie to stand by", zombie_stands_by, 120)
        epochs = {k.split("/epochs/", 1)[1].split("/", 1)[0] for k in keys(store, prefix + "v1/")
                  if "/epochs/" in k}
        assert len(epochs) >= 2, epochs  # a term per takeover (older ones pruned)
        time.sleep(3)

        # 2. an in-place upgrade by hand-off, on the same s3a checkpoint
        cluster.apply(feed_query(ns, src, out, sql=WHERE))
        st = upgrade_ended(cluster, ns, generation(cluster, ns))
        assert st["plan"]["version"] == 1  # in place: the same version, the same checkpoint
        time.sleep(3)

        # 3. a replace with hand-off (a second source): version 2 on a prefix of its own; version
        # 1's objects are removed by the active driver after its retention
        create_topics(cluster.bootstrap, extra)
        produce(cluster.bootstrap, extra, [{"id": -1 - i, "k": "x"} for i in range(EXTRA_RECORDS)])
        cluster.apply(feed_query(ns, src, out, sql=UNION, extra=extra))
        st = upgrade_ended(cluster, ns, generation(cluster, ns))
        assert st["lastUpgrade"]["decision"] == "replace" and st["plan"]["version"] == 2, st["lastUpgrade"]
        assert st["identity"]["checkpointPath"] == f"s3a://{store['bucket']}/{prefix}v2"
        cluster.wait_for("version 1 cleaned up", lambda: [(v["version"], v["state"]) for v in status(
            cluster, ns).get("versions", [])] == [(2, "Running")], 120)
        assert keys(store, prefix + "v1/") == []
        assert any("/commits/" in k for k in keys(store, prefix + "v2/"))
        time.sleep(4)
        sent = feed.stop()
        rows = assert_exactly_once(cluster, ns, out, sent, extra=EXTRA_RECORDS)
        assert sorted(r["id"] for r in rows if r["id"] < 0) == list(range(-EXTRA_RECORDS, 0))
    except BaseException:
        feed.stop()
        raise

    # 4. delete: the purge pod deletes the query's objects, and only those
    assert keys(store, prefix)
    cluster.kubectl("delete", "streamingquery", "feed", "-n", ns, "--wait=true", "--timeout=300s")
    assert keys(store, prefix) == [], cluster.diagnostics(ns)
    assert keys(store, f"{root}/") == [neighbour]
    deleted = [e["message"] for e in events(cluster, ns, "StateDeleted")]
    assert any("deleted the checkpoints under s3a://" in m and '"left": 0' in m for m in deleted), deleted
    assert cluster.get("pod", ns, "feed-purge") is None

