"""End to end through driver and executor pods: exactly-once output written by the tasks (QueryCluster
``spec.exactlyOnce.writers: tasks``, issue 31).

Steady input (20 records/s, two source partitions) into a stateless exactly-once query whose active
driver runs two executor pods that Spark's Kubernetes scheduler creates, and whose standby holds
none (QueryCluster ``spec.standbyExecutors: release``; the default, ``hold``, is what the other
executor test runs): the driver that takes the Lease
asks for them, the one that stands by again gives them back. Every output record is written by a
task on an executor, in a transaction per output partition. One scenario on one query: an executor
pod killed (force-deleted) while the query runs; the SIGSTOP zombie (the active driver paused past
its Lease while its executors run on: the standby takes over and its tasks write on; the zombie,
resumed, commits nothing and stands by); then the active driver killed with SIGKILL (its executors
go with it). The output, read with read_committed, holds every input record exactly once; malformed
records sent along the way reach the dead-letter topic with their batches, in the tasks'
transactions, each exactly once.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterable
from typing import Any

import pytest
from cluster import E2ECluster
from confluent_kafka import Consumer, Producer, TopicPartition
from test_queries import READY_TIMEOUT, cluster_doc, consume, create_topics, executor_pods
from test_standby import LEASE_SECONDS, assert_exactly_once, feed_query, ready_standby

from tests.support.feed import Feed

pytestmark = pytest.mark.e2e


def owned_executors(cluster: E2ECluster, ns: str, driver: str) -> list[dict[str, Any]]:
    """The executor pods of ``driver`` not being deleted (Spark makes the driver pod their owner)."""
    return [p for p in executor_pods(cluster, ns, "feed") if not p["metadata"].get("deletionTimestamp")
            and any(o.get("name") == driver for o in p["metadata"].get("ownerReferences", []))]


def running_executors(cluster: E2ECluster, ns: str, driver: str, old: Iterable[str] = ()) -> list[str] | None:
    """The two running executor pods of ``driver`` (Spark makes the driver pod their owner), once
    at least one of them is not in ``old``."""
    names = [p["metadata"]["name"] for p in owned_executors(cluster, ns, driver)
             if p["status"].get("phase") == "Running"]
    return names if len(names) == 2 and (set(names) - set(old) or not set(old)) else None


def fence_offset(bootstrap: str, group: str, topic: str) -> int:
    """The offset the tasks' transactions committed for the driver's fence group (only task
    transactions commit there: the last batch a task wrote, plus one)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed"})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset)
    finally:
        consumer.close()


def send_malformed(bootstrap: str, topic: str, ids: list[str]) -> list[str]:
    """Records whose ``id`` is no int (the query's column is): each is a dead letter."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for bad in ids:
        producer.produce(topic, json.dumps({"id": bad, "k": "malformed"}).encode())
    assert producer.flush(30) == 0
    return ids


def test_task_writers_on_two_executors_lose_and_repeat_nothing_through_an_executor_loss_a_zombie_and_a_kill(
        cluster: E2ECluster, ns: str) -> None:
    """Two executors for the active driver, a standby without any, the tasks writing: an executor
    of the active driver force-deleted; then the active driver paused (SIGSTOP) past its Lease while
    its executors run on: the standby takes over, asks for executors and its tasks write on; the
    zombie, resumed, commits nothing, gives its executors back and stands by; then the new active
    driver killed with SIGKILL (its executors go with it): the zombie turned standby takes over,
    asks for executors again, replays the batch left and skips the partitions already committed.
    Every record and every dead letter exactly once."""
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(
        cluster_doc(ns, cluster.bootstrap, executors=2, storage={"accessMode": "ReadWriteMany"},
                    executor={"requests": {"cpu": "100m", "memory": "512Mi"}}, standbyReplicas=1,
                    exactlyOnce={"writers": "tasks"}, standbyExecutors="release"),
        feed_query(ns, src, out))
    feed = Feed(cluster.bootstrap, src)
    try:
        active = cluster.wait_for("an active driver", lambda: cluster.active_pod(ns, "feed"), READY_TIMEOUT)
        first = active["metadata"]["name"]
        executors = cluster.wait_for("two executor pods", lambda: running_executors(cluster, ns, first),
                                     READY_TIMEOUT)
        standby = cluster.wait_for("a ready standby", lambda: ready_standby(cluster, ns, first),
                                   READY_TIMEOUT)
        assert owned_executors(cluster, ns, standby) == [], "a standby holds no executor pods"
        cluster.wait_for("the first output", lambda: len(consume(cluster.bootstrap, out, 20, 5, True)) >= 20,
                         READY_TIMEOUT)
        # the tasks wrote it: their transactions committed the fence group's offset
        query = cluster.get("streamingquery", ns, "feed") or {}
        fence = f"{query['status']['identity']['consumerGroup']}.eos.writers"
        assert fence_offset(cluster.bootstrap, fence, out) > 0
        bad = send_malformed(cluster.bootstrap, src, ["bad-1", "bad-2"])

        # 1. an executor pod force-deleted while the query runs: Spark retries its tasks on the
        # other executor or on the replacement it asks for
        cluster.kubectl("delete", "pod", "-n", ns, executors[0], "--grace-period=0", "--force",
                        "--wait=false")
        cluster.wait_for("a replacement executor", lambda: running_executors(cluster, ns, first, executors),
                         READY_TIMEOUT)
        bad += send_malformed(cluster.bootstrap, src, ["bad-3", "bad-4"])
        time.sleep(5)

        # 2. the SIGSTOP zombie: the active driver paused past its Lease, its executors running on
        cluster.signal_pod(active, signal.SIGSTOP)
        try:
            cluster.wait_for("the standby to take over on expiry", lambda: (
                (p := cluster.active_pod(ns, "feed")) is not None and p["metadata"]["name"] == standby),
                LEASE_SECONDS * 4)
            paused_at = fence_offset(cluster.bootstrap, fence, out)
            cluster.wait_for("the new driver's tasks writing",
                             lambda: fence_offset(cluster.bootstrap, fence, out) > paused_at, READY_TIMEOUT)
            # the executors the standby asked for when it took the Lease
            cluster.wait_for("the new driver's two executors",
                             lambda: running_executors(cluster, ns, standby), READY_TIMEOUT)
        finally:
            cluster.signal_pod(active, signal.SIGCONT)
        cluster.wait_for("the zombie to stand by", lambda: ready_standby(cluster, ns, standby) == first,
                         READY_TIMEOUT)
        cluster.wait_for("the zombie to give its executors back",
                         lambda: owned_executors(cluster, ns, first) == [], READY_TIMEOUT)
        bad += send_malformed(cluster.bootstrap, src, ["bad-5"])
        time.sleep(4)

        # 3. the active driver killed with SIGKILL: its executors go with it; the driver that
        # takes over replays the batch it left and skips the partitions already committed
        before = fence_offset(cluster.bootstrap, fence, out)
        killed = cluster.active_pod(ns, "feed")
        assert killed is not None and killed["metadata"]["name"] == standby
        cluster.signal_pod(killed, signal.SIGKILL)
        cluster.wait_for("the former zombie to take over", lambda: (
            (p := cluster.active_pod(ns, "feed")) is not None and p["metadata"]["name"] == first),
            READY_TIMEOUT)
        cluster.wait_for("a batch written by its tasks",
                         lambda: fence_offset(cluster.bootstrap, fence, out) > before, READY_TIMEOUT)
        assert running_executors(cluster, ns, first) is not None  # asked for again at the takeover
        bad += send_malformed(cluster.bootstrap, src, ["bad-6"])
        time.sleep(5)
        sent = feed.stop()
        assert_exactly_once(cluster, ns, out, sent)
        letters = consume(cluster.bootstrap, f"{out}.dlq", len(bad), 60, True)
        assert sorted(r["id"] for r in letters) == sorted(bad)  # each dead letter once
    except Exception as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(ns)}") from exc
    finally:
        feed.stop()
