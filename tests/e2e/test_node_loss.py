"""End to end on two nodes: the loss of the active driver's node, checkpoints in an object store.

The platform of this module is its own (``two_nodes``): ``sluice-node`` and ``sluice-node-2``, a
control plane whose node-monitor grace period is 20 s, the operator from the chart, s3proxy on the
node address. An exactly-once query (1 s trigger, 5 s Lease) with steady input; the node the
active driver runs on is powered off (``sluice-dev node stop``: its kubelet, containerd and every
container killed at once, its pod network gone):

* with a standby on the other node (the drivers spread over nodes: their checkpoint is in the
  object store): the standby takes over once the Lease expires, on the same s3a checkpoint; the
  lost pod is evicted after its short toleration and replaced on the node that is left, where it
  warms up as the new standby;
* without a standby: the driver's pod is evicted after the node-monitor grace period and its
  toleration, and its replacement on the other node resumes from the object store.

Either way every input record is in the output exactly once (read_committed), and the node powered
on again is Ready.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster import E2ECluster
from test_objectstore import object_store, storage_docs
from test_queries import READY_TIMEOUT, cluster_doc, create_topics, query_doc
from test_standby import assert_exactly_once, ready_standby, takeover_record

from tests.support.feed import Feed

pytestmark = pytest.mark.e2e

NODE_1, NODE_2 = "sluice-node", "sluice-node-2"
SCHEMA = [{"name": "id", "type": "int"}, {"name": "k", "type": "string"}]
LEASE_SECONDS = 5
#: NotReady within the grace period (20 s) plus a monitor period and a lease renewal, then the
#: drivers' toleration (10 s), a replacement pod scheduled, its image unpacked and its JVM started
RESCHEDULED_WITHIN = 240.0


@pytest.fixture(scope="module")
def store(two_nodes: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from object_store(two_nodes, tmp_path_factory)


def docs(cluster: E2ECluster, ns: str, store: dict[str, str], src: str, out: str,
         standbys: int) -> list[dict[str, Any]]:
    secret, storage = storage_docs(ns, store, f"e2e-{ns}")
    query = query_doc(ns, "feed", {
        "sources": [{"name": "events", "topic": src, "schema": SCHEMA}], "sql": "SELECT id, k FROM events",
        "sink": {"topic": out, "outputMode": "append", "delivery": "exactlyOnce"},
        "trigger": {"processingTime": "1 second"},
    })
    return [secret, cluster_doc(ns, cluster.bootstrap, standbyReplicas=standbys, storage=storage,
                                lease={"durationSeconds": LEASE_SECONDS}), query]


def node_of(pod: dict[str, Any] | None) -> str | None:
    return None if pod is None else pod["spec"].get("nodeName")


def node_ready(cluster: E2ECluster, name: str) -> bool:
    node = cluster.get("node", "", name) or {}
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


class Power:
    """The nodes this test powered off, powered on again at the end whatever happened (the next
    test needs both)."""

    def __init__(self, cluster: E2ECluster) -> None:
        assert cluster.power_off is not None and cluster.power_on is not None
        self.cluster, self.off = cluster, set[str]()

    def cut(self, name: str) -> float:
        assert self.cluster.power_off is not None
        self.off.add(name)
        self.cluster.power_off(name)
        return time.monotonic()

    def restore_then_exactly_once(self, ns: str, out: str, feed: Feed) -> int:
        """Power back on (the nodes Ready), then, input stopped, every record sent in the output
        exactly once; how many were sent."""
        self.restore()
        assert node_ready(self.cluster, NODE_2)
        time.sleep(4)
        sent = feed.stop()
        assert_exactly_once(self.cluster, ns, out, sent)
        return sent

    def restore(self) -> None:
        assert self.cluster.power_on is not None
        for name in sorted(self.off):
            self.cluster.power_on(name)
            self.off.discard(name)


@pytest.mark.timeout(1200)
def test_a_node_loss_with_a_standby_on_the_other_node_is_taken_over_exactly_once(
    two_nodes: E2ECluster, two_nodes_ns: str, store: dict[str, str],
) -> None:
    cluster, ns = two_nodes, two_nodes_ns
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(*docs(cluster, ns, store, src, out, standbys=1))
    feed, power = Feed(cluster.bootstrap, src), Power(cluster)
    try:
        active = cluster.wait_for("an active driver", lambda: cluster.active_pod(ns, "feed"), READY_TIMEOUT)
        first = active["metadata"]["name"]
        standby = cluster.wait_for("a warm standby", lambda: ready_standby(cluster, ns, first), READY_TIMEOUT)
        pods = {p["metadata"]["name"]: node_of(p) for p in cluster.driver_pods(ns, "feed")}
        assert {pods[active["metadata"]["name"]], pods[standby]} == {NODE_1, NODE_2}, pods  # spread
        assert cluster.query_condition(ns, "feed", "NodeLossTolerant") == "True"
        if node_of(active) != NODE_2:  # the active driver to node 2, whose loss leaves the operator be
            cluster.signal_pod(active, signal.SIGKILL)
            cluster.wait_for("the standby on node 2 to take over",
                             lambda: node_of(cluster.active_pod(ns, "feed")) == NODE_2, 120)
            cluster.wait_for("the killed driver back as a warm standby", lambda: ready_standby(
                cluster, ns, standby) is not None, READY_TIMEOUT)
        lost = cluster.active_pod(ns, "feed")
        assert lost is not None and node_of(lost) == NODE_2
        time.sleep(4)

        cut = power.cut(NODE_2)
        gone = lost["metadata"]["name"]
        taker = cluster.wait_for("the standby on node 1 to take over", lambda: (
            (p := cluster.active_pod(ns, "feed")) is not None and p["metadata"]["name"] != gone and p), 120)
        took = time.monotonic() - cut
        assert node_of(taker) == NODE_1
        record = takeover_record(cluster, ns)
        assert record is not None and record.from_pod == gone, record
        assert record.to_pod == taker["metadata"]["name"]
        # the lost pod is evicted after its toleration; its replacement stands by on node 1
        cluster.wait_for("a replacement standby on the node that is left", lambda: (
            (name := ready_standby(cluster, ns, taker["metadata"]["name"])) is not None
            and name != gone), RESCHEDULED_WITHIN)
        replaced = time.monotonic() - cut
        sent = power.restore_then_exactly_once(ns, out, feed)
        print(f"node loss with a standby: taken over {took:.1f}s after the power cut, a standby again "
              f"after {replaced:.1f}s; {sent} records once")
    finally:
        feed.stop()
        power.restore()


@pytest.mark.timeout(1200)
def test_a_node_loss_without_a_standby_reschedules_the_driver_which_resumes_from_the_store(
    two_nodes: E2ECluster, two_nodes_ns: str, store: dict[str, str],
) -> None:
    cluster, ns = two_nodes, two_nodes_ns
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    feed, power = Feed(cluster.bootstrap, src), Power(cluster)
    # the driver on node 2: node 1 cordoned while it is scheduled
    cluster.kubectl("cordon", NODE_1)
    try:
        cluster.apply(*docs(cluster, ns, store, src, out, standbys=0))
        active = cluster.wait_for("an active driver on node 2", lambda: cluster.active_pod(ns, "feed"),
                                  READY_TIMEOUT)
    finally:
        cluster.kubectl("uncordon", NODE_1)
    try:
        assert node_of(active) == NODE_2
        assert cluster.query_condition(ns, "feed", "NodeLossTolerant") == "True"  # starts again elsewhere
        time.sleep(5)
        cut = power.cut(NODE_2)
        moved = cluster.wait_for("the driver rescheduled on node 1 and active", lambda: (
            (p := cluster.active_pod(ns, "feed")) is not None and node_of(p) == NODE_1 and p),
            RESCHEDULED_WITHIN)
        took = time.monotonic() - cut
        assert moved["metadata"]["name"] != active["metadata"]["name"]
        sent = power.restore_then_exactly_once(ns, out, feed)
        print(f"node loss without a standby: active again on {NODE_1} {took:.1f}s after the power cut; "
              f"{sent} records once")
    finally:
        feed.stop()
        power.restore()
