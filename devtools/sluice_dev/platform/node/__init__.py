"""A real Kubernetes node for the local platform: containerd + runc + CNI bridge, kubelet,
kube-proxy, CoreDNS (``sluice-dev platform up --node kubelet``).

The platform component interface: ``provision()``, ``start(state_dir)``, ``stop(state_dir)``;
plus ``network_up(state_dir)``, the bridge and node IP that Kafka and the API server bind
before the node starts, and ``leftovers(state_dir)``, what a stopped node left on the machine
(the tests require it to be empty). Modules: ``config`` (pure rendering of every file and
argv), ``provision`` (Debian packages, Go builds), ``images`` (the local pause, test and
CoreDNS images), ``dns`` (the cluster DNS objects), ``lifecycle`` (start/stop), ``teardown``
(removal of processes, mounts, network objects and iptables rules; the check), ``topology``
(a second node, ``sluice-node-2``, in a network namespace of its own: ``start(state_dir,
nodes=2)``; ``power_off``/``power_on`` of one node).
"""

from sluice_dev.platform.node.config import NODE_NAME, PAUSE_IMAGE, TEST_IMAGE, node_ip
from sluice_dev.platform.node.lifecycle import (
    leftovers,
    load_images,
    network_up,
    power_off,
    power_on,
    start,
    started_nodes,
    stop,
    tag_image,
)
from sluice_dev.platform.node.provision import provision
from sluice_dev.platform.node.topology import NODE_MONITOR_GRACE_PERIOD

__all__ = [
    "NODE_MONITOR_GRACE_PERIOD", "NODE_NAME", "PAUSE_IMAGE", "TEST_IMAGE",
    "leftovers", "load_images", "network_up", "node_ip", "power_off", "power_on", "provision", "start",
    "started_nodes", "stop", "tag_image",
]
