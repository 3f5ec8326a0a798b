"""End to end through driver and executor pods: exactly-once output written by the tasks (QueryCluster
``spec.exactlyOnce.writers: tasks``, issue 31).

Steady input (20 records/s, two source partitions) into a stateless exactly-once query run by two
executor pods that Spark's Kubernetes scheduler creates; every output record is written by a task
on an executor, in a transaction per output partition. An executor pod killed (force-deleted) while
the query runs, then the driver killed with SIGKILL (its executors go with it): the output, read
with read_committed, holds every input record exactly once. The SIGSTOP zombie: an active driver
with task writers paused past its Lease while its executor runs on; the standby takes over and its
tasks write on; the zombie, resumed, commits nothing and stands by: exactly once again. Malformed
records sent along the way reach the dead-letter topic with their batches, in the tasks'
transactions: each exactly once, through the executor and driver kills.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterable

import pytest
from cluster import E2ECluster
from confluent_kafka import Consumer, Producer, TopicPartition
from test_queries import READY_TIMEOUT, cluster_doc, consume, create_topics, executor_pods
from test_standby import LEASE_SECONDS, assert_exactly_once, feed_query, ready_standby

from tests.support.feed import Feed

pytestmark = pytest.mark.e2e


def running_executors(cluster: E2ECluster, ns: str, old: Iterable[str] = (), *,
                      all_new: bool = False) -> list[str] | None:
    """The two running executor pods, once at least one of them (``all_new``: both) is not in ``old``."""
    names = [p["metadata"]["name"] for p in executor_pods(cluster, ns, "feed")
             if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    new = [n for n in names if n not in set(old)]
    enough = len(new) == len(names) if all_new else bool(new) or not set(old)
    return names if len(names) == 2 and enough else None


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


def test_task_writers_on_two_executors_lose_and_repeat_nothing_when_an_executor_and_the_driver_die(
        cluster: E2ECluster, ns: str) -> None:
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(
        cluster_doc(ns, cluster.bootstrap, executors=2, storage={"accessMode": "ReadWriteMany"},
                    executor={"requests": {"cpu": "250m", "memory": "512Mi"}},
                    exactlyOnce={"writers": "tasks"}),
        feed_query(ns, src, out))
    feed = Feed(cluster.bootstrap, src)
    try:
        first = cluster.wait_for("two executor pods", lambda: running_executors(cluster, ns), READY_TIMEOUT)
        cluster.wait_for("the first output", lambda: len(consume(cluster.bootstrap, out, 20, 5, True)) >= 20,
                         READY_TIMEOUT)
        # the tasks wrote it: their transactions committed the fence group's offset
        query = cluster.get("streamingquery", ns, "feed") or {}
        fence = f"{query['status']['identity']['consumerGroup']}.eos.writers"
        assert fence_offset(cluster.bootstrap, fence, out) > 0
        bad = send_malformed(cluster.bootstrap, src, ["bad-1", "bad-2"])

        # 1. an executor pod force-deleted while the query runs: Spark retries its tasks on the
        # other executor or on the replacement it asks for
        cluster.kubectl("delete", "pod", "-n", ns, first[0], "--grace-period=0", "--force", "--wait=false")
        second = cluster.wait_for("a replacement executor", lambda: running_executors(cluster, ns, first),
                                  READY_TIMEOUT)
        bad += send_malformed(cluster.bootstrap, src, ["bad-3", "bad-4"])
        time.sleep(5)

        # 2. the driver killed with SIGKILL: its executors go with it, the restarted driver replays
        # the batch it left and skips the partitions already committed
        before = fence_offset(cluster.bootstrap, fence, out)
        cluster.kill_driver(ns, "feed")
        cluster.wait_for("an active driver again", lambda: cluster.active_pod(ns, "feed"), READY_TIMEOUT)
        cluster.wait_for("two executors of the new driver",
                         lambda: running_executors(cluster, ns, second, all_new=True), READY_TIMEOUT)
        cluster.wait_for("a batch written by the restarted driver's tasks",
                         lambda: fence_offset(cluster.bootstrap, fence, out) > before, READY_TIMEOUT)
        bad += send_malformed(cluster.bootstrap, src, ["bad-5"])
        time.sleep(5)
        sent = feed.stop()
        assert_exactly_once(cluster, ns, out, sent)
        letters = consume(cluster.bootstrap, f"{out}.dlq", len(bad), 60, True)
        assert sorted(r["id"] for r in letters) == sorted(bad)  # each dead letter once
    except Exception as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(ns)}") from exc
    finally:
        feed.stop()


def test_a_paused_driver_s_tasks_cannot_commit_after_its_standby_took_over(cluster: E2ECluster,
                                                                          ns: str) -> None:
    """The SIGSTOP zombie with task writers: the active driver (its executors running on) paused
    past its Lease; the standby takes over and joins the fence group, its tasks write on; the
    zombie, resumed, finds itself fenced, writes nothing and stands by."""
    src, out = f"{ns}-events", f"{ns}-events-out"
    create_topics(cluster.bootstrap, src, out)
    cluster.apply(
        cluster_doc(ns, cluster.bootstrap, executors=1, storage={"accessMode": "ReadWriteMany"},
                    executor={"requests": {"cpu": "250m", "memory": "512Mi"}}, standbyReplicas=1,
                    exactlyOnce={"writers": "tasks"}),
        feed_query(ns, src, out))
    feed = Feed(cluster.bootstrap, src)
    try:
        active = cluster.wait_for("an active driver", lambda: cluster.active_pod(ns, "feed"), READY_TIMEOUT)
        first = active["metadata"]["name"]
        standby = cluster.wait_for("a warm standby", lambda: ready_standby(cluster, ns, first), READY_TIMEOUT)
        query = cluster.get("streamingquery", ns, "feed") or {}
        fence = f"{query['status']['identity']['consumerGroup']}.eos.writers"
        cluster.wait_for("batches written by the tasks",
                         lambda: fence_offset(cluster.bootstrap, fence, out) > 2, READY_TIMEOUT)
        cluster.signal_pod(active, signal.SIGSTOP)
        try:
            cluster.wait_for("the standby to take over on expiry", lambda: (
                (p := cluster.active_pod(ns, "feed")) is not None and p["metadata"]["name"] == standby),
                LEASE_SECONDS * 4)
            paused_at = fence_offset(cluster.bootstrap, fence, out)
            cluster.wait_for("the new driver's tasks writing",
                             lambda: fence_offset(cluster.bootstrap, fence, out) > paused_at, READY_TIMEOUT)
        finally:
            cluster.signal_pod(active, signal.SIGCONT)
        cluster.wait_for("the zombie to stand by", lambda: ready_standby(cluster, ns, standby) == first,
                         READY_TIMEOUT)
        time.sleep(4)
        sent = feed.stop()
        assert_exactly_once(cluster, ns, out, sent)
    except Exception as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnostics(ns)}") from exc
    finally:
        feed.stop()
