"""The node-loss events of ``bench_failover.py``, on the platform's two nodes.

Both queries keep their checkpoint in the platform's object store (so that their drivers may run on
either node) and have a short driver Lease (``--node-lease``, 5 s by default):

* ``node-standby``: ``standbyReplicas: 1``; before each event the active driver is moved to
  ``sluice-node-2`` and its standby to ``sluice-node`` (the standby deleted until the scheduler puts
  its replacement on node 2, then a kill -9 of the active driver on node 1); the event powers node 2
  off: the standby takes over once the Lease expires;
* ``node-cold``: ``standbyReplicas: 0``; the driver is moved to node 2 (node 1 cordoned while its
  pod is replaced); the event powers node 2 off: the pod is evicted once the node is NotReady (20 s
  node-monitor grace period) and its toleration (10 s) passed, and its replacement on node 1
  resumes from the object store.

Node 2 is powered on again once the event is measured.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

from bench_failover import Platform, ready
from bench_objectstore import object_store
from sluice_dev.platform import node

from tests.support.waiting import eventually

NODE_1, NODE_2 = "sluice-node", "sluice-node-2"
KINDS = ("node-standby", "node-cold")
#: the queries of the node-loss events: name -> standbys
QUERIES = {"node-standby": ("warm-s3", 1), "node-cold": ("cold-s3", 0)}
LEASE_SECONDS = 5
SETTLE_TIMEOUT = 600


def node_of(pod: dict[str, Any] | None) -> str | None:
    return None if pod is None else pod["spec"].get("nodeName")


def namespace(p: Platform, lease_seconds: int = LEASE_SECONDS) -> str:
    """A namespace whose QueryCluster keeps checkpoints in the object store, with a short Lease."""
    ns = p.namespace("bench-nodeloss")
    object_store(p, ns, p.state_dir)
    p.kubectl("patch", "querycluster", "default", "-n", ns, "--type=merge", "-p",
              json.dumps({"spec": {"lease": {"durationSeconds": lease_seconds}}}))
    return ns


def settled(p: Platform, ns: str, name: str, standbys: int) -> bool:
    pods = p.pods(ns, name)
    return p.active(ns, name) is not None and len(pods) == 1 + standbys and all(ready(x) for x in pods)


def _wait(what: str, check: Callable[[], Any]) -> Any:
    return eventually(check, what=what, timeout=SETTLE_TIMEOUT, interval=0.5)


def active_on_node_2(p: Platform, ns: str, name: str, standbys: int) -> None:
    """The query's active driver on node 2 (its standby, if any, on node 1), settled."""
    _wait(f"{name} settled", lambda: settled(p, ns, name, standbys))
    active = p.active(ns, name)
    if node_of(active) == NODE_2:
        return
    assert active is not None
    if standbys:
        standby = next(x for x in p.pods(ns, name) if x["metadata"]["name"] != active["metadata"]["name"])
        if node_of(standby) != NODE_2:  # its replacement goes to node 2 (anti-affinity to the active)
            p.kubectl("delete", "pod", standby["metadata"]["name"], "-n", ns, "--wait=false")
            _wait(f"{name}'s standby on node 2", lambda: settled(p, ns, name, standbys) and any(
                node_of(x) == NODE_2 for x in p.pods(ns, name)))
        killed, restarts = active["metadata"]["name"], restart_count(active)
        p.signal(active, signal.SIGKILL)
        # the killed driver's container back and warm (its pod may still look Ready for a moment)
        _wait(f"{killed} restarted and warm as the standby", lambda: any(
            x["metadata"]["name"] == killed and restart_count(x) > restarts and ready(x)
            for x in p.pods(ns, name)))
    else:
        p.kubectl("cordon", NODE_1)
        try:
            p.kubectl("delete", "pod", active["metadata"]["name"], "-n", ns, "--wait=false")
            _wait(f"{name}'s driver on node 2", lambda: node_of(p.active(ns, name)) == NODE_2)
        finally:
            p.kubectl("uncordon", NODE_1)
    _wait(f"{name} active on node 2, settled", lambda: node_of(p.active(ns, name)) == NODE_2
          and settled(p, ns, name, standbys))


def restart_count(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return int(statuses[0].get("restartCount", 0)) if statuses else 0


def power_off_node_2(p: Platform) -> None:
    node.power_off(p.state_dir, NODE_2)


def power_on_node_2(p: Platform) -> None:
    node.power_on(p.state_dir, NODE_2)
