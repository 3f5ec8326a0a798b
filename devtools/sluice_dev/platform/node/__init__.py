"""A real Kubernetes node for the local platform: containerd + runc + CNI bridge, kubelet,
kube-proxy, CoreDNS (``sluice-dev platform up --node kubelet``).

The platform component interface: ``provision()``, ``start(state_dir)``, ``stop(state_dir)``;
plus ``network_up(state_dir)``, the bridge and node IP that Kafka and the API server bind
before the node starts, and ``leftovers(state_dir)``, what a stopped node left on the machine
(the tests require it to be empty). Modules: ``config`` (pure rendering of every file and
argv), ``provision`` (Debian packages, Go builds), ``images`` (the local pause, test and
CoreDNS images), ``dns`` (the cluster DNS objects), ``lifecycle`` (start/stop), ``teardown``
(removal of processes, mounts, network objects and iptables rules; the check).
"""

from sluice_dev.platform.node.config import NODE_NAME, PAUSE_IMAGE, TEST_IMAGE, node_ip
from sluice_dev.platform.node.lifecycle import leftovers, load_images, network_up, start, stop, tag_image
from sluice_dev.platform.node.provision import provision

__all__ = [
    "NODE_NAME", "PAUSE_IMAGE", "TEST_IMAGE",
    "leftovers", "load_images", "network_up", "node_ip", "provision", "start", "stop", "tag_image",
]
